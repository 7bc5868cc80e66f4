//! Which provider serves which node class kind: the kinds each loaded component declares
//! ([`crate::runtime::node_class_kinds`]), narrowed or remapped by its Provider's
//! `spec.nodeClassKinds`, and one owner per kind.
//!
//! Two Providers claiming one kind is settled by age, not by who loaded first: the Provider
//! created first (then the smaller name) serves it, and the other reports the conflict in its
//! `NodeClassKinds` condition. The outcome depends only on the Providers and their components,
//! so every host replica and every restart agrees.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::provider::NodeClassKindSpec;
use crate::runtime::node_class_kinds::DeclaredKind;

/// A node class kind: `(group, kind)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKind {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

impl GroupKind {
    /// A group and kind.
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
        }
    }
}

impl std::fmt::Display for GroupKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.kind, self.group)
    }
}

/// A served kind: who serves it, what to watch, and what the provider receives it as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The Provider serving it.
    pub provider: String,
    /// The version watched.
    pub version: String,
    /// The resource plural.
    pub plural: String,
    /// Whether the CRD has a status subresource (the host keeps `Ready` there).
    pub status: bool,
    /// The `apiVersion` and `kind` the provider sees in its parameters (the kind itself, or the
    /// declared kind it is remapped to).
    pub api_version_as: String,
    /// See `api_version_as`.
    pub kind_as: String,
}

/// One Provider's claim on kinds.
#[derive(Debug, Clone)]
pub struct Claimant<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its creation time (ties and missing times order by name).
    pub created: Option<&'a Time>,
    /// The kinds its component declares.
    pub declared: &'a [DeclaredKind],
    /// Its `spec.nodeClassKinds`.
    pub spec: Option<&'a [NodeClassKindSpec]>,
}

/// What one Provider serves and what it was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The kinds it serves.
    pub served: Vec<GroupKind>,
    /// Kinds it claims that another Provider serves: (kind, that Provider).
    pub conflicts: Vec<(GroupKind, String)>,
    /// Entries of its `spec.nodeClassKinds` that cannot be served, with why.
    pub invalid: Vec<String>,
}

impl Report {
    /// The `NodeClassKinds` condition: status, reason and message.
    pub fn condition(&self) -> (bool, &'static str, String) {
        let served = if self.served.is_empty() {
            "serves no node class kind besides capstan.dev NodeClass".to_owned()
        } else {
            format!("serves {}", join(&self.served))
        };
        if !self.conflicts.is_empty() {
            let conflicts: Vec<String> = self
                .conflicts
                .iter()
                .map(|(kind, owner)| format!("{kind} is served by Provider {owner}"))
                .collect();
            return (
                false,
                "NodeClassKindConflict",
                format!("{}; {served}", conflicts.join("; ")),
            );
        }
        if !self.invalid.is_empty() {
            return (
                false,
                "InvalidNodeClassKinds",
                format!("{}; {served}", self.invalid.join("; ")),
            );
        }
        (true, "Served", served)
    }
}

fn join(kinds: &[GroupKind]) -> String {
    kinds
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every served kind and every Provider's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Served kinds and their owners.
    pub kinds: BTreeMap<GroupKind, Served>,
    /// Per Provider.
    pub reports: BTreeMap<String, Report>,
}

impl Assignment {
    /// Who serves `group`/`kind`, if anyone.
    pub fn get(&self, group: &str, kind: &str) -> Option<&Served> {
        self.kinds.get(&GroupKind::new(group, kind))
    }
}

/// The kinds `claimant` asks to serve, or why an entry of its spec cannot be served.
fn wanted(claimant: &Claimant<'_>) -> (Vec<(GroupKind, Served)>, Vec<String>) {
    let declared = |kind: &DeclaredKind| Served {
        provider: claimant.name.to_owned(),
        version: kind.version.clone(),
        plural: kind.plural.clone(),
        status: kind.status,
        api_version_as: format!("{}/{}", kind.group, kind.version),
        kind_as: kind.kind.clone(),
    };
    let Some(spec) = claimant.spec else {
        return (
            claimant
                .declared
                .iter()
                .map(|k| (GroupKind::new(&k.group, &k.kind), declared(k)))
                .collect(),
            Vec::new(),
        );
    };
    let mut wanted = Vec::new();
    let mut invalid = Vec::new();
    for entry in spec {
        let gk = GroupKind::new(&entry.group, &entry.kind);
        if entry.group == crate::api::nodeclass::GROUP {
            invalid.push(format!("{gk}: group {} belongs to Capstan", entry.group));
            continue;
        }
        let target = match &entry.served_as {
            Some(name) => claimant.declared.iter().find(|k| &k.group_kind() == name),
            None => claimant
                .declared
                .iter()
                .find(|k| k.group == entry.group && k.kind == entry.kind),
        };
        let Some(target) = target else {
            invalid.push(match &entry.served_as {
                Some(name) => format!("{gk}: servedAs {name} is not a kind the component declares"),
                None => format!(
                    "{gk} is not a kind the component declares (name one in servedAs to remap)"
                ),
            });
            continue;
        };
        let remapped = target.group != entry.group || target.kind != entry.kind;
        let (version, plural) = match (&entry.version, &entry.plural, remapped) {
            (Some(version), Some(plural), _) => (version.clone(), plural.clone()),
            (version, plural, false) => (
                version.clone().unwrap_or_else(|| target.version.clone()),
                plural.clone().unwrap_or_else(|| target.plural.clone()),
            ),
            _ => {
                invalid.push(format!("{gk}: a remapped kind needs version and plural"));
                continue;
            }
        };
        if wanted.iter().any(|(k, _)| k == &gk) {
            invalid.push(format!("{gk} is listed twice"));
            continue;
        }
        wanted.push((
            gk,
            Served {
                version,
                plural,
                // A remapped kind's CRD is the admin's: its status is written only where the
                // declared kind has one, and a failed write is only logged.
                ..declared(target)
            },
        ));
    }
    (wanted, invalid)
}

/// Assigns every claimed kind to one Provider: the oldest (then the smallest name) claiming it.
pub fn assign(claimants: &[Claimant<'_>]) -> Assignment {
    let mut ordered: Vec<&Claimant<'_>> = claimants.iter().collect();
    ordered.sort_by(|a, b| {
        let time = |c: &Claimant<'_>| c.created.map(|t| t.0);
        // Providers without a creation time (none on the API server has none) sort last.
        (time(a).is_none(), time(a), a.name).cmp(&(time(b).is_none(), time(b), b.name))
    });
    let mut assignment = Assignment::default();
    for claimant in ordered {
        let (wanted, invalid) = wanted(claimant);
        let mut report = Report {
            invalid,
            ..Report::default()
        };
        for (kind, served) in wanted {
            match assignment.kinds.get(&kind) {
                Some(owner) => report.conflicts.push((kind, owner.provider.clone())),
                None => {
                    report.served.push(kind.clone());
                    assignment.kinds.insert(kind, served);
                }
            }
        }
        assignment.reports.insert(claimant.name.to_owned(), report);
    }
    assignment
}

/// The parameters a provider receives for an object of a served kind: its `spec` with the
/// `apiVersion` and `kind` the provider knows it as, `{"apiVersion", "kind", "spec"}`.
pub fn parameters(served: &Served, spec: Option<&serde_json::Value>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": served.api_version_as,
        "kind": served.kind_as,
        "spec": spec.cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, kind: &str) -> DeclaredKind {
        DeclaredKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            status: true,
            crd: serde_json::Value::Null,
        }
    }

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn a_provider_serves_what_its_component_declares() {
        let declared = [kind("karpenter.kwok.sh", "KWOKNodeClass")];
        let a = assign(&[Claimant {
            name: "kwok",
            created: None,
            declared: &declared,
            spec: None,
        }]);
        let served = a.get("karpenter.kwok.sh", "KWOKNodeClass").unwrap();
        assert_eq!(served.provider, "kwok");
        assert_eq!(served.api_version_as, "karpenter.kwok.sh/v1");
        assert!(a.reports["kwok"].condition().0);
        assert!(a.get("karpenter.kwok.sh", "Other").is_none());
    }

    #[test]
    fn the_older_provider_keeps_a_contested_kind_whatever_the_order() {
        let declared = [kind("karpenter.kwok.sh", "KWOKNodeClass")];
        let (old, new) = (at(100), at(200));
        let claimants = [
            Claimant {
                name: "b-new",
                created: Some(&new),
                declared: &declared,
                spec: None,
            },
            Claimant {
                name: "z-old",
                created: Some(&old),
                declared: &declared,
                spec: None,
            },
        ];
        let mut reversed = claimants.clone();
        reversed.reverse();
        for order in [&claimants[..], &reversed[..]] {
            let a = assign(order);
            assert_eq!(
                a.get("karpenter.kwok.sh", "KWOKNodeClass")
                    .unwrap()
                    .provider,
                "z-old"
            );
            let (ok, reason, message) = a.reports["b-new"].condition();
            assert!(!ok);
            assert_eq!(reason, "NodeClassKindConflict");
            assert!(
                message.contains("KWOKNodeClass.karpenter.kwok.sh is served by Provider z-old")
            );
            assert!(a.reports["z-old"].condition().0);
        }
    }

    #[test]
    fn a_spec_restricts_and_remaps() {
        let declared = [
            kind("karpenter.kwok.sh", "KWOKNodeClass"),
            kind("example.com", "Other"),
        ];
        let spec = [
            NodeClassKindSpec {
                group: "karpenter.kwok.sh".into(),
                kind: "KWOKNodeClass".into(),
                version: None,
                plural: None,
                served_as: None,
            },
            NodeClassKindSpec {
                group: "acme.io".into(),
                kind: "AcmeNodeClass".into(),
                version: Some("v2".into()),
                plural: Some("acmenodeclasses".into()),
                served_as: Some("KWOKNodeClass.karpenter.kwok.sh".into()),
            },
            NodeClassKindSpec {
                group: "acme.io".into(),
                kind: "Unversioned".into(),
                version: None,
                plural: None,
                served_as: Some("KWOKNodeClass.karpenter.kwok.sh".into()),
            },
            NodeClassKindSpec {
                group: "acme.io".into(),
                kind: "Undeclared".into(),
                version: Some("v1".into()),
                plural: Some("undeclareds".into()),
                served_as: None,
            },
        ];
        let a = assign(&[Claimant {
            name: "kwok",
            created: None,
            declared: &declared,
            spec: Some(&spec),
        }]);
        assert!(a.get("example.com", "Other").is_none(), "restricted away");
        assert!(a.get("karpenter.kwok.sh", "KWOKNodeClass").is_some());
        let remapped = a.get("acme.io", "AcmeNodeClass").unwrap();
        assert_eq!(
            (remapped.version.as_str(), remapped.plural.as_str()),
            ("v2", "acmenodeclasses")
        );
        assert_eq!(
            (remapped.api_version_as.as_str(), remapped.kind_as.as_str()),
            ("karpenter.kwok.sh/v1", "KWOKNodeClass")
        );
        let report = &a.reports["kwok"];
        assert_eq!(report.invalid.len(), 2, "{:?}", report.invalid);
        let (ok, reason, _) = report.condition();
        assert!(!ok);
        assert_eq!(reason, "InvalidNodeClassKinds");
    }

    #[test]
    fn parameters_carry_the_spec_and_the_kind_the_provider_knows() {
        let served = Served {
            provider: "kwok".into(),
            version: "v2".into(),
            plural: "acmenodeclasses".into(),
            status: true,
            api_version_as: "karpenter.kwok.sh/v1alpha1".into(),
            kind_as: "KWOKNodeClass".into(),
        };
        let spec = serde_json::json!({"nodeRegistrationDelay": "5s"});
        assert_eq!(
            parameters(&served, Some(&spec)),
            serde_json::json!({
                "apiVersion": "karpenter.kwok.sh/v1alpha1",
                "kind": "KWOKNodeClass",
                "spec": {"nodeRegistrationDelay": "5s"},
            })
        );
        assert_eq!(parameters(&served, None)["spec"], serde_json::json!({}));
    }
}
