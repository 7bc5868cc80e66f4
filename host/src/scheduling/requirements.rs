//! The requirements algebra: what label values a node may carry, per key, and whether two sets of
//! requirements can be met by one node. Karpenter's `scheduling.Requirements`, in Rust.
//!
//! - A [`Requirement`] is one key's [`ValueSet`] plus an optional `minValues` (how many distinct
//!   values of the key the instance types a claim may launch must still span).
//! - [`Requirements`] holds at most one requirement per key; adding a requirement for a key that
//!   is already present intersects the two (`In [a,b]` + `NotIn [a]` = `In [b]`).
//! - [`Requirements::intersects`] is Karpenter's `Intersects`: every key both sides constrain must
//!   overlap, unless both sides let the label be absent. Keys only one side mentions are fine.
//! - [`Requirements::compatible`] is Karpenter's `Compatible`: additionally, a key the incoming side
//!   requires (`In`, `Exists`, `Gt`, `Lt`) must be known to this side, unless the caller allows it
//!   to be undefined (well-known labels such as zone or instance type, which every node has).

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

    /// Parses the Kubernetes spelling.
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

/// One key's constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    set: ValueSet,
    min_values: Option<u32>,
}

impl Requirement {
    /// `key` restricted to `set`.
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
                let bound = match values.as_slice() {
                    [one] => one.parse::<i64>().ok(),
                    _ => None,
                };
                let Some(n) = bound else {
                    return Err(RequirementsError::NotOneInteger {
                        key,
                        operator: operator.as_str(),
                        values,
                    });
                };
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

    /// Sets `minValues`.
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn set(&self) -> &ValueSet {
        &self.set
    }

    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// Intersects `other` (same key) into `self`; `minValues` becomes the larger of the two.
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

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.reqs[i].narrow(&requirement),
            Err(i) => self.reqs.insert(i, requirement),
        }
    }

    /// Adds a borrowed requirement (clones only when the key is new).
    pub fn add_ref(&mut self, requirement: &Requirement) {
        match self.position(&requirement.key) {
            Ok(i) => self.reqs[i].narrow(requirement),
            Err(i) => self.reqs.insert(i, requirement.clone()),
        }
    }

    /// Adds every requirement of `other`.
    pub fn merge(&mut self, other: &Requirements) {
        for r in &other.reqs {
            self.add_ref(r);
        }
    }

    /// Builder form of [`Requirements::add`].
    pub fn with(mut self, requirement: Requirement) -> Self {
        self.add(requirement);
        self
    }

    /// Replaces the requirement on `key` with `set` (keeping `minValues`).
    pub fn set(&mut self, key: &str, set: ValueSet) {
        match self.position(key) {
            Ok(i) => self.reqs[i].set = set,
            Err(i) => self.reqs.insert(i, Requirement::with_set(key, set)),
        }
    }

    /// Removes the requirement on `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.position(key).ok().map(|i| self.reqs.remove(i))
    }

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

    pub fn has(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Requirement> {
        self.reqs.iter()
    }

    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether any requirement carries `minValues`.
    pub fn has_min_values(&self) -> bool {
        self.reqs.iter().any(|r| r.min_values.is_some())
    }

    /// Karpenter's `Intersects`: every key both sides constrain must overlap, unless both allow
    /// the label to be absent. Returns the first conflict (in key order).
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

#[cfg(test)]
mod tests;
