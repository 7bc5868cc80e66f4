//! Node repair's rules, pure: a provider's repair rules checked and compiled ([`Rules`], Karpenter
//! v1.15's `RepairPolicyMatcher`), matched against a node's conditions ([`Rules::matches`]),
//! resolved into the one repair due now ([`Rules::resolve`]), and the 20% circuit breaker.
//!
//! As Karpenter v1.15:
//!
//! - a rule applies to a condition of its type and status whose reason its expression matches
//!   (searched, not anchored); a condition whose type and status some rule names but whose reason
//!   no rule of that pair matches falls to the set's one default rule (an empty expression, which
//!   must replace);
//! - a match is due its rule's toleration after the condition's last transition (or the node's
//!   creation, if later), and not before the toleration has run again since the node's last
//!   reboot ended;
//! - of the matches due, a replace wins over a reboot, then the higher priority, then the earlier
//!   due time, then the lower condition type; the drain is bounded by the shortest grace of all
//!   the matches due, whichever wins; a node's rank among others is its rule's dense priority
//!   rank plus one for every 30 minutes it has waited past its due time;
//! - a node counts as unhealthy for the circuit breaker when any condition's type and status is
//!   one the rules name, however recent and whatever its reason.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use regex::Regex;

use crate::runtime::lifecycle::{RepairAction, RepairRule};

/// The share of a pool's nodes that may be unhealthy for repair to go on (Karpenter's 20%).
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// How long a node waits past its due time to gain one priority rank (Karpenter's aging).
pub const AGING: Duration = Duration::from_secs(30 * 60);

/// The highest priority a rule may have.
pub const MAX_PRIORITY: u8 = 100;

/// What a repair does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Reboot the node in place (the less disruptive).
    Reboot,
    /// Replace the node.
    Replace,
}

impl From<RepairAction> for Action {
    fn from(action: RepairAction) -> Self {
        match action {
            RepairAction::Reboot => Action::Reboot,
            RepairAction::Replace => Action::Replace,
        }
    }
}

/// One rule, checked.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The node condition's type.
    pub condition_type: String,
    /// The status that makes it unhealthy.
    pub condition_status: String,
    /// The reason expression; `None` for the set's default.
    pub reason: Option<Regex>,
    /// How long the condition may last before the repair is due.
    pub toleration: Duration,
    /// The drain bound: `None`, the claim's own; zero, no drain.
    pub grace: Option<Duration>,
    /// 0 to [`MAX_PRIORITY`].
    pub priority: u8,
    /// What the repair does.
    pub action: Action,
}

/// Why a provider's repair rules cannot be used (node repair stays off for its nodes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulesError {
    /// A rule is malformed.
    #[error("repair rule {index} ({condition}): {problem}")]
    Invalid {
        /// Its position in the set.
        index: usize,
        /// `type=status`.
        condition: String,
        /// What is wrong.
        problem: String,
    },
    /// Not exactly one rule has an empty reason expression.
    #[error(
        "the repair rules have {0} defaults (a rule with an empty reason-regex): exactly one is needed"
    )]
    Defaults(usize),
    /// The default rule reboots.
    #[error("the default repair rule ({0}) must replace, not reboot")]
    DefaultReboots(String),
}

/// A provider's repair rules, checked and compiled.
#[derive(Clone, Debug)]
pub struct Rules {
    rules: Vec<Rule>,
    /// The index of the default rule.
    default: usize,
    /// The distinct priorities, ascending: a priority's dense rank is its index.
    priorities: Vec<u8>,
}

/// One rule matching one of a node's conditions.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    /// The condition's type.
    pub condition_type: String,
    /// Its status.
    pub condition_status: String,
    /// Its reason.
    pub reason: String,
    /// The rule (an index into the set).
    pub rule: usize,
    /// When the repair is due: the condition's last transition (or the node's creation, if
    /// later) plus the rule's toleration; `None` when neither time is known (never due).
    pub due: Option<Timestamp>,
}

/// The repair due on a node now.
#[derive(Clone, Debug, PartialEq)]
pub struct Repair {
    /// What to do.
    pub action: Action,
    /// The condition that decided it, its status and its reason.
    pub condition_type: String,
    /// Its status.
    pub condition_status: String,
    /// Its reason.
    pub reason: String,
    /// Whether the set's default rule decided it.
    pub default: bool,
    /// The deciding rule's toleration.
    pub toleration: Duration,
    /// When the deciding match became due.
    pub due: Timestamp,
    /// The drain bound: the shortest of the matches due (`None`: the claim's own).
    pub grace: Option<Duration>,
    /// The rank among nodes to repair: the best dense priority rank of the matches due plus one
    /// per [`AGING`] past due. Higher first.
    pub score: f64,
}

impl Rules {
    /// Checks and compiles `rules` (all problems at once would be kinder; the first is enough to
    /// fix). An empty set is no repair at all: `Ok(None)`.
    pub fn new(rules: &[RepairRule]) -> Result<Option<Self>, RulesError> {
        if rules.is_empty() {
            return Ok(None);
        }
        let mut compiled = Vec::with_capacity(rules.len());
        let mut defaults = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            let condition = format!("{}={}", rule.condition_type, rule.condition_status);
            let invalid = |problem: String| RulesError::Invalid {
                index,
                condition: condition.clone(),
                problem,
            };
            if rule.condition_type.is_empty() {
                return Err(invalid("the condition type is empty".into()));
            }
            if !["True", "False", "Unknown"].contains(&rule.condition_status.as_str()) {
                return Err(invalid(
                    "the condition status must be True, False or Unknown".into(),
                ));
            }
            if rule.priority > MAX_PRIORITY {
                return Err(invalid(format!(
                    "priority {} is over {MAX_PRIORITY}",
                    rule.priority
                )));
            }
            let reason = if rule.reason_regex.is_empty() {
                defaults.push(index);
                None
            } else {
                Some(Regex::new(&rule.reason_regex).map_err(|err| {
                    invalid(format!("reason-regex {:?}: {err}", rule.reason_regex))
                })?)
            };
            compiled.push(Rule {
                condition_type: rule.condition_type.clone(),
                condition_status: rule.condition_status.clone(),
                reason,
                toleration: Duration::from_secs(rule.toleration_seconds),
                grace: rule.termination_grace_seconds.map(Duration::from_secs),
                priority: rule.priority,
                action: rule.action.into(),
            });
        }
        let [default] = defaults[..] else {
            return Err(RulesError::Defaults(defaults.len()));
        };
        let rule = &compiled[default];
        if rule.action != Action::Replace {
            return Err(RulesError::DefaultReboots(format!(
                "{}={}",
                rule.condition_type, rule.condition_status
            )));
        }
        let priorities: BTreeSet<u8> = compiled.iter().map(|r| r.priority).collect();
        Ok(Some(Self {
            rules: compiled,
            default,
            priorities: priorities.into_iter().collect(),
        }))
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether some rule names this condition type and status.
    pub fn supports(&self, condition_type: &str, condition_status: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.condition_type == condition_type && r.condition_status == condition_status)
    }

    /// Whether any of `node`'s conditions has a type and status the rules name (the circuit
    /// breaker's count: however recent, whatever the reason).
    pub fn is_unhealthy(&self, node: &Node) -> bool {
        conditions(node)
            .iter()
            .any(|c| self.supports(&c.type_, &c.status))
    }

    /// Every rule that applies to one of `node`'s conditions.
    pub fn matches(&self, node: &Node) -> Vec<Match> {
        let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let mut out = Vec::new();
        for condition in conditions(node) {
            if !self.supports(&condition.type_, &condition.status) {
                continue;
            }
            let reason = condition.reason.clone().unwrap_or_default();
            let since = match (
                condition.last_transition_time.as_ref().map(|t| t.0),
                created,
            ) {
                (Some(t), Some(c)) => Some(t.max(c)),
                (t, c) => t.or(c),
            };
            let mut push = |rule: usize| {
                let toleration = SignedDuration::try_from(self.rules[rule].toleration).ok();
                out.push(Match {
                    condition_type: condition.type_.clone(),
                    condition_status: condition.status.clone(),
                    reason: reason.clone(),
                    rule,
                    due: since.and_then(|s| s.checked_add(toleration?).ok()),
                });
            };
            let mut specific = false;
            for (i, rule) in self.rules.iter().enumerate() {
                if rule.condition_type == condition.type_
                    && rule.condition_status == condition.status
                    && rule.reason.as_ref().is_some_and(|r| r.is_match(&reason))
                {
                    specific = true;
                    push(i);
                }
            }
            if !specific {
                push(self.default);
            }
        }
        out
    }

    /// When the match is due, counting the toleration again from the end of the node's last
    /// reboot (`rebooted`), if any.
    fn due(&self, m: &Match, rebooted: Option<Timestamp>) -> Option<Timestamp> {
        let due = m.due?;
        let again = rebooted.and_then(|r| {
            r.checked_add(SignedDuration::try_from(self.rules[m.rule].toleration).ok()?)
                .ok()
        });
        Some(again.map_or(due, |again| due.max(again)))
    }

    /// The earliest time one of `matches` becomes due, if any can.
    pub fn next_due(&self, matches: &[Match], rebooted: Option<Timestamp>) -> Option<Timestamp> {
        matches.iter().filter_map(|m| self.due(m, rebooted)).min()
    }

    /// The repair due now among `matches` (of one node), if any.
    pub fn resolve(
        &self,
        matches: &[Match],
        now: Timestamp,
        rebooted: Option<Timestamp>,
    ) -> Option<Repair> {
        let mut selected: Option<(&Match, &Rule, Timestamp)> = None;
        let mut grace: Option<(Duration, Timestamp, &str)> = None;
        let mut score = f64::MIN;
        for m in matches {
            let Some(due) = self.due(m, rebooted).filter(|due| *due <= now) else {
                continue;
            };
            let rule = &self.rules[m.rule];
            let rank = self
                .priorities
                .iter()
                .position(|p| *p == rule.priority)
                .unwrap_or_default();
            let waited = now.duration_since(due).as_secs_f64().max(0.0);
            score = score.max(rank as f64 + waited / AGING.as_secs_f64());
            if let Some(g) = rule.grace {
                let shorter = grace.is_none_or(|(best, at, condition)| {
                    (g, due, m.condition_type.as_str()) < (best, at, condition)
                });
                if shorter {
                    grace = Some((g, due, m.condition_type.as_str()));
                }
            }
            let wins = match selected {
                None => true,
                Some((current, current_rule, current_due)) => {
                    if rule.action != current_rule.action {
                        rule.action > current_rule.action
                    } else {
                        (
                            std::cmp::Reverse(rule.priority),
                            due,
                            m.condition_type.as_str(),
                        ) < (
                            std::cmp::Reverse(current_rule.priority),
                            current_due,
                            current.condition_type.as_str(),
                        )
                    }
                }
            };
            if wins {
                selected = Some((m, rule, due));
            }
        }
        let (m, rule, due) = selected?;
        Some(Repair {
            action: rule.action,
            condition_type: m.condition_type.clone(),
            condition_status: m.condition_status.clone(),
            reason: m.reason.clone(),
            default: rule.reason.is_none(),
            toleration: rule.toleration,
            due,
            grace: grace.map(|(g, _, _)| g),
            score,
        })
    }
}

fn conditions(node: &Node) -> &[k8s_openapi::api::core::v1::NodeCondition] {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// How many of a pool's `total` nodes may be unhealthy with repair going on: 20%, rounded up
/// (as Karpenter, like a PodDisruptionBudget's percentages: one of three nodes may be).
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// What to do about one node.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No rule matches.
    Healthy,
    /// A rule matches, but is not due yet (or never will be): look again after this long.
    Wait(Option<Duration>),
    /// Due, but too many of its pool's nodes are unhealthy.
    Blocked {
        /// The pool's unhealthy nodes.
        unhealthy: usize,
        /// The pool's nodes.
        total: usize,
    },
    /// Repair it.
    Repair(Repair),
}

/// Decides about `node` at `now`, with `pool_unhealthy`/`pool_total` the counts of its pool's
/// nodes (itself included); `rebooted`: when its last reboot ended well, if it did.
pub fn decide(
    node: &Node,
    rules: &Rules,
    now: Timestamp,
    pool_unhealthy: usize,
    pool_total: usize,
    rebooted: Option<Timestamp>,
) -> Decision {
    let matches = rules.matches(node);
    if matches.is_empty() {
        return Decision::Healthy;
    }
    let Some(repair) = rules.resolve(&matches, now, rebooted) else {
        let wait = rules
            .next_due(&matches, rebooted)
            .map(|due| now.duration_until(due).try_into().unwrap_or(Duration::ZERO));
        return Decision::Wait(wait);
    };
    if pool_unhealthy > allowed_unhealthy(pool_total) {
        return Decision::Blocked {
            unhealthy: pool_unhealthy,
            total: pool_total,
        };
    }
    Decision::Repair(repair)
}

/// What a repair due does to one node (Karpenter v1.15's `Repair` disruption method).
#[derive(Clone, Debug, PartialEq)]
pub enum Act {
    /// Reboot it in place; the drain is bounded by `grace` (`None`: unbounded; zero: no drain).
    Reboot { grace: Option<Duration> },
    /// Replace it: delete its claim, the drain bounded by `grace` from now (`None`: the claim's
    /// own `terminationGracePeriod`, if any).
    Replace { grace: Option<Duration> },
    /// Not now: the reason, for a `DisruptionBlocked` Event.
    Veto(String),
}

/// What to do about a node whose repair `due` is due: `claim_grace` is its claim's
/// `terminationGracePeriod`; `reboots_exhausted` whether it rebooted twice within a day already
/// (a reboot becomes a replacement); `do_not_repair` whether the node carries
/// `karpenter.sh/do-not-repair: "true"`; `blocker` a pod the drain could not evict
/// (`do-not-disrupt`, a PodDisruptionBudget), if there is one.
///
/// The drain is bounded by the shorter of the rules' bound and the claim's; a node with a pod the
/// drain cannot evict is repaired only when one of them bounds it, else it would drain forever.
pub fn act(
    due: &Repair,
    claim_grace: Option<Duration>,
    reboots_exhausted: bool,
    do_not_repair: bool,
    blocker: Option<&str>,
) -> Act {
    if do_not_repair {
        return Act::Veto(format!(
            "repair is blocked through the \"{}\" annotation",
            crate::api::labels::DO_NOT_REPAIR
        ));
    }
    if let Some(blocker) = blocker
        && due.grace.is_none()
        && claim_grace.is_none()
    {
        return Act::Veto(format!(
            "repair requires a termination grace period to bypass blocking pods ({blocker})"
        ));
    }
    let bound = due
        .grace
        .map(|g| claim_grace.map_or(g, |claim| claim.min(g)));
    match due.action {
        Action::Reboot if !reboots_exhausted => Act::Reboot {
            grace: bound.or(claim_grace),
        },
        Action::Reboot | Action::Replace => Act::Replace { grace: bound },
    }
}

#[cfg(test)]
mod tests;
