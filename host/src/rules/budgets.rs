//! NodePool disruption budgets: how many of a pool's nodes may be disrupted at once, per reason.
//!
//! As in Karpenter: every budget that is active now (no schedule, or a `schedule` hit within the
//! last `duration`, in UTC) and applies to the reason (no `reasons`, or the reason listed) caps
//! the pool at its `nodes` — a count, or a percentage of the pool's nodes rounded up. The
//! tightest cap wins; with no active budget the pool is not capped. Nodes already disrupting
//! (marked, deleting, or not Ready) use the allowance up.

use std::str::FromStr;

use croner::Cron;
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::duration;
use crate::api::nodepool::{Budget, DisruptionReason};

/// A budget the host cannot read (the CRD's patterns let it through).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// `nodes` is neither a count nor a percentage.
    #[error("budget nodes {0:?} is neither a count nor a percentage")]
    Nodes(String),
    /// `schedule` is not a cron expression.
    #[error("budget schedule {schedule:?}: {message}")]
    Schedule { schedule: String, message: String },
    /// `duration` does not parse.
    #[error("budget duration {0:?} does not parse")]
    Duration(String),
    /// Only one of `schedule` and `duration` is set.
    #[error("budget schedule and duration must be set together")]
    Incomplete,
}

/// How many nodes `budget` allows out of `total`.
fn cap(budget: &Budget, total: usize) -> Result<usize, BudgetError> {
    let nodes = budget.nodes.trim();
    if let Some(percent) = nodes.strip_suffix('%') {
        let percent: usize = percent
            .parse()
            .map_err(|_| BudgetError::Nodes(budget.nodes.clone()))?;
        return Ok((total * percent).div_ceil(100));
    }
    nodes
        .parse()
        .map_err(|_| BudgetError::Nodes(budget.nodes.clone()))
}

/// Whether `budget` is in force at `now`.
pub fn is_active(budget: &Budget, now: Timestamp) -> Result<bool, BudgetError> {
    let (schedule, window) = match (&budget.schedule, &budget.duration) {
        (None, None) => return Ok(true),
        (Some(s), Some(d)) => (s, d),
        _ => return Err(BudgetError::Incomplete),
    };
    let cron = Cron::from_str(schedule).map_err(|e| BudgetError::Schedule {
        schedule: schedule.clone(),
        message: e.to_string(),
    })?;
    let length = duration::parse(window).map_err(|_| BudgetError::Duration(window.clone()))?;
    let length =
        SignedDuration::try_from(length).map_err(|_| BudgetError::Duration(window.clone()))?;
    let checkpoint = now
        .checked_sub(length)
        .map_err(|_| BudgetError::Duration(window.clone()))?
        .to_zoned(TimeZone::UTC);
    let next =
        cron.find_next_occurrence(&checkpoint, false)
            .map_err(|e| BudgetError::Schedule {
                schedule: schedule.clone(),
                message: e.to_string(),
            })?;
    Ok(next.timestamp() <= now)
}

/// The most nodes of a pool of `total` that may be disrupting for `reason` at `now` (before
/// subtracting those disrupting already); `None` when no active budget applies.
pub fn limit(
    budgets: &[Budget],
    reason: DisruptionReason,
    total: usize,
    now: Timestamp,
) -> Result<Option<usize>, BudgetError> {
    Ok(tightest(budgets, reason, total, now)?.map(|(cap, _)| cap))
}

/// The active budget for `reason` that caps the pool hardest at `now`, with its cap (the first
/// of equal ones); `None` when no active budget applies.
pub fn tightest(
    budgets: &[Budget],
    reason: DisruptionReason,
    total: usize,
    now: Timestamp,
) -> Result<Option<(usize, &Budget)>, BudgetError> {
    let mut tightest: Option<(usize, &Budget)> = None;
    for budget in budgets {
        if !budget.reasons.is_empty() && !budget.reasons.contains(&reason) {
            continue;
        }
        if !is_active(budget, now)? {
            continue;
        }
        let cap = cap(budget, total)?;
        if tightest.is_none_or(|(t, _)| cap < t) {
            tightest = Some((cap, budget));
        }
    }
    Ok(tightest)
}

/// A budget as an operator wrote it: `nodes "10%"`, with its reasons and window if it has them.
pub fn describe(budget: &Budget) -> String {
    let mut out = format!("nodes {:?}", budget.nodes);
    if !budget.reasons.is_empty() {
        let reasons: Vec<String> = budget.reasons.iter().map(|r| format!("{r:?}")).collect();
        out.push_str(&format!(" for {}", reasons.join(",")));
    }
    if let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) {
        out.push_str(&format!(", window {schedule:?} for {duration}"));
    }
    out
}

/// How many more nodes may start disrupting now.
pub fn allowed(
    budgets: &[Budget],
    reason: DisruptionReason,
    total: usize,
    disrupting: usize,
    now: Timestamp,
) -> Result<usize, BudgetError> {
    Ok(match limit(budgets, reason, total, now)? {
        Some(limit) => limit.saturating_sub(disrupting),
        None => usize::MAX,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> Budget {
        Budget {
            nodes: nodes.to_owned(),
            schedule: schedule.map(str::to_owned),
            duration: duration.map(str::to_owned),
            reasons: Vec::new(),
        }
    }

    /// 2026-11-26T10:30:00Z, a Thursday.
    fn now() -> Timestamp {
        "2026-11-26T10:30:00Z".parse().unwrap()
    }

    #[test]
    fn caps_and_percentages_round_up() {
        let cases = [
            ("1", 20, 1),
            ("0", 20, 0),
            ("10%", 20, 2),
            ("20%", 20, 4),
            ("10%", 5, 1),
            ("10%", 0, 0),
            ("100%", 7, 7),
            ("33%", 10, 4),
        ];
        for (nodes, total, want) in cases {
            assert_eq!(
                cap(&budget(nodes, None, None), total).unwrap(),
                want,
                "{nodes} of {total}"
            );
        }
        assert!(matches!(
            cap(&budget("many", None, None), 3),
            Err(BudgetError::Nodes(_))
        ));
    }

    #[test]
    fn schedules_open_windows_of_their_duration() {
        let cases = [
            // Daily at 10:00 for 1h: open at 10:30.
            (Some("0 10 * * *"), Some("1h"), true),
            // Daily at 10:00 for 20m: closed again at 10:30.
            (Some("0 10 * * *"), Some("20m"), false),
            // Daily at 11:00: not yet.
            (Some("0 11 * * *"), Some("1h"), false),
            // Yesterday 22:00 for 13h: still open.
            (Some("0 22 * * *"), Some("13h"), true),
            // Every Monday: not on a Thursday.
            (Some("0 0 * * 1"), Some("24h"), false),
            (Some("@daily"), Some("11h"), true),
            (Some("@daily"), Some("10h"), false),
            (None, None, true),
        ];
        for (schedule, duration, want) in cases {
            assert_eq!(
                is_active(&budget("1", schedule, duration), now()).unwrap(),
                want,
                "{schedule:?} for {duration:?}"
            );
        }
        assert_eq!(
            is_active(&budget("1", Some("0 10 * * *"), None), now()),
            Err(BudgetError::Incomplete)
        );
        assert!(is_active(&budget("1", Some("not cron"), Some("1h")), now()).is_err());
    }

    #[test]
    fn the_tightest_active_budget_for_the_reason_wins() {
        let mut drift_only = budget("0", None, None);
        drift_only.reasons = vec![DisruptionReason::Drifted];
        let budgets = vec![
            budget("20%", None, None),
            drift_only,
            // Closed window: does not count.
            budget("0", Some("0 22 * * *"), Some("1h")),
        ];
        assert_eq!(
            limit(&budgets, DisruptionReason::Empty, 20, now()).unwrap(),
            Some(4)
        );
        assert_eq!(
            limit(&budgets, DisruptionReason::Drifted, 20, now()).unwrap(),
            Some(0)
        );
        assert_eq!(
            allowed(&budgets, DisruptionReason::Empty, 20, 3, now()).unwrap(),
            1
        );
        assert_eq!(
            allowed(&budgets, DisruptionReason::Empty, 20, 9, now()).unwrap(),
            0,
            "already over: none more"
        );
        assert_eq!(
            allowed(&[], DisruptionReason::Drifted, 20, 9, now()).unwrap(),
            usize::MAX
        );
    }
}
