//! The human rendering of `capstan explain`'s answers.

use std::fmt::Write as _;

use super::pod::PodReport;
use super::{NodeAnswer, NodeReport, PoolReport};
use crate::simulate::table::{columns, dollars};

fn price(n: &NodeAnswer) -> String {
    n.price_per_hour.map_or_else(|| "-".to_owned(), dollars)
}

fn verdict(n: &NodeAnswer) -> String {
    match n.verdict.blocked {
        Some(true) => format!("BLOCKED {}", n.verdict.reason),
        Some(false) => n.verdict.reason.clone(),
        None => "no verdict".to_owned(),
    }
}

/// `capstan explain pod` as text.
pub fn pod(report: &PodReport) -> String {
    let mut rows = vec![
        vec!["Pod".to_owned(), report.pod.clone()],
        vec![
            "Phase".to_owned(),
            match &report.node {
                Some(node) => format!("{} on {node}", report.phase),
                None => report.phase.clone(),
            },
        ],
    ];
    match &report.decision {
        Some(d) => rows.push(vec![
            "Host decided".to_owned(),
            format!(
                "{} ({}x, last {}): {}",
                d.reason,
                d.count,
                d.at.as_deref().unwrap_or("-"),
                d.note
            ),
        ]),
        None => rows.push(vec![
            "Host decided".to_owned(),
            "nothing yet (the pod was never pending for it, or its Events expired)".to_owned(),
        ]),
    }
    for c in &report.claims {
        let state = match (&c.claim, c.devices.is_empty()) {
            (None, _) => "no ResourceClaim yet".to_owned(),
            (Some(claim), true) => format!("{claim}: not allocated"),
            (Some(claim), false) => format!("{claim}: {}", c.devices.join(", ")),
        };
        rows.push(vec![format!("Claim {}", c.name), state]);
    }
    columns("", &rows)
}

/// `capstan explain node` as text.
pub fn node(report: &NodeReport) -> String {
    let n = &report.answer;
    let mut rows = vec![
        vec!["Node".to_owned(), n.node.clone()],
        vec!["NodeClaim".to_owned(), n.node_claim.clone()],
        vec!["NodePool".to_owned(), n.node_pool.clone()],
        vec![
            "Instance".to_owned(),
            format!("{} {} {}", n.instance_type, n.zone, n.capacity_type),
        ],
        vec!["Price ($/h)".to_owned(), price(n)],
        vec![
            "Pods".to_owned(),
            format!(
                "{} (disruption cost {:.2}){}",
                n.pods.len(),
                n.disruption_cost,
                if n.pods.is_empty() {
                    String::new()
                } else {
                    format!(": {}", n.pods.join(", "))
                }
            ),
        ],
        vec![
            "Consolidatable".to_owned(),
            if n.consolidatable { "True" } else { "False" }.to_owned(),
        ],
        vec!["Verdict".to_owned(), verdict(n)],
        vec!["Why".to_owned(), n.verdict.message.clone()],
    ];
    if let Some(since) = &n.verdict.since {
        rows.push(vec!["Since".to_owned(), since.clone()]);
    }
    if !n.verdict.unblock.is_empty() && n.verdict.blocked == Some(true) {
        rows.push(vec!["To unblock".to_owned(), n.verdict.unblock.clone()]);
    }
    if let Some(d) = &n.disruption {
        rows.push(vec!["Disruption".to_owned(), d.clone()]);
    }
    if n.deleting {
        rows.push(vec!["Deleting".to_owned(), "yes".to_owned()]);
    }
    columns("", &rows)
}

/// `capstan explain nodepool` as text.
pub fn pool(report: &PoolReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "NodePool {}: consolidationPolicy {}, consolidateAfter {}, budgets: {}",
        report.node_pool,
        report.consolidation_policy,
        report.consolidate_after,
        if report.budgets.is_empty() {
            "none".to_owned()
        } else {
            report.budgets.join("; ")
        }
    );
    let mut rows = vec![
        ["NODE", "INSTANCE TYPE", "$/H", "PODS", "VERDICT", "WHY"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for n in &report.nodes {
        rows.push(vec![
            n.node.clone(),
            n.instance_type.clone(),
            price(n),
            n.pods.len().to_string(),
            verdict(n),
            n.verdict.message.clone(),
        ]);
    }
    let _ = writeln!(out);
    out.push_str(&columns("", &rows));
    let counts: Vec<String> = report
        .by_reason
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    let _ = writeln!(out, "\nBy verdict: {}", counts.join(", "));
    let _ = write!(out, "Next: {}", report.next.action);
    if !report.next.nodes.is_empty() {
        let _ = write!(out, " {}", report.next.nodes.join(", "));
    }
    let _ = writeln!(out, "\n  {}", report.next.detail);
    out
}
