//! The conformance kit behind `capstan provider test`: runs a provider through the contract and
//! reports, check by check, what holds.
//!
//! Checks: the name is usable; repair policies are well formed; instance types are well formed
//! (every well-known requirement present, offerings carry zone and capacity type, prices finite and
//! non-negative, capacities are quantities); the test NodeClass validates and garbage does not
//! (`invalid`); and, with a cluster, the instance lifecycle: create, its labels within the claim's
//! requirements and the catalog ([`answers`]), create again (idempotent: the same provider ID and
//! labels), get (the same instance, labels that agree with create's), list, is-drifted, delete
//! until `not-found`, get → `not-found`. Every call must end in a value or a typed provider error: a
//! trap, a timeout or a blown limit fails the check it happened in.

pub mod answers;
pub mod instance_types;

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::provider::convert::catalog::CatalogView;
use crate::runtime::lifecycle::{RebootError, Registration};
use crate::runtime::provider::{CallError, ProviderPre, describe_provider_error};
use crate::runtime::types::{
    Catalog, KeyValue, NodeClaim, NodeClass, NodePool, Operator, ProviderError, Requirement,
    Resource,
};

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "message", rename_all = "lowercase")]
pub enum Outcome {
    /// It holds (with a short note).
    Pass(String),
    /// It does not, and why.
    Fail(String),
    /// Not run, and why.
    Skip(String),
    /// The function answered `invalid("not implemented")`, as `capstan provider new`'s skeletons
    /// do until written: a failure, reported as work still to do.
    #[serde(rename = "not-implemented")]
    NotImplemented(String),
}

/// What a function not written yet answers (`invalid` with this message, or one starting so).
pub const NOT_IMPLEMENTED: &str = "not implemented";

/// `err` as a check's outcome: [`Outcome::NotImplemented`] for a function not written yet,
/// otherwise a failure.
fn call_failed(err: &CallError) -> Outcome {
    match err {
        CallError::Provider {
            function,
            error: ProviderError::Invalid(message),
        } if message.trim_start().starts_with(NOT_IMPLEMENTED) => {
            Outcome::NotImplemented(format!("{function} is not implemented"))
        }
        _ => Outcome::Fail(err.to_string()),
    }
}

/// One check and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// How it went.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Every check of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
}

impl Report {
    fn push(&mut self, name: impl Into<String>, outcome: Outcome) {
        self.checks.push(Check {
            name: name.into(),
            outcome,
        });
    }

    /// Whether no check failed and nothing is left unimplemented.
    pub fn passed(&self) -> bool {
        self.failed() == 0 && self.not_implemented().is_empty()
    }

    /// The functions reported not implemented, each once, in the order first met.
    pub fn not_implemented(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for check in &self.checks {
            if let Outcome::NotImplemented(message) = &check.outcome {
                let function = message.split(' ').next().unwrap_or(message);
                if !out.contains(&function) {
                    out.push(function);
                }
            }
        }
        out
    }

    /// Passed checks.
    pub fn passed_count(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass(_)))
    }

    /// Failed checks.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    /// Skipped checks.
    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skip(_)))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.checks.iter().filter(|c| f(&c.outcome)).count()
    }

    /// The check named `name`.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            let (tag, message) = match &check.outcome {
                Outcome::Pass(m) => ("PASS", m),
                Outcome::Fail(m) => ("FAIL", m),
                Outcome::Skip(m) => ("SKIP", m),
                Outcome::NotImplemented(m) => ("TODO", m),
            };
            write!(f, "{tag}  {}", check.name)?;
            if !message.is_empty() {
                let mut lines = message.lines();
                if let Some(first) = lines.next() {
                    write!(f, ": {first}")?;
                }
                for line in lines {
                    write!(f, "\n        {line}")?;
                }
            }
            writeln!(f)?;
        }
        let todo = self.not_implemented();
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed_count(),
            self.failed(),
            self.skipped()
        )?;
        if !todo.is_empty() {
            write!(f, "; not implemented yet: {}", todo.join(", "))?;
        }
        Ok(())
    }
}

/// Check names, for tests and tooling.
pub mod checks {
    /// `name()` returns a usable name.
    pub const NAME: &str = "name";
    /// `repair-policies()` is well formed.
    pub const REPAIR_POLICIES: &str = "repair-policies";
    /// `get-instance-types` returns well-formed types.
    pub const INSTANCE_TYPES: &str = "get-instance-types well formed";
    /// The test NodeClass validates.
    pub const VALIDATE_ACCEPTS: &str = "validate-node-class accepts the test class";
    /// Garbage NodeClasses are `invalid`.
    pub const VALIDATE_REJECTS: &str = "validate-node-class rejects garbage";
    /// `get` of an unknown ID is `not-found`.
    pub const GET_UNKNOWN: &str = "get unknown provider-id is not-found";
    /// `create` launches and describes the instance.
    pub const CREATE: &str = "create";
    /// `create`'s labels name what the claim allows and the catalog offers.
    pub const CREATE_WITHIN: &str = "create launches within the claim and the catalog";
    /// `create` again returns the same instance.
    pub const CREATE_IDEMPOTENT: &str = "create is idempotent";
    /// `get` finds the instance.
    pub const GET: &str = "get finds the instance";
    /// `get` describes the instance as `create` did.
    pub const GET_AGREES: &str = "get agrees with create";
    /// `list` includes the instance.
    pub const LIST: &str = "list includes the instance";
    /// `is-drifted` answers.
    pub const IS_DRIFTED: &str = "is-drifted answers";
    /// `registered` (0.4) answers for the launched instance.
    pub const REGISTERED: &str = "registered answers";
    /// `reboot` (0.4) reboots the instance or says it cannot, and the same operation again is
    /// answered as the first (idempotent).
    pub const REBOOT: &str = "reboot is idempotent per operation";
    /// `delete` ends in `not-found`.
    pub const DELETE: &str = "delete until not-found";
    /// `get` after delete is `not-found`.
    pub const GET_AFTER_DELETE: &str = "get after delete is not-found";
}

/// How to run the kit.
#[derive(Debug, Clone)]
pub struct Options {
    /// The NodeClass to test with (its parameters must be valid for the provider).
    pub node_class: NodeClass,
    /// The NodePool to ask instance types for.
    pub node_pool: NodePool,
    /// Why the checks that need a cluster (lifecycle, unknown IDs) are skipped, if they are.
    pub skip_cluster_checks: Option<String>,
    /// The test claim's name (default: `capstan-conformance-<random>`).
    pub claim_name: String,
    /// How many `delete` calls to wait for `not-found`.
    pub delete_attempts: u32,
    /// Pause between `delete` calls.
    pub delete_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        let nonce = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
            ^ u128::from(std::process::id());
        Self {
            node_class: NodeClass {
                name: "conformance".into(),
                parameters: "{}".into(),
            },
            node_pool: NodePool {
                name: "conformance".into(),
                requirements: Vec::new(),
                labels: Vec::new(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
            },
            skip_cluster_checks: None,
            claim_name: format!("capstan-conformance-{:08x}", nonce as u32),
            delete_attempts: 30,
            delete_interval: Duration::from_secs(1),
        }
    }
}

/// Garbage NodeClass parameters every provider must call `invalid`.
pub const GARBAGE_PARAMETERS: [&str; 4] =
    ["[]", "\"x\"", "{\"definitely-not-a-field\": 1}", "not json"];

/// Runs every check against `provider`.
pub async fn run(provider: &ProviderPre, options: &Options) -> Report {
    let mut report = Report::default();

    report.push(
        checks::NAME,
        match provider.name().await {
            Ok(name) if name.trim().is_empty() => Outcome::Fail("empty name".into()),
            Ok(name) if name.len() > 63 || name.chars().any(char::is_whitespace) => {
                Outcome::Fail(format!("{name:?} is not a short name without spaces"))
            }
            Ok(name) => Outcome::Pass(name),
            Err(err) => call_failed(&err),
        },
    );

    report.push(
        checks::REPAIR_POLICIES,
        match provider.repair_policies().await {
            Ok(policies) => match crate::rules::repair::Rules::new(&policies) {
                Ok(Some(rules)) => {
                    let reboots = rules
                        .rules()
                        .iter()
                        .filter(|r| r.action == crate::rules::repair::Action::Reboot)
                        .count();
                    Outcome::Pass(format!(
                        "{} rules, {reboots} rebooting",
                        rules.rules().len()
                    ))
                }
                Ok(None) => Outcome::Pass("no rules: no node repair".into()),
                Err(err) => Outcome::Fail(err.to_string()),
            },
            Err(err) => call_failed(&err),
        },
    );

    let types = provider
        .get_instance_types(&options.node_pool, &options.node_class)
        .await;
    let types = match types {
        Ok(types) => {
            let mut problems = instance_types::problems(&types.catalog);
            if problems.is_empty()
                && let Err(err) = crate::catalog::from_answer(&types)
            {
                problems.push(err.to_string());
            }
            report.push(
                checks::INSTANCE_TYPES,
                if problems.is_empty() {
                    Outcome::Pass(format!(
                        "{} instance types",
                        types.catalog.instance_types.len()
                    ))
                } else {
                    Outcome::Fail(summarize(&problems))
                },
            );
            Some(types)
        }
        Err(err) => {
            report.push(checks::INSTANCE_TYPES, call_failed(&err));
            None
        }
    };

    report.push(
        checks::VALIDATE_ACCEPTS,
        match provider.validate_node_class(&options.node_class).await {
            Ok(()) => Outcome::Pass(String::new()),
            Err(err) => call_failed(&err),
        },
    );

    let mut accepted = Vec::new();
    let mut unwritten = None;
    for garbage in GARBAGE_PARAMETERS {
        let class = NodeClass {
            name: options.node_class.name.clone(),
            parameters: garbage.to_owned(),
        };
        match provider.validate_node_class(&class).await {
            Err(err) if matches!(call_failed(&err), Outcome::NotImplemented(_)) => {
                unwritten = Some(call_failed(&err));
            }
            Err(CallError::Provider {
                error: ProviderError::Invalid(_),
                ..
            }) => {}
            Ok(()) => accepted.push(format!("{garbage} was accepted")),
            Err(err) => accepted.push(format!("{garbage}: {err} (expected invalid)")),
        }
    }
    report.push(
        checks::VALIDATE_REJECTS,
        if let Some(unwritten) = unwritten {
            unwritten
        } else if accepted.is_empty() {
            Outcome::Pass(format!(
                "{} garbage classes rejected",
                GARBAGE_PARAMETERS.len()
            ))
        } else {
            Outcome::Fail(accepted.join("\n"))
        },
    );

    if let Some(reason) = &options.skip_cluster_checks {
        for name in [
            checks::GET_UNKNOWN,
            checks::CREATE,
            checks::CREATE_WITHIN,
            checks::CREATE_IDEMPOTENT,
            checks::GET,
            checks::GET_AGREES,
            checks::LIST,
            checks::IS_DRIFTED,
            checks::DELETE,
            checks::GET_AFTER_DELETE,
        ] {
            report.push(name, Outcome::Skip(reason.clone()));
        }
        return report;
    }

    let unknown = format!("conformance://{}/does-not-exist", options.claim_name);
    report.push(
        checks::GET_UNKNOWN,
        expect_not_found(provider.get(&unknown).await),
    );

    lifecycle(
        provider,
        options,
        types.as_ref().map(|t| &t.catalog),
        &mut report,
    )
    .await;
    report
}

async fn lifecycle(
    provider: &ProviderPre,
    options: &Options,
    types: Option<&Catalog>,
    report: &mut Report,
) {
    let later = [
        checks::CREATE_WITHIN,
        checks::CREATE_IDEMPOTENT,
        checks::GET,
        checks::GET_AGREES,
        checks::LIST,
        checks::IS_DRIFTED,
        checks::REGISTERED,
        checks::REBOOT,
        checks::DELETE,
        checks::GET_AFTER_DELETE,
    ];
    if types.is_none() {
        for name in [checks::CREATE].iter().chain(&later) {
            report.push(*name, Outcome::Skip("no catalog to launch from".into()));
        }
        return;
    }
    let Some(claim) = test_claim(options, types) else {
        report.push(
            checks::CREATE,
            Outcome::Fail("no instance type with an available offering to launch".into()),
        );
        for name in later {
            report.push(name, Outcome::Skip("nothing to create".into()));
        }
        return;
    };

    let created = match provider.create(&claim, &options.node_class).await {
        Ok(created) => created,
        Err(err) => {
            report.push(checks::CREATE, call_failed(&err));
            for name in later {
                report.push(name, Outcome::Skip("create failed".into()));
            }
            return;
        }
    };
    let Some(provider_id) = created.provider_id.clone().filter(|id| !id.is_empty()) else {
        report.push(
            checks::CREATE,
            Outcome::Fail("the returned claim has no provider-id".into()),
        );
        for name in later {
            report.push(name, Outcome::Skip("create returned no provider-id".into()));
        }
        return;
    };
    let missing: Vec<&str> = instance_types::TYPE_REQUIREMENTS
        .iter()
        .copied()
        .filter(|key| !created.labels.iter().any(|l| l.key == *key))
        .collect();
    report.push(
        checks::CREATE,
        if missing.is_empty() {
            Outcome::Pass(provider_id.clone())
        } else {
            Outcome::Fail(format!(
                "{provider_id} created, but its labels lack {}",
                missing.join(", ")
            ))
        },
    );

    let problems = answers::create_problems(&claim, &created, types);
    report.push(
        checks::CREATE_WITHIN,
        if problems.is_empty() {
            Outcome::Pass(String::new())
        } else {
            Outcome::Fail(summarize(&problems))
        },
    );

    report.push(
        checks::CREATE_IDEMPOTENT,
        match provider.create(&claim, &options.node_class).await {
            Ok(again) if again.provider_id.as_deref() == Some(provider_id.as_str()) => {
                let problems = answers::contradictions(
                    ("the first create", &created.labels),
                    ("the second", &again.labels),
                );
                if problems.is_empty() {
                    Outcome::Pass(String::new())
                } else {
                    Outcome::Fail(summarize(&problems))
                }
            }
            Ok(again) => Outcome::Fail(format!(
                "second create returned {:?}, first {provider_id}: create must find the instance it launched for the claim (by the claim's name) instead of launching another",
                again.provider_id
            )),
            Err(err) => call_failed(&err),
        },
    );

    let found = provider.get(&provider_id).await;
    report.push(
        checks::GET,
        match &found {
            Ok(found) if found.provider_id.as_deref() == Some(provider_id.as_str()) => {
                Outcome::Pass(String::new())
            }
            Ok(found) => Outcome::Fail(format!(
                "get({provider_id:?}) answered with provider-id {:?}: get must describe the instance it was asked about, or answer not-found",
                found.provider_id
            )),
            Err(err) => call_failed(err),
        },
    );
    report.push(
        checks::GET_AGREES,
        match &found {
            Ok(found) => {
                let problems =
                    answers::contradictions(("create", &created.labels), ("get", &found.labels));
                if problems.is_empty() {
                    Outcome::Pass(String::new())
                } else {
                    Outcome::Fail(summarize(&problems))
                }
            }
            Err(_) => Outcome::Skip("get failed".into()),
        },
    );

    report.push(
        checks::LIST,
        match provider.list().await {
            Ok(all)
                if all
                    .iter()
                    .any(|c| c.provider_id.as_deref() == Some(&provider_id)) =>
            {
                Outcome::Pass(format!("{} instances", all.len()))
            }
            Ok(all) => Outcome::Fail(format!("{} instances, not {provider_id}", all.len())),
            Err(err) => call_failed(&err),
        },
    );

    report.push(
        checks::IS_DRIFTED,
        match provider.is_drifted(&created, &options.node_class).await {
            Ok(None) => Outcome::Pass("not drifted".into()),
            Ok(Some(reason)) => Outcome::Pass(format!("drifted: {reason}")),
            Err(err) => call_failed(&err),
        },
    );

    report.push(
        checks::REGISTERED,
        match provider.registered(&created).await {
            Ok(Registration::Ready) => Outcome::Pass("ready".into()),
            Ok(Registration::Wait(wait)) => Outcome::Pass(format!("wait: {}", wait.message)),
            Err(err) => call_failed(&err),
        },
    );

    report.push(
        checks::REBOOT,
        reboot_twice(provider, options, &created).await,
    );

    report.push(
        checks::DELETE,
        delete_until_gone(provider, options, &created).await,
    );

    report.push(
        checks::GET_AFTER_DELETE,
        expect_not_found(provider.get(&provider_id).await),
    );
}

/// `reboot` of the launched instance, then again with the same operation ID: both answers must
/// agree (a provider that cannot reboot says `not-implemented` both times).
async fn reboot_twice(provider: &ProviderPre, options: &Options, claim: &NodeClaim) -> Outcome {
    let operation = format!("{}-reboot", options.claim_name);
    let describe = |answer: &Result<(), RebootError>| match answer {
        Ok(()) => "ok".to_owned(),
        Err(RebootError::NotImplemented) => "not-implemented".to_owned(),
        Err(RebootError::Failed(m)) => format!("failed: {m}"),
        Err(RebootError::NotFound(m)) => format!("not-found: {m}"),
        Err(RebootError::Retryable(m)) => format!("retryable: {m}"),
    };
    let first = match provider.reboot(claim, &operation).await {
        Ok(answer) => answer,
        Err(err) => return call_failed(&err),
    };
    let again = match provider.reboot(claim, &operation).await {
        Ok(answer) => answer,
        Err(err) => return call_failed(&err),
    };
    match (&first, &again) {
        (Ok(()), Ok(())) => Outcome::Pass("rebooted".into()),
        (Err(RebootError::NotImplemented), Err(RebootError::NotImplemented)) => {
            Outcome::Pass("cannot reboot: the host replaces instead".into())
        }
        _ => Outcome::Fail(format!(
            "reboot answered {} then, for the same operation, {}: the instance exists, so \
             reboot must start the reboot (ok) or say it cannot (not-implemented), the same way twice",
            describe(&first),
            describe(&again)
        )),
    }
}

async fn delete_until_gone(
    provider: &ProviderPre,
    options: &Options,
    claim: &NodeClaim,
) -> Outcome {
    for attempt in 1..=options.delete_attempts.max(1) {
        match provider.delete(claim).await {
            Err(CallError::Provider {
                error: ProviderError::NotFound(_),
                ..
            }) => return Outcome::Pass(format!("not-found after {attempt} call(s)")),
            Ok(()) => tokio::time::sleep(options.delete_interval).await,
            Err(err) => return call_failed(&err),
        }
    }
    Outcome::Fail(format!(
        "still not not-found after {} delete calls",
        options.delete_attempts
    ))
}

fn expect_not_found<T: fmt::Debug>(result: Result<T, CallError>) -> Outcome {
    match result {
        Err(CallError::Provider {
            error: ProviderError::NotFound(_),
            ..
        }) => Outcome::Pass(String::new()),
        Err(err) if matches!(call_failed(&err), Outcome::NotImplemented(_)) => call_failed(&err),
        Err(CallError::Provider { error, .. }) => Outcome::Fail(format!(
            "expected not-found, got {}",
            describe_provider_error(&error)
        )),
        Err(err) => call_failed(&err),
        Ok(value) => Outcome::Fail(format!("expected not-found, got {value:?}")),
    }
}

/// A claim for the cheapest available offering of `types`.
fn test_claim(options: &Options, types: Option<&Catalog>) -> Option<NodeClaim> {
    let view = CatalogView::new(types?).ok()?;
    let (it, offering) = view
        .instance_types()
        .flat_map(|it| it.offerings().map(move |o| (it, o)))
        .filter(|(_, o)| o.available())
        .min_by(|a, b| a.1.price().total_cmp(&b.1.price()))?;
    let requirements = vec![
        requirement(instance_types::INSTANCE_TYPE, it.name),
        requirement(instance_types::ZONE, offering.zone()),
        requirement(instance_types::CAPACITY_TYPE, offering.capacity_type()),
    ];
    let resource = |name: &str, quantity: &str| Resource {
        name: name.into(),
        quantity: quantity.into(),
    };
    Some(NodeClaim {
        name: options.claim_name.clone(),
        node_pool_name: Some(options.node_pool.name.clone()),
        labels: vec![KeyValue {
            key: "karpenter.sh/nodepool".into(),
            value: options.node_pool.name.clone(),
        }],
        annotations: Vec::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        requirements,
        requests: vec![
            resource("cpu", "100m"),
            resource("memory", "128Mi"),
            resource("pods", "1"),
        ],
        provider_id: None,
        image_id: None,
        node_name: None,
        capacity: Vec::new(),
        allocatable: Vec::new(),
        created_at: None,
    })
}

fn requirement(key: &str, value: &str) -> Requirement {
    Requirement {
        key: key.into(),
        operator: Operator::In,
        values: vec![value.into()],
        min_values: None,
    }
}

fn summarize(problems: &[String]) -> String {
    const SHOWN: usize = 10;
    let mut text = problems
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    if problems.len() > SHOWN {
        text.push_str(&format!("\n... and {} more", problems.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider_error(function: &'static str, error: ProviderError) -> CallError {
        CallError::Provider { function, error }
    }

    #[test]
    fn not_implemented_is_todo_and_fails_the_run() {
        let todo = call_failed(&provider_error(
            "create",
            ProviderError::Invalid("not implemented".into()),
        ));
        assert_eq!(
            todo,
            Outcome::NotImplemented("create is not implemented".into())
        );
        let real = call_failed(&provider_error(
            "create",
            ProviderError::Invalid("bad zone".into()),
        ));
        assert!(matches!(real, Outcome::Fail(m) if m.contains("bad zone")));

        let mut report = Report::default();
        report.push("a", Outcome::Pass(String::new()));
        report.push("b", todo.clone());
        report.push("c", todo);
        assert_eq!(report.failed(), 0);
        assert!(!report.passed(), "a function left to write fails the run");
        assert_eq!(report.not_implemented(), vec!["create"]);
        let text = report.to_string();
        assert!(
            text.contains("TODO  b: create is not implemented"),
            "{text}"
        );
        assert!(text.ends_with("not implemented yet: create"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][1]["outcome"], "not-implemented");
    }
}
