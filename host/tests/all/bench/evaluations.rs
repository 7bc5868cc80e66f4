//! How long each controller says its disruption decisions took: Karpenter's
//! `karpenter_voluntary_disruption_decision_evaluation_duration_seconds` histogram, which both
//! export, read from `/metrics` before and after a step. (Capstan times a consolidation pass from
//! taking the cluster to the search's end, a drift pass from taking the cluster to its last
//! start; Karpenter each method's `ComputeCommands`.)

use std::collections::BTreeMap;

use crate::metrics::parse;

/// The histogram's name, without `_bucket`, `_sum` or `_count`.
pub const HISTOGRAM: &str = "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";

/// One series: cumulative bucket counts by upper bound, the sum and the count.
#[derive(Clone, Debug, Default, PartialEq)]
struct Series {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// Every series of the histogram, by its labels (without `le`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Evaluations(BTreeMap<String, Series>);

/// What the evaluations between two reads add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: f64,
    /// Mean seconds.
    pub mean: f64,
    /// The smallest bucket bound that holds every one of them (seconds; infinite when one took
    /// longer than the largest bound).
    pub longest_within: f64,
    /// The share that took at most a second.
    pub within_one_second: f64,
}

impl Evaluations {
    /// The histogram in a `/metrics` text (none: empty).
    pub fn read(text: &str) -> Self {
        // Only the histogram's lines: other series are none of this reader's business.
        let lines: String = text
            .lines()
            .filter(|l| l.starts_with(HISTOGRAM))
            .map(|l| format!("{l}\n"))
            .collect();
        let mut out: BTreeMap<String, Series> = BTreeMap::new();
        for (name, samples) in parse(&lines) {
            for mut sample in samples {
                let le = sample.labels.remove("le");
                let key = format!("{:?}", sample.labels);
                let series = out.entry(key).or_default();
                match (name.strip_prefix(HISTOGRAM), le) {
                    (Some("_bucket"), Some(le)) => {
                        let bound = if le == "+Inf" {
                            f64::INFINITY
                        } else {
                            le.parse().unwrap_or(f64::INFINITY)
                        };
                        series.buckets.push((bound, sample.value));
                    }
                    (Some("_sum"), _) => series.sum = sample.value,
                    (Some("_count"), _) => series.count = sample.value,
                    _ => {}
                }
            }
        }
        for series in out.values_mut() {
            series.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        Self(out)
    }

    /// The evaluations made since `before` (an earlier read), all series together; `None` when
    /// there were none.
    pub fn since(&self, before: &Self) -> Option<Summary> {
        let mut count = 0.0;
        let mut sum = 0.0;
        let mut within_one = 0.0;
        let mut longest: f64 = 0.0;
        for (key, now) in &self.0 {
            let then = before.0.get(key).cloned().unwrap_or_default();
            let n = now.count - then.count;
            if n <= 0.0 {
                continue;
            }
            count += n;
            sum += now.sum - then.sum;
            let at = |series: &Series, bound: f64| {
                series
                    .buckets
                    .iter()
                    .find(|(b, _)| *b >= bound)
                    .map_or(series.count, |(_, c)| *c)
            };
            within_one += at(now, 1.0) - at(&then, 1.0);
            let holds_all = now
                .buckets
                .iter()
                .find(|(bound, c)| *c - at(&then, *bound) >= n)
                .map_or(f64::INFINITY, |(bound, _)| *bound);
            longest = longest.max(holds_all);
        }
        (count > 0.0).then(|| Summary {
            count,
            mean: sum / count,
            longest_within: longest,
            within_one_second: within_one / count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(count: u32, sum: f64, buckets: &[(&str, u32)]) -> String {
        let mut out = String::from("# TYPE x histogram\nother_series 3\n");
        for (le, c) in buckets {
            out.push_str(&format!(
                "{HISTOGRAM}_bucket{{method=\"drift\",le=\"{le}\"}} {c}\n"
            ));
        }
        out.push_str(&format!("{HISTOGRAM}_sum{{method=\"drift\"}} {sum}\n"));
        out.push_str(&format!("{HISTOGRAM}_count{{method=\"drift\"}} {count}\n"));
        out
    }

    #[test]
    fn evaluations_between_two_reads_are_summed_and_bounded() {
        let before = Evaluations::read(&text(
            2,
            0.2,
            &[("0.5", 2), ("1", 2), ("5", 2), ("+Inf", 2)],
        ));
        let after = Evaluations::read(&text(
            6,
            4.2,
            &[("0.5", 3), ("1", 4), ("5", 6), ("+Inf", 6)],
        ));
        let s = after.since(&before).expect("four since");
        assert_eq!(s.count, 4.0);
        assert!((s.mean - 1.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.longest_within, 5.0);
        assert!((s.within_one_second - 0.5).abs() < 1e-9, "{s:?}");
        assert_eq!(after.since(&after), None, "none since itself");
        assert_eq!(Evaluations::read("").since(&Evaluations::default()), None);
    }
}
