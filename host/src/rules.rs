//! The cluster's rules, pure: what Karpenter decides from the objects alone, with no I/O, so the
//! controllers (which keep the loops and the writes), `capstan simulate` and `capstan explain`
//! decide with one copy of each rule.
//!
//! - [`pods`]: which pods kube-scheduler gave up on (provisionable), which a leaving node's
//!   replacement must hold (reschedulable), which are a DaemonSet's or static, which
//!   `karpenter.sh/do-not-disrupt` protects, which tolerate the disrupted taint;
//! - [`claims`]: a NodeClaim's provider ID, pool and conditions;
//! - [`nodes`]: a Node's readiness and the `karpenter.sh/disrupted` taint (built and recognized
//!   here only);
//! - [`snapshot`]: the cluster at one moment for a provisioning run or a disruption pass, and
//!   the scheduler's input made from it ([`daemonset_pods`]: what the DaemonSets would run on a
//!   new node; [`limits`]: what a pool's limits leave);
//! - [`new_claim`]: the NodeClaim written for a claim the solver opened;
//! - [`candidates`]: claims, their Nodes and pods joined into disruption candidates, and what
//!   holds one (do-not-disrupt, PodDisruptionBudgets, running Jobs);
//! - [`budgets`]: a pool's disruption budgets (schedules, percentages, reasons);
//! - [`verdict`]: why a candidate is not consolidatable now, as its condition and `explain` say;
//! - [`drift`]: the template hash and requirements a claim drifted from;
//! - [`repair`]: a provider's repair rules checked, matched against a node's conditions and
//!   resolved into the repair due (Karpenter v1.15's), and the 20% circuit breaker;
//! - [`reboot`]: a reboot in place, phase by phase (drain, issue, observe), and the reboots a
//!   node gets before a repair replaces it;
//! - [`resolve`]: from a `nodeClassRef` to its node class and provider;
//! - [`selector`]: the equality-based label selectors of `--selector` (which pods, claims and
//!   pools this host manages);
//! - [`default_spread`]: kube-scheduler's default topology spread constraints, applied to the
//!   pods that declare none with the selector kube-scheduler deduces for them;
//! - [`consolidation`]: the consolidation search (emptiness, multi-node, single-node) over the
//!   scheduler's own types.

pub mod budgets;
pub mod candidates;
pub mod claims;
pub mod consolidation;
pub mod daemonset_pods;
pub mod default_spread;
pub mod drift;
pub mod limits;
pub mod new_claim;
pub mod nodes;
pub mod pods;
pub mod reboot;
pub mod repair;
pub mod resolve;
pub mod selector;
pub mod snapshot;
pub mod verdict;
