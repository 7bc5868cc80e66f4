//! `karpenter_voluntary_disruption_*`: disruption decisions, the nodes eligible for each
//! reason, how long deciding took, consolidation timeouts and failed validations.

use std::time::Duration;

use super::labels::{self, labels};
use super::{Counters, Gauges, Histograms, Registrar, durations};

/// The labels of a decision of `candidates` claims for `reason`.
fn decision_labels(decision: &str, reason: &str, candidates: usize) -> labels::Labels {
    labels(&[
        ("decision", decision),
        ("reason", &labels::reason(reason)),
        (
            "consolidation_type",
            labels::consolidation_type(reason, candidates),
        ),
    ])
}

/// Disruption metrics.
#[derive(Debug)]
pub struct Disruption {
    decisions: Counters,
    eligible: Gauges,
    evaluation: Histograms,
    timeouts: Counters,
    failed_validations: Counters,
    queue_failures: Counters,
}

impl Disruption {
    /// Registers the families under `registry` (prefix `karpenter`).
    pub fn register(registry: &mut Registrar<'_>) -> Self {
        let this = Self {
            decisions: Counters::default(),
            eligible: Gauges::default(),
            evaluation: durations(),
            timeouts: Counters::default(),
            failed_validations: Counters::default(),
            queue_failures: Counters::default(),
        };
        let mut d = registry.sub("voluntary_disruption");
        d.register(
            "decisions",
            "Number of disruption decisions performed, by decision, reason and consolidation type",
            this.decisions.clone(),
        );
        d.register(
            "eligible_nodes",
            "Number of nodes eligible for disruption, by disruption reason",
            this.eligible.clone(),
        );
        d.register(
            "decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds, by reason and consolidation type",
            this.evaluation.clone(),
        );
        d.register(
            "consolidation_timeouts",
            "Number of times the consolidation search reached its timeout, by consolidation type",
            this.timeouts.clone(),
        );
        d.register(
            "failed_validations",
            "Number of candidates selected for disruption that failed validation, by consolidation type",
            this.failed_validations.clone(),
        );
        d.register(
            "queue_failures",
            "Number of started disruption decisions that failed (replacements that did not come up), by decision, reason and consolidation type",
            this.queue_failures.clone(),
        );
        for consolidation_type in ["multi", "single"] {
            this.timeouts
                .get_or_create(&labels(&[("consolidation_type", consolidation_type)]))
                .inc_by(0);
        }
        this
    }

    /// Disruption decided `decision` (`delete` or `replace`) of `candidates` claims for
    /// `reason`.
    pub fn decision(&self, decision: &str, reason: &str, candidates: usize) {
        self.decisions
            .get_or_create(&decision_labels(decision, reason, candidates))
            .inc();
    }

    /// `count` nodes are eligible for disruption for `reason` now.
    pub fn eligible(&self, reason: &str, count: usize) {
        #[allow(clippy::cast_precision_loss)]
        self.eligible
            .get_or_create(&labels(&[("reason", &labels::reason(reason))]))
            .set(count as f64);
    }

    /// Evaluating disruption for `reason` (`consolidation_type` as Karpenter's) took `elapsed`.
    pub fn evaluated(&self, reason: &str, consolidation_type: &str, elapsed: Duration) {
        self.evaluation
            .get_or_create(&labels(&[
                ("reason", &labels::reason(reason)),
                ("consolidation_type", consolidation_type),
            ]))
            .observe(elapsed.as_secs_f64());
    }

    /// The consolidation search ran out of time.
    pub fn consolidation_timeout(&self, consolidation_type: &str) {
        self.timeouts
            .get_or_create(&labels(&[("consolidation_type", consolidation_type)]))
            .inc();
    }

    /// A decision failed validation before it started.
    pub fn failed_validation(&self, consolidation_type: &str) {
        self.failed_validations
            .get_or_create(&labels(&[("consolidation_type", consolidation_type)]))
            .inc();
    }

    /// A started decision was rolled back.
    pub fn queue_failure(&self, decision: &str, reason: &str, candidates: usize) {
        self.queue_failures
            .get_or_create(&decision_labels(decision, reason, candidates))
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;

    #[test]
    fn decisions_carry_karpenters_labels() {
        let m = Metrics::new();
        let d = &m.disruption;
        d.decision("delete", "Empty", 2);
        d.decision("replace", "Underutilized", 1);
        d.decision("replace", "Drifted", 1);
        d.eligible("Drifted", 3);
        d.failed_validation("single");
        let text = m.render().unwrap();
        for line in [
            r#"karpenter_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"} 1"#,
            r#"karpenter_voluntary_disruption_decisions_total{decision="replace",reason="underutilized",consolidation_type="single"} 1"#,
            r#"karpenter_voluntary_disruption_decisions_total{decision="replace",reason="drifted",consolidation_type=""} 1"#,
            r#"karpenter_voluntary_disruption_eligible_nodes{reason="drifted"} 3"#,
            r#"karpenter_voluntary_disruption_failed_validations_total{consolidation_type="single"} 1"#,
            r#"karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type="multi"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }
}
