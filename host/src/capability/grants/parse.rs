//! Reading grants from a file or from command-line flags.
//!
//! A grants file is YAML or JSON: either the list itself or an object with a `grants` key (so a
//! `Provider` spec's fragment can be used as is).
//!
//! A flag holds one grant as `key=value` pairs separated by `;`, lists separated by `,`:
//!
//! ```text
//! cluster=workload;groups=core;resources=nodes,nodes/status;verbs=get,list,patch
//! groups=;resources=configmaps;verbs=get;namespaces=default
//! ```
//!
//! `cluster` defaults to `workload`, `namespaces` to none (cluster-scoped resources only),
//! `scope` to `owned` (`scope=any` reaches objects the provider does not own).

use serde::Deserialize;

#[cfg(test)]
use super::Verb;
use super::{Cluster, Grant, GrantScope, Grants, VerbRule};

/// A grants file or flag that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not valid YAML/JSON of the expected shape.
    #[error("cannot read grants: {0}")]
    Syntax(String),
    /// A flag is malformed.
    #[error("bad grant flag {flag:?}: {reason}")]
    Flag {
        /// The flag's text.
        flag: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A grant names something that can never match.
    #[error("grant {index}: {reason}")]
    Invalid {
        /// The grant's position (from 0).
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// Reads grants from YAML or JSON text, then [`validate`]s them.
pub fn from_text(text: &str) -> Result<Grants, ParseError> {
    if text.trim().is_empty() {
        return Ok(Grants::none());
    }
    let value: serde_json::Value =
        serde_saphyr::from_str(text).map_err(|err| ParseError::Syntax(err.to_string()))?;
    let list = match value {
        serde_json::Value::Object(mut object) if object.contains_key("grants") => {
            object.remove("grants").unwrap_or(serde_json::Value::Null)
        }
        other => other,
    };
    from_value(list)
}

/// Reads grants from a JSON list (e.g. a `Provider`'s `spec.grants`), then [`validate`]s them.
/// The same rules apply as to a grants file: unknown fields and verbs are errors.
pub fn from_value(list: serde_json::Value) -> Result<Grants, ParseError> {
    let grants = Grants::deserialize(list).map_err(|err| ParseError::Syntax(err.to_string()))?;
    validate(&grants)?;
    Ok(grants)
}

/// Reads one grant from its flag form (see the [module documentation](self)).
pub fn from_flag(flag: &str) -> Result<Grant, ParseError> {
    let bad = |reason: String| ParseError::Flag {
        flag: flag.to_owned(),
        reason,
    };
    let mut grant = Grant::default();
    for part in flag.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
        let items = || -> Vec<String> {
            value
                .split(',')
                .map(str::trim)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        match key.trim() {
            "cluster" => {
                grant.cluster = match value.trim() {
                    "workload" => Cluster::Workload,
                    "management" => Cluster::Management,
                    other => return Err(bad(format!("unknown cluster {other:?}"))),
                }
            }
            "groups" | "apiGroups" => grant.api_groups = items(),
            "scope" => {
                grant.scope = match value.trim() {
                    "owned" => GrantScope::Owned,
                    "any" => GrantScope::Any,
                    other => {
                        return Err(bad(format!(
                            "unknown scope {other:?} (expected owned or any)"
                        )));
                    }
                }
            }
            "resources" => {
                grant.resources = items().into_iter().filter(|r| !r.is_empty()).collect()
            }
            "namespaces" => {
                grant.namespaces = items().into_iter().filter(|n| !n.is_empty()).collect()
            }
            "verbs" => {
                grant.verbs = items()
                    .iter()
                    .filter(|v| !v.is_empty())
                    .map(|v| {
                        VerbRule::from_name(v).ok_or_else(|| bad(format!("unknown verb {v:?}")))
                    })
                    .collect::<Result<_, _>>()?
            }
            other => return Err(bad(format!("unknown key {other:?}"))),
        }
    }
    if grant.resources.is_empty() || grant.verbs.is_empty() {
        return Err(bad("needs resources=... and verbs=...".into()));
    }
    if grant.api_groups.is_empty() {
        return Err(bad(
            "needs groups=... (empty or core for the core group)".into()
        ));
    }
    validate(&Grants(vec![grant.clone()]))?;
    Ok(grant)
}

/// Rejects entries that can never match (so a typo is an error, not a silent denial).
pub fn validate(grants: &Grants) -> Result<(), ParseError> {
    for (index, grant) in grants.iter().enumerate() {
        let invalid = |reason: String| ParseError::Invalid { index, reason };
        for resource in &grant.resources {
            let mut parts = resource.split('/');
            let main = parts.next().unwrap_or_default();
            let sub = parts.next();
            if main.is_empty() || sub.is_some_and(str::is_empty) || parts.next().is_some() {
                return Err(invalid(format!(
                    "resource {resource:?} must be `name`, `name/subresource`, `*` or `*/sub`"
                )));
            }
            if resource.chars().any(|c| c.is_ascii_uppercase()) {
                return Err(invalid(format!(
                    "resource {resource:?} must be the lowercase plural name (not the kind)"
                )));
            }
        }
        for ns in &grant.namespaces {
            if ns.is_empty() {
                return Err(invalid("an empty namespace name never matches".into()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_list_or_a_wrapped_list() {
        let list = from_text("- apiGroups: ['']\n  resources: [nodes]\n  verbs: [get]\n").unwrap();
        assert_eq!(list.0.len(), 1);
        let wrapped = from_text(
            r#"{"grants": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}"#,
        )
        .unwrap();
        assert_eq!(wrapped, list);
        assert!(from_text("").unwrap().is_empty());
    }

    #[test]
    fn rejects_unknown_fields_and_verbs() {
        let err = from_text("- apiGroups: ['']\n  resources: [nodes]\n  verbs: [destroy]\n");
        assert!(matches!(err, Err(ParseError::Syntax(_))));
        let err = from_text("- apiGroup: ['']\n  resources: [nodes]\n  verbs: [get]\n");
        assert!(matches!(err, Err(ParseError::Syntax(_))));
    }

    #[test]
    fn rejects_kinds_and_bad_resources() {
        let err = from_text("- apiGroups: ['']\n  resources: [Node]\n  verbs: [get]\n");
        assert!(
            matches!(err, Err(ParseError::Invalid { index: 0, .. })),
            "{err:?}"
        );
        let err = from_text("- apiGroups: ['']\n  resources: [a/b/c]\n  verbs: [get]\n");
        assert!(matches!(err, Err(ParseError::Invalid { .. })));
    }

    #[test]
    fn flags() {
        let g = from_flag("cluster=management;groups=core,apps;resources=nodes,nodes/status;verbs=get,list;namespaces=*")
            .unwrap();
        assert_eq!(g.cluster, Cluster::Management);
        assert_eq!(g.api_groups, vec!["core", "apps"]);
        assert_eq!(g.resources, vec!["nodes", "nodes/status"]);
        assert_eq!(
            g.verbs,
            vec![VerbRule::One(Verb::Get), VerbRule::One(Verb::List)]
        );
        assert_eq!(g.namespaces, vec!["*"]);
        assert_eq!(g.scope, GrantScope::Owned);
        let any = from_flag("groups=;resources=nodes;verbs=get;scope=any").unwrap();
        assert_eq!(any.scope, GrantScope::Any);
        assert!(from_flag("groups=;resources=nodes;verbs=get;scope=all").is_err());

        let core = from_flag("groups=;resources=configmaps;verbs=*;namespaces=default").unwrap();
        assert_eq!(core.api_groups, vec![""]);
        assert_eq!(core.cluster, Cluster::Workload);

        assert!(from_flag("resources=nodes;verbs=get").is_err());
        assert!(from_flag("groups=;resources=nodes;verbs=explode").is_err());
        assert!(from_flag("groups=;resources=nodes;verbs=get;color=red").is_err());
        assert!(from_flag("groups=;resources=nodes").is_err());
    }
}
