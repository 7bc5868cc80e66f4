//! Node-selector requirements: constructors for the WIT `requirement`, and Karpenter's rules
//! through the shared model (`capstan-model`, the same code the host's scheduler runs).
//!
//! - [`Requirement::in_`], [`Requirement::not_in`], [`Requirement::exists`],
//!   [`Requirement::does_not_exist`], [`Requirement::gt`], [`Requirement::lt`],
//!   [`Requirement::gte`], [`Requirement::lte`] and [`Requirement::new`] build requirements. The
//!   contract's `operator` has no `Gte`/`Lte`: Karpenter v1's inclusive bounds become `Gt`/`Lt` one
//!   further out (`Gte 4` is `Gt 3`), as the host does when it calls the provider.
//! - [`labels_satisfy`] checks a concrete label set against requirements (Kubernetes node-selector
//!   semantics, every requirement on its own).
//! - [`Requirements`] merges requirements per key into [`ValueSet`]s and answers whether two sets of
//!   requirements can be met by one node ([`Requirements::intersects`], [`Requirements::compatible`]),
//!   as Karpenter's scheduler does; [`to_requirements`] writes a merged set back.

pub use capstan_model::requirements::{
    Incompatibility, Operator as SelectorOperator, Requirements, RequirementsError, SetOperator,
    ValueSet, integer_bound, selector_matches,
};

use capstan_model::requirements::Selector;

use crate::{KeyValue, Operator, Requirement};

/// A requirement that cannot be evaluated (a `Gt`/`Lt`/`Gte`/`Lte` without exactly one integer,
/// an unknown operator name).
pub type RequirementError = RequirementsError;

impl Selector for Requirement {
    fn key(&self) -> &str {
        &self.key
    }

    fn operator(&self) -> SelectorOperator {
        self.operator.into()
    }

    fn values(&self) -> &[String] {
        &self.values
    }

    fn min_values(&self) -> Option<u32> {
        self.min_values
    }
}

impl From<Operator> for SelectorOperator {
    fn from(operator: Operator) -> Self {
        match operator {
            Operator::In => SelectorOperator::In,
            Operator::NotIn => SelectorOperator::NotIn,
            Operator::Exists => SelectorOperator::Exists,
            Operator::DoesNotExist => SelectorOperator::DoesNotExist,
            Operator::Gt => SelectorOperator::Gt,
            Operator::Lt => SelectorOperator::Lt,
        }
    }
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

    /// A requirement from any node-selector operator, Karpenter's `Gte`/`Lte` included (as
    /// `Gt`/`Lt` one further out); fails when a bound is not exactly one integer.
    pub fn new<I, S>(
        key: impl Into<String>,
        operator: SelectorOperator,
        values: I,
    ) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let key = key.into();
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        let wire = match operator {
            SelectorOperator::In => Operator::In,
            SelectorOperator::NotIn => Operator::NotIn,
            SelectorOperator::Exists => return Ok(Self::exists(key)),
            SelectorOperator::DoesNotExist => return Ok(Self::does_not_exist(key)),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                integer_bound(&key, operator, &values)?;
                if operator == SelectorOperator::Gt {
                    Operator::Gt
                } else {
                    Operator::Lt
                }
            }
            SelectorOperator::Gte => {
                return Ok(Self::gte(&key, integer_bound(&key, operator, &values)?));
            }
            SelectorOperator::Lte => {
                return Ok(Self::lte(&key, integer_bound(&key, operator, &values)?));
            }
        };
        Ok(Self::with(key, wire, values))
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

    /// `key Gte n` (Karpenter v1): the label must be an integer of at least `n`; sent as
    /// `Gt n-1`.
    pub fn gte(key: impl Into<String>, n: i64) -> Self {
        Self::gt(key, n.saturating_sub(1))
    }

    /// `key Lte n` (Karpenter v1): the label must be an integer of at most `n`; sent as
    /// `Lt n+1`.
    pub fn lte(key: impl Into<String>, n: i64) -> Self {
        Self::lt(key, n.saturating_add(1))
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
        selector_matches(self.operator.into(), &self.values, label(&self.key))
    }
}

impl Operator {
    /// Every operator the contract carries.
    pub const ALL: [Operator; 6] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
    ];

    /// The Kubernetes spelling (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`).
    pub fn as_str(self) -> &'static str {
        SelectorOperator::from(self).as_str()
    }

    /// Parses the Kubernetes spelling of an operator the contract carries (`Gte`/`Lte` are not:
    /// build those with [`Requirement::new`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.as_str() == s)
    }
}

/// Whether a node labelled `labels` meets every one of `requirements`.
pub fn labels_satisfy(labels: &[KeyValue], requirements: &[Requirement]) -> bool {
    requirements
        .iter()
        .all(|r| r.matches(|key| crate::lookup(labels, key)))
}

/// A merged set written back as WIT requirements: one per key, except that a complement with
/// exclusions and bounds becomes `NotIn` plus `Gt`/`Lt`.
pub fn to_requirements(requirements: &Requirements) -> Vec<Requirement> {
    let mut out = Vec::with_capacity(requirements.len());
    for r in requirements.iter() {
        let set = r.set();
        let listed = || set.values().to_vec();
        let mut push = |operator, values| {
            out.push(Requirement {
                key: r.key().to_owned(),
                operator,
                values,
                min_values: r.min_values(),
            });
        };
        match set.operator() {
            SetOperator::In => push(Operator::In, listed()),
            SetOperator::DoesNotExist => push(Operator::DoesNotExist, Vec::new()),
            SetOperator::Exists | SetOperator::NotIn => {
                let (gt, lt) = set.bounds();
                if !set.values().is_empty() {
                    push(Operator::NotIn, listed());
                }
                if let Some(gt) = gt {
                    push(Operator::Gt, vec![gt.to_string()]);
                }
                if let Some(lt) = lt {
                    push(Operator::Lt, vec![lt.to_string()]);
                }
                if set.is_any() {
                    push(Operator::Exists, Vec::new());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels;

    fn labels(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
        pairs.iter().map(|(k, v)| KeyValue::new(*k, *v)).collect()
    }

    fn reqs(list: &[Requirement]) -> Requirements {
        Requirements::from_slice(list).unwrap()
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
    fn inclusive_bounds_go_out_as_strict_ones() {
        assert_eq!(Requirement::gte("k", 4), Requirement::gt("k", 3));
        assert_eq!(Requirement::lte("k", 4), Requirement::lt("k", 5));
        assert_eq!(
            Requirement::new("k", SelectorOperator::Gte, ["4"]),
            Ok(Requirement::gt("k", 3))
        );
        assert_eq!(
            Requirement::new("k", SelectorOperator::Lte, ["4"]),
            Ok(Requirement::lt("k", 5))
        );
        assert_eq!(
            Requirement::new("k", SelectorOperator::In, ["a"]),
            Ok(Requirement::in_("k", ["a"]))
        );
        assert!(Requirement::new("k", SelectorOperator::Gte, ["x"]).is_err());
        assert!(Requirement::new("k", SelectorOperator::Lt, ["1", "2"]).is_err());
        let l = labels(&[("cpu", "4")]);
        assert!(labels_satisfy(&l, &[Requirement::gte("cpu", 4)]));
        assert!(!labels_satisfy(&l, &[Requirement::gte("cpu", 5)]));
        assert!(labels_satisfy(&l, &[Requirement::lte("cpu", 4)]));
        assert!(!labels_satisfy(&l, &[Requirement::lte("cpu", 3)]));
        let merged = reqs(&[Requirement::gte("cpu", 4), Requirement::lte("cpu", 4)]);
        assert!(merged.matches_labels(|_| Some("4")));
        assert!(!merged.matches_labels(|_| Some("5")));
    }

    #[test]
    fn operators_round_trip() {
        for op in Operator::ALL {
            assert_eq!(Operator::parse(op.as_str()), Some(op));
            assert_eq!(op.as_str().parse::<SelectorOperator>(), Ok(op.into()));
        }
        assert_eq!(Operator::parse("Gte"), None);
        assert_eq!("Gte".parse::<SelectorOperator>(), Ok(SelectorOperator::Gte));
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

    #[test]
    fn same_key_requirements_are_intersected() {
        let r = reqs(&[
            Requirement::in_("zone", ["a", "b", "c"]),
            Requirement::not_in("zone", ["b"]),
            Requirement::in_("zone", ["a", "c", "d"]).with_min_values(2),
        ]);
        assert_eq!(r.set_of("zone"), Some(&ValueSet::in_(["a", "c"])));
        assert_eq!(r.min_values("zone"), Some(2));
    }

    #[test]
    fn compatible_rejects_unknown_custom_labels() {
        let it = reqs(&[Requirement::in_(labels::ARCH, ["amd64"])]);
        let arm = reqs(&[Requirement::in_(labels::ARCH, ["arm64"])]);
        let pod = reqs(&[Requirement::in_("team", ["a"])]);
        assert!(it.compatible(&pod, labels::is_well_known).is_err());
        assert!(it.compatible(&pod, |_| true).is_ok());
        let zone = reqs(&[Requirement::in_(labels::ZONE, ["a"])]);
        assert!(it.compatible(&zone, labels::is_well_known).is_ok());
        let not_gpu = reqs(&[Requirement::does_not_exist("gpu")]);
        assert!(it.compatible(&not_gpu, labels::is_well_known).is_ok());
        let err = it.intersects(&arm).unwrap_err();
        assert_eq!(err.key(), labels::ARCH);
        assert_eq!(
            err.to_string(),
            "requirement kubernetes.io/arch In [arm64] vs [amd64]"
        );
    }

    #[test]
    fn written_back_requirements_mean_the_same() {
        let original = reqs(&[
            Requirement::in_("zone", ["a", "b"]),
            Requirement::not_in("zone", ["b"]),
            Requirement::not_in("gpu", ["t4"]),
            Requirement::gt("cpu", 2),
            Requirement::lt("cpu", 9),
            Requirement::exists("team"),
            Requirement::does_not_exist("spot"),
            Requirement::gte("gen", 3).with_min_values(2),
        ]);
        let again = reqs(&to_requirements(&original));
        assert_eq!(original, again);
    }
}
