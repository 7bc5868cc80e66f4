//! Grants: what an admin allows a provider to do through the `kube` import.
//!
//! The shape is the one the `Provider` resource's `spec.grants` will use:
//!
//! ```yaml
//! - cluster: management          # or workload (the default)
//!   apiGroups: [cluster.x-k8s.io] # "" (or "core") is the core group, "*" any group
//!   resources: [machinedeployments, machinedeployments/scale, machines]
//!   verbs: [get, list, watch, patch]
//!   namespaces: [default]
//! ```
//!
//! Matching is deny-by-default: a call is allowed only if one grant matches every part of it.
//!
//! - **Resources**: `nodes` grants the resource itself, never its subresources; a subresource is
//!   granted only by an explicit `nodes/status` or `nodes/*`. `*` is any resource (without
//!   subresources), `*/scale` the `scale` subresource of any resource, `*/*` any subresource.
//! - **Namespaces**: absent or empty means *cluster-scoped resources only* (Nodes, CRDs, ...).
//!   A list of names grants namespaced resources in those namespaces; `*` grants every namespace,
//!   including lists across all namespaces. A grant covers either cluster-scoped or namespaced
//!   resources, never both: write two grants for both. (Absent meaning "all namespaces" would make
//!   the easiest grant to write the most dangerous one.)
//! - **Verbs**: `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`, or `*`.
//! - **Scope**: `owned` (the default) reaches only objects carrying the provider's ownership mark
//!   (the label [`OWNER_LABEL`](crate::api::labels::OWNER_LABEL)); `any` reaches every object
//!   the grant names and must be written out. When several grants allow a call, the widest scope
//!   wins (`any` over `owned`). What `owned` means call by call is
//!   [`ownership`](super::ownership)'s.

pub mod parse;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::api::provider::GrantScope;

/// Which cluster a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cluster {
    /// The cluster whose nodes Capstan manages.
    #[default]
    Workload,
    /// The management cluster (Cluster API keeps Machines there).
    Management,
}

impl fmt::Display for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cluster::Workload => "workload",
            Cluster::Management => "management",
        })
    }
}

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Read one object.
    Get,
    /// Read a collection.
    List,
    /// Watch a collection.
    Watch,
    /// Create an object.
    Create,
    /// Patch an object.
    Patch,
    /// Replace an object.
    Update,
    /// Delete an object.
    Delete,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 7] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Patch,
        Verb::Update,
        Verb::Delete,
    ];

    /// The verb's name as written in grants.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Update => "update",
            Verb::Delete => "delete",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A verb in a grant: one verb or `*`. Written as the verb's name or `"*"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum VerbRule {
    /// Any verb (`*`).
    Any,
    /// Exactly this verb.
    One(Verb),
}

impl VerbRule {
    /// Whether this rule allows `verb`.
    pub fn allows(self, verb: Verb) -> bool {
        match self {
            VerbRule::Any => true,
            VerbRule::One(one) => one == verb,
        }
    }

    /// The rule written as `text` (`"*"` or a verb's name).
    pub fn from_name(text: &str) -> Option<Self> {
        if text == "*" {
            return Some(VerbRule::Any);
        }
        Verb::ALL
            .into_iter()
            .find(|verb| verb.as_str() == text)
            .map(VerbRule::One)
    }
}

impl TryFrom<String> for VerbRule {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        VerbRule::from_name(&text).ok_or_else(|| {
            format!("unknown verb {text:?} (expected get, list, watch, create, patch, update, delete or *)")
        })
    }
}

impl From<VerbRule> for String {
    fn from(rule: VerbRule) -> Self {
        match rule {
            VerbRule::Any => "*".to_owned(),
            VerbRule::One(verb) => verb.as_str().to_owned(),
        }
    }
}

impl From<Verb> for VerbRule {
    fn from(verb: Verb) -> Self {
        VerbRule::One(verb)
    }
}

/// One grant. See the [module documentation](self) for the matching rules.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// The cluster (default workload).
    #[serde(default)]
    pub cluster: Cluster,
    /// API groups: `""` or `"core"` for the core group, `"*"` for any.
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources (plural names), optionally `resource/subresource`.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Verbs.
    #[serde(default)]
    pub verbs: Vec<VerbRule>,
    /// Namespaces: empty for cluster-scoped resources only, names, or `"*"` for all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Which objects: only the provider's own (the default) or any.
    #[serde(default)]
    pub scope: GrantScope,
}

/// Where a call's object lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope<'a> {
    /// A cluster-scoped resource.
    Cluster,
    /// A namespaced resource in this namespace.
    Namespace(&'a str),
    /// A namespaced resource across all namespaces (a cluster-wide list or watch).
    AllNamespaces,
}

impl fmt::Display for Scope<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Cluster => f.write_str("cluster-scoped"),
            Scope::Namespace(ns) => write!(f, "in namespace {ns}"),
            Scope::AllNamespaces => f.write_str("in all namespaces"),
        }
    }
}

/// A call to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request<'a> {
    /// The cluster.
    pub cluster: Cluster,
    /// The API group (`""` for core).
    pub group: &'a str,
    /// The resource's plural name.
    pub resource: &'a str,
    /// A subresource (`scale`, `status`).
    pub subresource: Option<&'a str>,
    /// The verb.
    pub verb: Verb,
    /// Where the object lives.
    pub scope: Scope<'a>,
}

impl fmt::Display for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.verb)?;
        if !self.group.is_empty() {
            write!(f, "{}.", self.group)?;
        }
        f.write_str(self.resource)?;
        if let Some(sub) = self.subresource {
            write!(f, "/{sub}")?;
        }
        write!(f, " ({}) on the {} cluster", self.scope, self.cluster)
    }
}

/// A call the grants do not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not granted: {request}")]
pub struct Denied {
    /// The refused call, described.
    pub request: String,
}

impl Grant {
    /// Whether this grant allows `request`.
    pub fn allows(&self, request: &Request<'_>) -> bool {
        self.cluster == request.cluster
            && self.allows_group(request.group)
            && self.verbs.iter().any(|rule| rule.allows(request.verb))
            && self
                .resources
                .iter()
                .any(|rule| resource_matches(rule, request.resource, request.subresource))
            && scope_matches(&self.namespaces, request.scope)
    }

    /// Whether this grant could allow *some* call with this cluster, group and verb (a cheap check
    /// before discovery, so that an obviously denied call costs no API request).
    pub fn may_allow(&self, cluster: Cluster, group: &str, verb: Verb) -> bool {
        self.cluster == cluster
            && self.allows_group(group)
            && self.verbs.iter().any(|rule| rule.allows(verb))
    }

    fn allows_group(&self, group: &str) -> bool {
        self.api_groups
            .iter()
            .any(|g| g == "*" || g == group || (g == "core" && group.is_empty()))
    }
}

fn resource_matches(rule: &str, resource: &str, subresource: Option<&str>) -> bool {
    let (rule_resource, rule_sub) = match rule.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (rule, None),
    };
    let resource_ok = rule_resource == "*" || rule_resource == resource;
    match (rule_sub, subresource) {
        (None, None) => resource_ok,
        (Some(rule_sub), Some(sub)) => resource_ok && (rule_sub == "*" || rule_sub == sub),
        _ => false,
    }
}

fn scope_matches(namespaces: &[String], scope: Scope<'_>) -> bool {
    match scope {
        Scope::Cluster => namespaces.is_empty(),
        Scope::Namespace(ns) => namespaces.iter().any(|n| n == "*" || n == ns),
        Scope::AllNamespaces => namespaces.iter().any(|n| n == "*"),
    }
}

/// Everything a provider may do through `kube`. Empty allows nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grants(pub Vec<Grant>);

impl Grants {
    /// No grants: every call is denied.
    pub fn none() -> Self {
        Self::default()
    }

    /// Allows `request` if some grant matches it, with the widest scope of those that do
    /// (`any` over `owned`).
    pub fn check(&self, request: &Request<'_>) -> Result<GrantScope, Denied> {
        self.0
            .iter()
            .filter(|grant| grant.allows(request))
            .map(|grant| grant.scope)
            .max_by_key(|scope| matches!(scope, GrantScope::Any))
            .ok_or_else(|| Denied {
                request: request.to_string(),
            })
    }

    /// The grants that reach any object (`scope: any`), with their positions: what
    /// `capstan provider inspect` and the Provider's status flag.
    pub fn unscoped(&self) -> impl Iterator<Item = (usize, &Grant)> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, grant)| grant.scope == GrantScope::Any)
    }

    /// Whether some grant could allow a call with this cluster, group and verb.
    pub fn may_allow(&self, cluster: Cluster, group: &str, verb: Verb) -> bool {
        self.0
            .iter()
            .any(|grant| grant.may_allow(cluster, group, verb))
    }

    /// The grants, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Grant> {
        self.0.iter()
    }

    /// Whether there are no grants.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Grant {
    /// The grant in one line, as a flag would write it: `get,list nodes (workload)`.
    pub fn summary(&self) -> String {
        let verbs: Vec<String> = self.verbs.iter().map(|v| String::from(*v)).collect();
        let groups: Vec<&str> = self
            .api_groups
            .iter()
            .map(|g| if g.is_empty() { "core" } else { g.as_str() })
            .collect();
        let mut text = format!(
            "{} {} in {} ({}",
            verbs.join(","),
            self.resources.join(","),
            groups.join(","),
            self.cluster
        );
        if !self.namespaces.is_empty() {
            text.push_str(&format!(", namespaces {}", self.namespaces.join(",")));
        }
        text.push(')');
        text
    }
}

impl Grants {
    /// Why the grants are flagged, if any is unscoped: `grant 2 (get * in
    /// infrastructure.cluster.x-k8s.io (management)) has scope any`, one per grant.
    pub fn unscoped_summary(&self) -> Option<String> {
        let lines: Vec<String> = self
            .unscoped()
            .map(|(i, grant)| format!("grant {i} ({}) has scope any", grant.summary()))
            .collect();
        (!lines.is_empty()).then(|| {
            format!(
                "{}: it reaches objects the provider does not own",
                lines.join("; ")
            )
        })
    }
}

impl FromIterator<Grant> for Grants {
    fn from_iter<I: IntoIterator<Item = Grant>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn grant(groups: &[&str], resources: &[&str], verbs: &[VerbRule], ns: &[&str]) -> Grant {
        Grant {
            cluster: Cluster::Workload,
            api_groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            verbs: verbs.to_vec(),
            namespaces: ns.iter().map(|s| s.to_string()).collect(),
            scope: GrantScope::Owned,
        }
    }

    fn req<'a>(
        group: &'a str,
        resource: &'a str,
        sub: Option<&'a str>,
        verb: Verb,
        scope: Scope<'a>,
    ) -> Request<'a> {
        Request {
            cluster: Cluster::Workload,
            group,
            resource,
            subresource: sub,
            verb,
            scope,
        }
    }

    #[test]
    fn empty_grants_deny() {
        let denied = Grants::none()
            .check(&req(
                "",
                "secrets",
                None,
                Verb::Get,
                Scope::Namespace("default"),
            ))
            .unwrap_err();
        assert_eq!(
            denied.to_string(),
            "not granted: get secrets (in namespace default) on the workload cluster"
        );
    }

    #[test]
    fn subresources_need_explicit_grants() {
        let plain = Grants(vec![grant(
            &["apps"],
            &["deployments"],
            &[VerbRule::Any],
            &["*"],
        )]);
        let scale = req(
            "apps",
            "deployments",
            Some("scale"),
            Verb::Patch,
            Scope::Namespace("a"),
        );
        assert!(plain.check(&scale).is_err());
        let any_resource = Grants(vec![grant(&["apps"], &["*"], &[VerbRule::Any], &["*"])]);
        assert!(any_resource.check(&scale).is_err());

        for rule in ["deployments/scale", "deployments/*", "*/scale", "*/*"] {
            let g = Grants(vec![grant(
                &["apps"],
                &[rule],
                &[VerbRule::One(Verb::Patch)],
                &["*"],
            )]);
            assert!(g.check(&scale).is_ok(), "{rule}");
            // ...but not the resource itself.
            let main = req(
                "apps",
                "deployments",
                None,
                Verb::Patch,
                Scope::Namespace("a"),
            );
            assert!(g.check(&main).is_err(), "{rule}");
        }
        let status = Grants(vec![grant(
            &["apps"],
            &["deployments/status"],
            &[VerbRule::Any],
            &["*"],
        )]);
        assert!(status.check(&scale).is_err());
    }

    /// One row per case: the grant (groups, resources, namespaces; any verb unless `verbs` says),
    /// the request (group, resource, verb, scope), allowed or not.
    #[test]
    fn groups_resources_verbs_and_namespaces() {
        type Row<'a> = (
            &'a str,
            (&'a [&'a str], &'a [&'a str], &'a [VerbRule], &'a [&'a str]),
            (&'a str, &'a str, Verb, Scope<'a>),
            bool,
        );
        let get = &[VerbRule::One(Verb::Get)][..];
        let any = &[VerbRule::Any][..];
        let rows: &[Row<'_>] = &[
            (
                "exact grant",
                (&[""], &["nodes"], get, &[]),
                ("", "nodes", Verb::Get, Scope::Cluster),
                true,
            ),
            (
                "other verb",
                (&[""], &["nodes"], get, &[]),
                ("", "nodes", Verb::Delete, Scope::Cluster),
                false,
            ),
            (
                "other group",
                (&[""], &["nodes"], get, &[]),
                ("apps", "nodes", Verb::Get, Scope::Cluster),
                false,
            ),
            (
                "other resource",
                (&[""], &["nodes"], get, &[]),
                ("", "pods", Verb::Get, Scope::Cluster),
                false,
            ),
            (
                "core is the empty group",
                (&["core"], &["nodes"], get, &[]),
                ("", "nodes", Verb::Get, Scope::Cluster),
                true,
            ),
            (
                "granted namespace",
                (&[""], &["configmaps"], any, &["a"]),
                ("", "configmaps", Verb::Get, Scope::Namespace("a")),
                true,
            ),
            (
                "other namespace",
                (&[""], &["configmaps"], any, &["a"]),
                ("", "configmaps", Verb::Get, Scope::Namespace("b")),
                false,
            ),
            (
                "one namespace is not all",
                (&[""], &["configmaps"], any, &["a"]),
                ("", "configmaps", Verb::List, Scope::AllNamespaces),
                false,
            ),
            (
                "a namespace grant is not cluster scope",
                (&[""], &["configmaps"], any, &["a"]),
                ("", "configmaps", Verb::Get, Scope::Cluster),
                false,
            ),
            (
                "* covers all namespaces",
                (&[""], &["configmaps"], any, &["*"]),
                ("", "configmaps", Verb::List, Scope::AllNamespaces),
                true,
            ),
            (
                "* covers any namespace",
                (&[""], &["configmaps"], any, &["*"]),
                ("", "configmaps", Verb::Get, Scope::Namespace("z")),
                true,
            ),
            (
                "* is still not cluster scope",
                (&[""], &["configmaps"], any, &["*"]),
                ("", "configmaps", Verb::Get, Scope::Cluster),
                false,
            ),
            (
                "no namespaces: cluster scope",
                (&[""], &["*"], any, &[]),
                ("", "nodes", Verb::Get, Scope::Cluster),
                true,
            ),
            (
                "no namespaces: no namespace",
                (&[""], &["*"], any, &[]),
                ("", "secrets", Verb::Get, Scope::Namespace("default")),
                false,
            ),
        ];
        for (
            name,
            (groups, resources, verbs, namespaces),
            (group, resource, verb, scope),
            allowed,
        ) in rows
        {
            let grants = Grants(vec![grant(groups, resources, verbs, namespaces)]);
            let result = grants.check(&req(group, resource, None, *verb, *scope));
            assert_eq!(result.is_ok(), *allowed, "{name}: {result:?}");
        }
    }

    #[test]
    fn clusters_are_separate() {
        let mut g = grant(&["*"], &["*"], &[VerbRule::Any], &[]);
        g.cluster = Cluster::Management;
        let grants = Grants(vec![g]);
        assert!(
            grants
                .check(&req("", "nodes", None, Verb::Get, Scope::Cluster))
                .is_err()
        );
        let mut r = req("", "nodes", None, Verb::Get, Scope::Cluster);
        r.cluster = Cluster::Management;
        assert!(grants.check(&r).is_ok());
    }

    #[test]
    fn the_widest_scope_of_the_matching_grants_wins() {
        let owned = grant(&[""], &["nodes"], &[VerbRule::Any], &[]);
        let any = Grant {
            scope: GrantScope::Any,
            ..grant(&[""], &["nodes"], &[VerbRule::One(Verb::Get)], &[])
        };
        let grants = Grants(vec![owned.clone(), any.clone()]);
        let get = req("", "nodes", None, Verb::Get, Scope::Cluster);
        let patch = req("", "nodes", None, Verb::Patch, Scope::Cluster);
        assert_eq!(grants.check(&get), Ok(GrantScope::Any));
        assert_eq!(grants.check(&patch), Ok(GrantScope::Owned));
        assert_eq!(Grants(vec![owned]).check(&get), Ok(GrantScope::Owned));
        assert_eq!(
            grants.unscoped().map(|(i, _)| i).collect::<Vec<_>>(),
            vec![1]
        );
    }

    #[test]
    fn unscoped_grants_are_summarized() {
        let owned = grant(&[""], &["nodes"], &[VerbRule::Any], &[]);
        assert_eq!(Grants(vec![owned.clone()]).unscoped_summary(), None);
        let any = Grant {
            scope: GrantScope::Any,
            ..grant(
                &["apps"],
                &["deployments"],
                &[VerbRule::One(Verb::Get)],
                &["*"],
            )
        };
        assert_eq!(
            Grants(vec![owned, any]).unscoped_summary().as_deref(),
            Some(
                "grant 1 (get deployments in apps (workload, namespaces *)) has scope any: it reaches objects the provider does not own"
            )
        );
    }

    #[test]
    fn scope_is_owned_unless_written_any() {
        let grants: Grants = serde_saphyr::from_str(
            "- apiGroups: ['']\n  resources: [nodes]\n  verbs: [get]\n- apiGroups: ['']\n  resources: [pods]\n  verbs: [get]\n  scope: any\n",
        )
        .unwrap();
        assert_eq!(grants.0[0].scope, GrantScope::Owned);
        assert_eq!(grants.0[1].scope, GrantScope::Any);
        assert!(
            serde_saphyr::from_str::<Grants>(
                "- apiGroups: ['']\n  resources: [nodes]\n  verbs: [get]\n  scope: mine\n"
            )
            .is_err()
        );
    }

    #[test]
    fn may_allow_is_a_prefilter() {
        let g = Grants(vec![grant(
            &[""],
            &["nodes"],
            &[VerbRule::One(Verb::Get)],
            &[],
        )]);
        assert!(g.may_allow(Cluster::Workload, "", Verb::Get));
        assert!(!g.may_allow(Cluster::Workload, "", Verb::List));
        assert!(!g.may_allow(Cluster::Management, "", Verb::Get));
        assert!(!g.may_allow(Cluster::Workload, "apps", Verb::Get));
    }

    #[test]
    fn yaml_shape() {
        let yaml = r#"
- cluster: management
  apiGroups: [cluster.x-k8s.io]
  resources: [machinedeployments, machinedeployments/scale, machines]
  verbs: [get, list, watch, patch]
  namespaces: [default]
- apiGroups: [""]
  resources: [nodes]
  verbs: ["*"]
"#;
        let grants: Grants = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(grants.0.len(), 2);
        assert_eq!(grants.0[0].cluster, Cluster::Management);
        assert_eq!(grants.0[1].cluster, Cluster::Workload);
        assert_eq!(grants.0[1].verbs, vec![VerbRule::Any]);
        assert!(grants.0[1].namespaces.is_empty());
        let scale = Request {
            cluster: Cluster::Management,
            group: "cluster.x-k8s.io",
            resource: "machinedeployments",
            subresource: Some("scale"),
            verb: Verb::Patch,
            scope: Scope::Namespace("default"),
        };
        assert!(grants.check(&scale).is_ok());
    }

    fn arb_word() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("*".to_string()),
            Just("apps".to_string()),
            Just("nodes".to_string()),
            Just("default".to_string()),
            "[a-z]{1,4}",
        ]
    }

    fn arb_resource_rule() -> impl Strategy<Value = String> {
        (arb_word(), prop::option::of(arb_word())).prop_map(|(r, s)| match s {
            Some(s) => format!("{r}/{s}"),
            None => r,
        })
    }

    fn arb_verb() -> impl Strategy<Value = Verb> {
        prop::sample::select(Verb::ALL.to_vec())
    }

    fn arb_verb_rule() -> impl Strategy<Value = VerbRule> {
        prop_oneof![Just(VerbRule::Any), arb_verb().prop_map(VerbRule::from)]
    }

    fn arb_cluster() -> impl Strategy<Value = Cluster> {
        prop_oneof![Just(Cluster::Workload), Just(Cluster::Management)]
    }

    fn arb_grant() -> impl Strategy<Value = Grant> {
        (
            arb_cluster(),
            prop::collection::vec(arb_word(), 0..3),
            prop::collection::vec(arb_resource_rule(), 0..3),
            prop::collection::vec(arb_verb_rule(), 0..3),
            prop::collection::vec(arb_word(), 0..3),
            prop_oneof![Just(GrantScope::Owned), Just(GrantScope::Any)],
        )
            .prop_map(
                |(cluster, api_groups, resources, verbs, namespaces, scope)| Grant {
                    cluster,
                    api_groups,
                    resources,
                    verbs,
                    namespaces,
                    scope,
                },
            )
    }

    #[derive(Debug, Clone)]
    struct OwnedRequest {
        cluster: Cluster,
        group: String,
        resource: String,
        sub: Option<String>,
        verb: Verb,
        scope: u8,
        ns: String,
    }

    impl OwnedRequest {
        fn as_request(&self) -> Request<'_> {
            Request {
                cluster: self.cluster,
                group: &self.group,
                resource: &self.resource,
                subresource: self.sub.as_deref(),
                verb: self.verb,
                scope: match self.scope {
                    0 => Scope::Cluster,
                    1 => Scope::AllNamespaces,
                    _ => Scope::Namespace(&self.ns),
                },
            }
        }
    }

    fn arb_request() -> impl Strategy<Value = OwnedRequest> {
        (
            arb_cluster(),
            "(|apps|[a-z]{1,3})",
            "(nodes|[a-z]{1,3})",
            prop::option::of("(scale|status|[a-z]{1,3})"),
            arb_verb(),
            0u8..3,
            "(default|[a-z]{1,3})",
        )
            .prop_map(
                |(cluster, group, resource, sub, verb, scope, ns)| OwnedRequest {
                    cluster,
                    group,
                    resource,
                    sub,
                    verb,
                    scope,
                    ns,
                },
            )
    }

    proptest! {
        #[test]
        fn nothing_is_allowed_without_grants(r in arb_request()) {
            prop_assert!(Grants::none().check(&r.as_request()).is_err());
        }

        #[test]
        fn adding_grants_never_removes_permissions(
            base in prop::collection::vec(arb_grant(), 0..4),
            extra in arb_grant(),
            r in arb_request(),
        ) {
            let before = Grants(base.clone()).check(&r.as_request()).is_ok();
            let mut more = base;
            more.push(extra);
            let after = Grants(more).check(&r.as_request()).is_ok();
            prop_assert!(!before || after);
        }

        #[test]
        fn adding_grants_never_narrows_the_scope(
            base in prop::collection::vec(arb_grant(), 0..4),
            extra in arb_grant(),
            r in arb_request(),
        ) {
            let before = Grants(base.clone()).check(&r.as_request());
            let mut more = base;
            more.push(extra);
            let after = Grants(more).check(&r.as_request());
            if before == Ok(GrantScope::Any) {
                prop_assert_eq!(after, Ok(GrantScope::Any));
            }
        }

        #[test]
        fn grants_without_verbs_allow_nothing(mut g in arb_grant(), r in arb_request()) {
            g.verbs.clear();
            prop_assert!(Grants(vec![g]).check(&r.as_request()).is_err());
        }

        #[test]
        fn a_subresource_is_never_allowed_by_a_plain_resource_rule(
            mut g in arb_grant(),
            r in arb_request(),
        ) {
            g.resources.retain(|rule| !rule.contains('/'));
            let mut r = r;
            r.sub = Some("scale".into());
            prop_assert!(Grants(vec![g]).check(&r.as_request()).is_err());
        }

        #[test]
        fn allowed_implies_prefilter(g in prop::collection::vec(arb_grant(), 0..4), r in arb_request()) {
            let grants = Grants(g);
            let request = r.as_request();
            if grants.check(&request).is_ok() {
                prop_assert!(grants.may_allow(request.cluster, request.group, request.verb));
            }
        }

        #[test]
        fn yaml_round_trip(g in prop::collection::vec(arb_grant(), 0..4)) {
            let grants = Grants(g);
            let json = serde_json::to_string(&grants).unwrap();
            let back: Grants = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, grants);
        }
    }
}
