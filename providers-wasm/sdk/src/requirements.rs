//! Node-selector requirements: constructors, operator names, and Karpenter's matching rules.
//!
//! - [`Requirement::in_`], [`Requirement::not_in`], [`Requirement::exists`],
//!   [`Requirement::does_not_exist`], [`Requirement::gt`], [`Requirement::lt`] build requirements.
//! - [`labels_satisfy`] checks a concrete label set against requirements (Kubernetes node-selector
//!   semantics, every requirement on its own).
//! - [`Requirements`] merges requirements per key into [`ValueSet`]s and answers whether two sets of
//!   requirements can be met by one node ([`Requirements::intersects`], [`Requirements::compatible`]),
//!   as Karpenter's scheduler does.

mod set;
mod value_set;

pub use set::{Incompatibility, Requirements};
pub use value_set::ValueSet;

use crate::{KeyValue, Operator, Requirement};

/// A requirement that cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// `Gt`/`Lt` need exactly one value.
    #[error("requirement on {key:?}: operator {operator} needs exactly one value, got {count}")]
    Arity {
        /// The requirement's key.
        key: String,
        /// The operator's Kubernetes name.
        operator: &'static str,
        /// How many values it had.
        count: usize,
    },
    /// `Gt`/`Lt` need an integer value.
    #[error("requirement on {key:?}: operator {operator} needs an integer, got {value:?}")]
    NotInteger {
        /// The requirement's key.
        key: String,
        /// The operator's Kubernetes name.
        operator: &'static str,
        /// The value given.
        value: String,
    },
}

impl Requirement {
    fn with(key: impl Into<String>, operator: Operator, values: Vec<String>) -> Self {
        Self {
            key: key.into(),
            operator,
            values,
            min_values: None,
        }
    }

    /// `key In [values]`: the label must be set to one of `values`.
    pub fn in_<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(
            key,
            Operator::In,
            values.into_iter().map(Into::into).collect(),
        )
    }

    /// `key NotIn [values]`: the label must be absent or set to something else.
    pub fn not_in<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with(
            key,
            Operator::NotIn,
            values.into_iter().map(Into::into).collect(),
        )
    }

    /// `key Exists`.
    pub fn exists(key: impl Into<String>) -> Self {
        Self::with(key, Operator::Exists, Vec::new())
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: impl Into<String>) -> Self {
        Self::with(key, Operator::DoesNotExist, Vec::new())
    }

    /// `key Gt n`: the label must be an integer greater than `n`.
    pub fn gt(key: impl Into<String>, n: i64) -> Self {
        Self::with(key, Operator::Gt, vec![n.to_string()])
    }

    /// `key Lt n`: the label must be an integer less than `n`.
    pub fn lt(key: impl Into<String>, n: i64) -> Self {
        Self::with(key, Operator::Lt, vec![n.to_string()])
    }

    /// Sets `min-values`.
    pub fn with_min_values(mut self, min_values: u32) -> Self {
        self.min_values = Some(min_values);
        self
    }

    /// Whether a node with `labels` meets this requirement (Kubernetes node-selector semantics).
    ///
    /// `Gt`/`Lt` with a malformed value match nothing.
    pub fn matches<'a>(&self, mut label: impl FnMut(&str) -> Option<&'a str>) -> bool {
        let value = label(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| self.values.iter().all(|x| x != v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let (Some(value), [bound]) = (value, self.values.as_slice()) else {
                    return false;
                };
                match (value.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(v), Ok(b)) if self.operator == Operator::Gt => v > b,
                    (Ok(v), Ok(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

impl Operator {
    /// The Kubernetes spelling (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }

    /// Parses the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            _ => return None,
        })
    }
}

/// Whether a node labelled `labels` meets every one of `requirements`.
pub fn labels_satisfy(labels: &[KeyValue], requirements: &[Requirement]) -> bool {
    requirements
        .iter()
        .all(|r| r.matches(|key| crate::lookup(labels, key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
        pairs.iter().map(|(k, v)| KeyValue::new(*k, *v)).collect()
    }

    #[test]
    fn constructors_fill_operator_and_values() {
        let r = Requirement::in_("k", ["a", "b"]).with_min_values(2);
        assert_eq!(r.operator, Operator::In);
        assert_eq!(r.values, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(r.min_values, Some(2));
        assert_eq!(Requirement::gt("k", 3).values, vec!["3".to_string()]);
        assert!(Requirement::exists("k").values.is_empty());
    }

    #[test]
    fn operators_round_trip() {
        for op in [
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Gt,
            Operator::Lt,
        ] {
            assert_eq!(Operator::parse(op.as_str()), Some(op));
        }
    }

    #[test]
    fn label_matching_follows_node_selector_semantics() {
        let l = labels(&[("zone", "a"), ("cpu", "4")]);
        assert!(labels_satisfy(&l, &[Requirement::in_("zone", ["a", "b"])]));
        assert!(!labels_satisfy(&l, &[Requirement::in_("zone", ["b"])]));
        assert!(!labels_satisfy(&l, &[Requirement::in_("missing", ["b"])]));
        assert!(labels_satisfy(&l, &[Requirement::not_in("zone", ["b"])]));
        assert!(labels_satisfy(&l, &[Requirement::not_in("missing", ["b"])]));
        assert!(!labels_satisfy(&l, &[Requirement::not_in("zone", ["a"])]));
        assert!(labels_satisfy(&l, &[Requirement::exists("zone")]));
        assert!(!labels_satisfy(&l, &[Requirement::exists("missing")]));
        assert!(labels_satisfy(
            &l,
            &[Requirement::does_not_exist("missing")]
        ));
        assert!(!labels_satisfy(&l, &[Requirement::does_not_exist("zone")]));
        assert!(labels_satisfy(&l, &[Requirement::gt("cpu", 3)]));
        assert!(!labels_satisfy(&l, &[Requirement::gt("cpu", 4)]));
        assert!(labels_satisfy(&l, &[Requirement::lt("cpu", 5)]));
        assert!(!labels_satisfy(&l, &[Requirement::lt("zone", 5)]));
        assert!(!labels_satisfy(&l, &[Requirement::gt("missing", 0)]));
        assert!(labels_satisfy(&l, &[]));
        assert!(!labels_satisfy(
            &l,
            &[Requirement::exists("zone"), Requirement::exists("missing")]
        ));
    }
}
