//! The human rendering of a [`Report`]: aligned tables, prices in $/h with four decimals, the
//! first few instance types of each claim.

use std::fmt::Write as _;

use super::floor::CostFloor;
use super::{PlannedClaim, Report, Total};

/// How many instance types of a claim the table shows (the JSON has them all).
pub const SHOWN_INSTANCE_TYPES: usize = 3;

/// Columns padded to their widest cell, two spaces apart, each line indented by `indent`.
pub(crate) fn columns(indent: &str, rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(width) => *width = (*width).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn dollars(price: f64) -> String {
    format!("{price:.4}")
}

fn types(claim: &PlannedClaim) -> String {
    let shown: Vec<&str> = claim
        .instance_types
        .iter()
        .take(SHOWN_INSTANCE_TYPES)
        .map(String::as_str)
        .collect();
    let more = claim.instance_types.len().saturating_sub(shown.len());
    if more > 0 {
        format!("{} (+{more} more)", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn cheapest(claim: &PlannedClaim) -> String {
    format!(
        "{} {} {}",
        claim.cheapest.instance_type, claim.cheapest.zone, claim.cheapest.capacity_type
    )
}

fn total(label: &str, t: &Total) -> Vec<String> {
    let unpriced = if t.unpriced_nodes > 0 {
        format!(" (+{} unpriced)", t.unpriced_nodes)
    } else {
        String::new()
    };
    vec![
        label.to_owned(),
        t.nodes.to_string(),
        format!("{}{unpriced}", dollars(t.price_per_hour)),
    ]
}

/// The cost floor's row: its price, and how far above it the plan ends.
fn floor_row(floor: &CostFloor, planned: f64) -> Vec<String> {
    let above = if floor.price_per_hour > 0.0 {
        format!(
            " (plan {:+.1}%)",
            (planned / floor.price_per_hour - 1.0) * 100.0
        )
    } else {
        String::new()
    };
    let left_out = if floor.left_out_pods > 0 {
        format!(", {} pod(s) left out", floor.left_out_pods)
    } else {
        String::new()
    };
    vec![
        format!("  cost floor ({} pods{left_out})", floor.pods),
        "-".to_owned(),
        format!("{}{above}", dollars(floor.price_per_hour)),
    ]
}

/// The report as text.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let selector = if report.selector.is_empty() {
        "no selector".to_owned()
    } else {
        format!("selector {}", report.selector)
    };
    let assumed = if report.consolidatable_assumed {
        "assumed for every initialized node whose pool's consolidateAfter is not Never"
    } else {
        "as the dump's Consolidatable conditions say"
    };
    let _ = writeln!(out, "Simulated at {} ({selector})", report.now);
    let i = &report.input;
    let o = &i.objects;
    let _ = writeln!(
        out,
        "Read {} node(s), {} pod(s), {} NodePool(s), {} NodeClaim(s), {} NodeClass(es), {} DaemonSet(s), {} PDB(s), {} namespace(s)",
        o.nodes,
        o.pods,
        o.node_pools,
        o.node_claims,
        o.node_classes,
        o.daemon_sets,
        o.pod_disruption_budgets,
        o.namespaces
    );
    if !i.skipped_kinds.is_empty() {
        let skipped: Vec<String> = i
            .skipped_kinds
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let _ = writeln!(out, "Skipped {}", skipped.join(", "));
    }
    for p in &i.providers {
        let _ = writeln!(out, "Provider {}: {} (sha256 {})", p.name, p.file, p.sha256);
    }
    for s in &i.stand_ins {
        let _ = writeln!(
            out,
            "NodePool {}: {} stood in for by NodeClass {}",
            s.node_pool, s.node_class_ref, s.node_class
        );
    }
    let _ = writeln!(out, "Consolidatable: {assumed}");

    let p = &report.provisioning;
    let _ = writeln!(
        out,
        "\nProvisioning: {} pending pod(s) -> {} new NodeClaim(s), {} on existing capacity, {} unschedulable",
        p.pending_pods,
        p.node_claims.len(),
        p.on_existing_capacity.len(),
        p.unschedulable.len()
    );
    if !p.node_claims.is_empty() {
        let mut rows = vec![vec![
            "NODEPOOL".to_owned(),
            "PODS".to_owned(),
            "$/H".to_owned(),
            "CHEAPEST OFFERING".to_owned(),
            "INSTANCE TYPES".to_owned(),
        ]];
        for c in &p.node_claims {
            rows.push(vec![
                c.node_pool.clone(),
                c.pods.len().to_string(),
                dollars(c.price_per_hour),
                cheapest(c),
                types(c),
            ]);
        }
        out.push_str(&columns("  ", &rows));
    }
    for u in &p.unschedulable {
        let _ = writeln!(out, "  unschedulable {}: {}", u.pod, u.reason);
    }
    for s in &p.skipped_node_pools {
        let _ = writeln!(out, "  nodepool {} left out: {}", s.node_pool, s.reason);
    }

    let c = &report.consolidation;
    let _ = writeln!(out, "\nConsolidation: {} candidate(s)", c.candidates);
    match &c.decision {
        None => {
            let _ = writeln!(out, "  no decision: nothing can go now");
        }
        Some(d) => {
            let _ = writeln!(
                out,
                "  decision: {} {} {} node(s), ${}/h -> ${}/h (saves ${}/h)",
                d.reason,
                d.action,
                d.nodes.len(),
                dollars(d.price_before),
                dollars(d.price_after),
                dollars(d.savings)
            );
            let mut rows = vec![vec![
                "NODE".to_owned(),
                "NODECLAIM".to_owned(),
                "NODEPOOL".to_owned(),
                "TYPE".to_owned(),
                "ZONE".to_owned(),
                "CAPACITY".to_owned(),
                "$/H".to_owned(),
                "PODS".to_owned(),
            ]];
            for n in &d.nodes {
                rows.push(vec![
                    n.node.clone(),
                    n.node_claim.clone(),
                    n.node_pool.clone(),
                    n.instance_type.clone(),
                    n.zone.clone(),
                    n.capacity_type.clone(),
                    dollars(n.price_per_hour),
                    n.pods.len().to_string(),
                ]);
            }
            out.push_str(&columns("    ", &rows));
            if let Some(r) = &d.replacement {
                let _ = writeln!(
                    out,
                    "    replacement: nodepool {}, {} pod(s), ${}/h, cheapest {}, instance types {}",
                    r.node_pool,
                    r.pods.len(),
                    dollars(r.price_per_hour),
                    cheapest(r),
                    types(r)
                );
            }
        }
    }
    for n in &c.refused {
        let _ = writeln!(out, "  refused {} ({}): {}", n.node, n.node_claim, n.reason);
    }
    for n in &c.not_candidates {
        let _ = writeln!(
            out,
            "  not a candidate {} ({}): {}",
            n.node, n.node_claim, n.reason
        );
    }
    if let Some(verdicts) = &c.verdicts {
        let _ = writeln!(
            out,
            "\nVerdicts (as the host would write them after this pass)"
        );
        let mut rows = vec![
            ["NODE", "NODECLAIM", "NODEPOOL", "VERDICT", "WHY"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for n in verdicts {
            rows.push(vec![
                n.node.clone(),
                n.node_claim.clone(),
                n.node_pool.clone(),
                n.verdict.clone(),
                n.reason.clone(),
            ]);
        }
        out.push_str(&columns("  ", &rows));
    }
    for b in &c.budget_errors {
        let _ = writeln!(out, "  nodepool {}: {}", b.node_pool, b.reason);
    }

    let t = &report.totals;
    out.push('\n');
    let mut rows = vec![
        vec!["Totals".to_owned(), "NODES".to_owned(), "$/H".to_owned()],
        total("  now", &t.now),
        total("  after provisioning", &t.after_provisioning),
        total("  after consolidation", &t.after_consolidation),
    ];
    if let Some(floor) = &t.floor {
        rows.push(floor_row(floor, t.after_consolidation.price_per_hour));
    }
    out.push_str(&columns("", &rows));
    out
}
