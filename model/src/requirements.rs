//! The requirements algebra: what label values a node may carry, per key, and whether two sets of
//! requirements can be met by one node. Karpenter's `scheduling.Requirements`, in Rust.
//!
//! - An [`Operator`] is a node-selector operator: Kubernetes' six and Karpenter v1's inclusive
//!   `Gte`/`Lte` (which become `Gt`/`Lt` bounds one further out).
//! - A [`Requirement`] is one key's [`ValueSet`] plus an optional `minValues` (how many distinct
//!   values of the key the instance types a claim may launch must still span).
//! - [`Requirements`] holds at most one requirement per key; adding a requirement for a key that
//!   is already present intersects the two (`In [a,b]` + `NotIn [a]` = `In [b]`).
//! - [`Requirements::intersects`] is Karpenter's `Intersects`: every key both sides constrain must
//!   overlap, unless both sides let the label be absent. Keys only one side mentions are fine.
//! - [`Requirements::compatible`] is Karpenter's `Compatible`: additionally, a key the incoming side
//!   requires (`In`, `Exists`, `Gt`, `Lt`) must be known to this side, unless the caller allows it
//!   to be undefined (well-known labels such as zone or instance type, which every node has).
//! - [`Selector`] is a requirement as Kubernetes writes it (key, operator name or value, values,
//!   `minValues`); [`Requirements::from_selectors`] merges a list of them and
//!   [`selector_matches`] checks one against a label without building a set.

mod value_set;

use std::fmt;

pub use value_set::{SetOperator, ValueSet};

/// A requirement that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementsError {
    /// `Gt`/`Lt`/`Gte`/`Lte` need exactly one integer value.
    #[error(
        "requirement {key}: operator {operator} needs exactly one integer value, got {values:?}"
    )]
    NotOneInteger {
        key: String,
        operator: &'static str,
        values: Vec<String>,
    },
    /// An operator name Kubernetes does not have.
    #[error("requirement {key}: unknown operator {operator:?}")]
    UnknownOperator { key: String, operator: String },
}

/// A node-selector operator. `Gte`/`Lte` are Karpenter v1's inclusive bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl Operator {
    /// The Kubernetes spelling.
    #[inline]
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Every operator, Kubernetes' six then Karpenter's two.
    pub const ALL: [Operator; 8] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ];

    /// Parses the Kubernetes spelling (`key` only names the requirement in the error).
    pub fn parse(key: &str, text: &str) -> Result<Self, RequirementsError> {
        Ok(match text {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            other => {
                return Err(RequirementsError::UnknownOperator {
                    key: key.to_owned(),
                    operator: other.to_owned(),
                });
            }
        })
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Operator {
    type Err = RequirementsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Operator::parse("", s)
    }
}

/// A requirement as Kubernetes writes it (`NodeSelectorRequirementWithMinValues`): a key, an
/// operator, values and `minValues`. Implemented by each side's wire types (the WIT `requirement`
/// in the guest SDK) so they merge into [`Requirements`] through one code path.
pub trait Selector {
    /// The label key.
    fn key(&self) -> &str;
    /// The operator.
    fn operator(&self) -> Operator;
    /// The values, as written.
    fn values(&self) -> &[String];
    /// `minValues`, if any.
    fn min_values(&self) -> Option<u32>;
}

/// Whether a node whose label `key` is `label` (`None`: absent) meets one requirement
/// `key <operator> values`, with Kubernetes' node-selector semantics, without building a set.
/// `Gt`/`Lt`/`Gte`/`Lte` need a label and exactly one bound, both integers; otherwise they match
/// nothing.
pub fn selector_matches<S: AsRef<str>>(
    operator: Operator,
    values: &[S],
    label: Option<&str>,
) -> bool {
    let listed = |v: &str| values.iter().any(|x| x.as_ref() == v);
    match operator {
        Operator::In => label.is_some_and(listed),
        Operator::NotIn => label.is_none_or(|v| !listed(v)),
        Operator::Exists => label.is_some(),
        Operator::DoesNotExist => label.is_none(),
        Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
            let (Some(label), [bound]) = (label, values) else {
                return false;
            };
            let (Ok(v), Ok(b)) = (label.parse::<i64>(), bound.as_ref().parse::<i64>()) else {
                return false;
            };
            match operator {
                Operator::Gt => v > b,
                Operator::Lt => v < b,
                Operator::Gte => v >= b,
                _ => v <= b,
            }
        }
    }
}

/// The one integer a `Gt`/`Lt`/`Gte`/`Lte` requirement on `key` needs.
pub fn integer_bound(
    key: &str,
    operator: Operator,
    values: &[String],
) -> Result<i64, RequirementsError> {
    match values {
        [one] => one.parse::<i64>().ok(),
        _ => None,
    }
    .ok_or_else(|| RequirementsError::NotOneInteger {
        key: key.to_owned(),
        operator: operator.as_str(),
        values: values.to_vec(),
    })
}

/// One key's constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    set: ValueSet,
    min_values: Option<u32>,
}

impl Requirement {
    /// `key` restricted to `set`.
    #[inline]
    pub fn with_set(key: impl Into<String>, set: ValueSet) -> Self {
        Self {
            key: key.into(),
            set,
            min_values: None,
        }
    }

    /// Builds a requirement from a Kubernetes operator and values.
    pub fn new<I, S>(
        key: impl Into<String>,
        operator: Operator,
        values: I,
    ) -> Result<Self, RequirementsError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let key = key.into();
        let set = match operator {
            Operator::In => ValueSet::in_(values),
            Operator::NotIn => ValueSet::not_in(values),
            Operator::Exists => ValueSet::any(),
            Operator::DoesNotExist => ValueSet::none(),
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let values: Vec<String> = values.into_iter().map(Into::into).collect();
                let n = integer_bound(&key, operator, &values)?;
                match operator {
                    Operator::Gt => ValueSet::greater_than(n),
                    Operator::Gte => ValueSet::greater_than(n.saturating_sub(1)),
                    Operator::Lt => ValueSet::less_than(n),
                    _ => ValueSet::less_than(n.saturating_add(1)),
                }
            }
        };
        Ok(Self::with_set(key, set))
    }

    /// Builds a requirement from its Kubernetes form.
    pub fn from_selector(selector: &impl Selector) -> Result<Self, RequirementsError> {
        let values = selector.values().iter().map(String::as_str);
        Ok(Self::new(selector.key(), selector.operator(), values)?
            .with_min_values(selector.min_values()))
    }

    /// `key In [values]`.
    pub fn in_(
        key: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::with_set(key, ValueSet::in_(values))
    }

    /// `key NotIn [values]`.
    pub fn not_in(
        key: impl Into<String>,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::with_set(key, ValueSet::not_in(values))
    }

    /// `key Exists`.
    pub fn exists(key: impl Into<String>) -> Self {
        Self::with_set(key, ValueSet::any())
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: impl Into<String>) -> Self {
        Self::with_set(key, ValueSet::none())
    }

    /// `key Gt n`.
    pub fn gt(key: impl Into<String>, n: i64) -> Self {
        Self::with_set(key, ValueSet::greater_than(n))
    }

    /// `key Lt n`.
    pub fn lt(key: impl Into<String>, n: i64) -> Self {
        Self::with_set(key, ValueSet::less_than(n))
    }

    /// `key Gte n` (Karpenter v1): integers of at least `n`, i.e. `Gt n-1`.
    pub fn gte(key: impl Into<String>, n: i64) -> Self {
        Self::with_set(key, ValueSet::greater_than(n.saturating_sub(1)))
    }

    /// `key Lte n` (Karpenter v1): integers of at most `n`, i.e. `Lt n+1`.
    pub fn lte(key: impl Into<String>, n: i64) -> Self {
        Self::with_set(key, ValueSet::less_than(n.saturating_add(1)))
    }

    /// Sets `minValues`.
    #[inline]
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    #[inline]
    pub fn key(&self) -> &str {
        &self.key
    }

    #[inline]
    pub fn set(&self) -> &ValueSet {
        &self.set
    }

    #[inline]
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Intersects `other` (same key) into `self`; `minValues` becomes the larger of the two.
    #[inline]
    fn narrow(&mut self, other: &Requirement) {
        self.set = self.set.intersection(&other.set);
        self.min_values = self.min_values.max(other.min_values);
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.set)?;
        if let Some(n) = self.min_values {
            write!(f, " (minValues {n})")?;
        }
        Ok(())
    }
}

/// Requirements keyed by label, at most one per key, sorted by key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    reqs: Vec<Requirement>,
}

/// Why two sets of requirements cannot be met by one node. Borrows from the inputs so that
/// checking costs no allocation; [`fmt::Display`] renders it for events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incompatibility<'a> {
    /// The incoming side requires a label this side does not define.
    UndefinedLabel {
        key: &'a str,
        incoming: &'a ValueSet,
    },
    /// Both sides constrain `key` and no value satisfies both.
    Disjoint {
        key: &'a str,
        existing: &'a ValueSet,
        incoming: &'a ValueSet,
    },
}

impl Incompatibility<'_> {
    /// The key the conflict is on.
    pub fn key(&self) -> &str {
        match self {
            Incompatibility::UndefinedLabel { key, .. } | Incompatibility::Disjoint { key, .. } => {
                key
            }
        }
    }
}

impl std::error::Error for Incompatibility<'_> {}

impl fmt::Display for Incompatibility<'_> {
    /// `requirement kubernetes.io/arch In [arm64] vs [amd64]`,
    /// `label example.com/team does not have known values (requirement In [a])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatibility::UndefinedLabel { key, incoming } => {
                write!(
                    f,
                    "label {key} does not have known values (requirement {incoming})"
                )
            }
            Incompatibility::Disjoint {
                key,
                existing,
                incoming,
            } => {
                write!(f, "requirement {key} {incoming} vs ")?;
                if existing.operator() == SetOperator::In
                    && existing.greater_than_bound().is_none()
                    && existing.less_than_bound().is_none()
                {
                    value_set::write_values(f, existing.values())
                } else {
                    write!(f, "{existing}")
                }
            }
        }
    }
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    /// `key In [value]` for every label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut out = Self::new();
        for (k, v) in labels {
            out.add(Requirement::with_set(k, ValueSet::single(v)));
        }
        out
    }

    /// Merges requirements in their Kubernetes form; fails on a malformed `Gt`/`Lt`/`Gte`/`Lte`.
    pub fn from_slice<S: Selector>(selectors: &[S]) -> Result<Self, RequirementsError> {
        let mut out = Self::new();
        for s in selectors {
            out.add(Requirement::from_selector(s)?);
        }
        Ok(out)
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    #[inline]
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.reqs[i].narrow(&requirement),
            Err(i) => self.reqs.insert(i, requirement),
        }
    }

    /// Adds a borrowed requirement (clones only when the key is new).
    #[inline]
    pub fn add_ref(&mut self, requirement: &Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.reqs[i].narrow(requirement),
            Err(i) => self.reqs.insert(i, requirement.clone()),
        }
    }

    /// Adds every requirement of `other`.
    #[inline]
    pub fn merge(&mut self, other: &Requirements) {
        for r in &other.reqs {
            self.add_ref(r);
        }
    }

    /// Builder form of [`Requirements::add`].
    #[inline]
    pub fn with(mut self, requirement: Requirement) -> Self {
        self.add(requirement);
        self
    }

    /// Replaces the requirement on `key` with `set` (keeping `minValues`).
    #[inline]
    pub fn set(&mut self, key: &str, set: ValueSet) {
        match self.position(key) {
            Ok(i) => self.reqs[i].set = set,
            Err(i) => self.reqs.insert(i, Requirement::with_set(key, set)),
        }
    }

    /// Removes the requirement on `key`.
    #[inline]
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.position(key).ok().map(|i| self.reqs.remove(i))
    }

    #[inline]
    fn position(&self, key: &str) -> Result<usize, usize> {
        self.reqs.binary_search_by(|r| r.key.as_str().cmp(key))
    }

    /// The requirement on `key`, if any.
    #[inline]
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.position(key).ok().map(|i| &self.reqs[i])
    }

    /// The set for `key`; `None` when unconstrained (which reads as `Exists`).
    #[inline]
    pub fn set_of(&self, key: &str) -> Option<&ValueSet> {
        self.get(key).map(|r| &r.set)
    }

    #[inline]
    pub fn has(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    #[inline]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Requirement> {
        self.reqs.iter()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The `minValues` asked for `key`.
    #[inline]
    pub fn min_values(&self, key: &str) -> Option<u32> {
        self.get(key).and_then(Requirement::min_values)
    }

    /// The constrained keys, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.reqs.iter().map(|r| r.key.as_str())
    }

    /// Keys pinned to exactly one value (`In [v]`): labels every node meeting the set carries.
    pub fn single_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.reqs
            .iter()
            .filter_map(|r| r.set.single_value().map(|v| (r.key.as_str(), v)))
    }

    /// Whether any requirement carries `minValues`.
    #[inline]
    pub fn has_min_values(&self) -> bool {
        self.reqs.iter().any(|r| r.min_values.is_some())
    }

    /// Karpenter's `Intersects`: every key both sides constrain must overlap, unless both allow
    /// the label to be absent. Returns the first conflict (in key order).
    // Not `#[inline]`: the solver calls it inside small filter closures that must stay small.
    pub fn intersects<'a>(&'a self, incoming: &'a Requirements) -> Result<(), Incompatibility<'a>> {
        // Both sides are sorted: walk them together.
        let (mut i, mut j) = (0, 0);
        while i < self.reqs.len() && j < incoming.reqs.len() {
            let (a, b) = (&self.reqs[i], &incoming.reqs[j]);
            match a.key.cmp(&b.key) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if !a.set.compatible_with(&b.set) {
                        return Err(Incompatibility::Disjoint {
                            key: &a.key,
                            existing: &a.set,
                            incoming: &b.set,
                        });
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible`: [`Requirements::intersects`], and every key `incoming` requires
    /// to exist must be defined here unless `allow_undefined(key)`.
    pub fn compatible<'a>(
        &'a self,
        incoming: &'a Requirements,
        allow_undefined: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatibility<'a>> {
        for r in &incoming.reqs {
            if !r.set.operator().allows_absent() && !self.has(&r.key) && !allow_undefined(&r.key) {
                return Err(Incompatibility::UndefinedLabel {
                    key: &r.key,
                    incoming: &r.set,
                });
            }
        }
        self.intersects(incoming)
    }

    /// Whether a node with exactly these `labels` satisfies every requirement (Kubernetes
    /// node-selector semantics).
    pub fn matches_labels<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match label(&r.key) {
            Some(v) => r.set.contains(v),
            None => r.set.operator().allows_absent(),
        })
    }
}

impl fmt::Display for Requirements {
    /// `a In [x], b Exists`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut out = Requirements::new();
        for r in iter {
            out.add(r);
        }
        out
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests;
