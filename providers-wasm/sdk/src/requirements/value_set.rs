//! The set of label values one key may take, as Karpenter's scheduler models it.

use std::collections::BTreeSet;

use super::RequirementError;
use crate::{Operator, Requirement};

/// The values a label key may take: either a finite set (`In`; empty means the label must be
/// absent, `DoesNotExist`) or everything except a finite set (`NotIn`; nothing excluded means
/// `Exists`), optionally bounded by integer `Gt`/`Lt` limits.
///
/// Intersecting the sets of all requirements on one key gives what a node may carry for that key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueSet {
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
}

impl ValueSet {
    /// Any value (`Exists`).
    pub fn any() -> Self {
        Self {
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
        }
    }

    /// No value: the label must be absent (`DoesNotExist`).
    pub fn none() -> Self {
        Self {
            complement: false,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
        }
    }

    /// Exactly these values (`In`).
    pub fn of<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Self {
            values: values.into_iter().map(Into::into).collect(),
            ..Self::none()
        }
    }

    /// Anything but these values (`NotIn`).
    pub fn all_but<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Self {
            values: values.into_iter().map(Into::into).collect(),
            ..Self::any()
        }
    }

    /// Integers greater than `n` (`Gt`).
    pub fn greater_than(n: i64) -> Self {
        Self {
            greater_than: Some(n),
            ..Self::any()
        }
    }

    /// Integers less than `n` (`Lt`).
    pub fn less_than(n: i64) -> Self {
        Self {
            less_than: Some(n),
            ..Self::any()
        }
    }

    /// The set one requirement allows.
    pub fn from_requirement(r: &Requirement) -> Result<Self, RequirementError> {
        Ok(match r.operator {
            Operator::In => Self::of(r.values.iter().cloned()),
            Operator::NotIn => Self::all_but(r.values.iter().cloned()),
            Operator::Exists => Self::any(),
            Operator::DoesNotExist => Self::none(),
            Operator::Gt | Operator::Lt => {
                let [value] = r.values.as_slice() else {
                    return Err(RequirementError::Arity {
                        key: r.key.clone(),
                        operator: r.operator.as_str(),
                        count: r.values.len(),
                    });
                };
                let n = value
                    .parse::<i64>()
                    .map_err(|_| RequirementError::NotInteger {
                        key: r.key.clone(),
                        operator: r.operator.as_str(),
                        value: value.clone(),
                    })?;
                if r.operator == Operator::Gt {
                    Self::greater_than(n)
                } else {
                    Self::less_than(n)
                }
            }
        })
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|gt| n > gt) && self.less_than.is_none_or(|lt| n < lt)
    }

    /// Whether the label may have this value.
    pub fn contains(&self, value: &str) -> bool {
        (self.complement != self.values.contains(value)) && self.within_bounds(value)
    }

    /// Whether the set allows the label to be absent (`NotIn` or `DoesNotExist` semantics).
    pub fn allows_absent(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// The values both sets allow.
    pub fn intersection(&self, other: &Self) -> Self {
        let greater_than = match (self.greater_than, other.greater_than) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let less_than = match (self.less_than, other.less_than) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(gt), Some(lt)) = (greater_than, less_than)
            && gt >= lt
        {
            return Self::none();
        }
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values).cloned().collect()),
            (true, false) => (
                false,
                other.values.difference(&self.values).cloned().collect(),
            ),
            (false, true) => (
                false,
                self.values.difference(&other.values).cloned().collect(),
            ),
            (false, false) => (
                false,
                self.values.intersection(&other.values).cloned().collect(),
            ),
        };
        let mut result = Self {
            complement,
            values,
            greater_than,
            less_than,
        };
        if !result.complement {
            // A finite set takes the bounds in by dropping the values outside them.
            let kept: BTreeSet<String> = result
                .values
                .iter()
                .filter(|v| result.within_bounds(v))
                .cloned()
                .collect();
            result.values = kept;
            result.greater_than = None;
            result.less_than = None;
        }
        result
    }

    /// Whether no value is allowed (the label must be absent).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// How many values are allowed; `None` when unbounded (a complement set).
    pub fn len(&self) -> Option<usize> {
        (!self.complement).then_some(self.values.len())
    }

    /// Whether this is a complement (`NotIn`/`Exists`/`Gt`/`Lt`) set.
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The finite values of an `In` set, or the excluded values of a complement set.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// The integer bounds: (`Gt`, `Lt`).
    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        (self.greater_than, self.less_than)
    }

    /// The only value allowed, if exactly one is.
    pub fn single_value(&self) -> Option<&str> {
        match (self.complement, self.values.len()) {
            (false, 1) => self.values.first().map(String::as_str),
            _ => None,
        }
    }

    /// The operator that best describes the set.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (false, true) => Operator::DoesNotExist,
            (false, false) => Operator::In,
            (true, true) if self.greater_than.is_some() => Operator::Gt,
            (true, true) if self.less_than.is_some() => Operator::Lt,
            (true, true) => Operator::Exists,
            (true, false) => Operator::NotIn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership() {
        assert!(ValueSet::of(["a"]).contains("a"));
        assert!(!ValueSet::of(["a"]).contains("b"));
        assert!(ValueSet::all_but(["a"]).contains("b"));
        assert!(!ValueSet::all_but(["a"]).contains("a"));
        assert!(ValueSet::any().contains("x"));
        assert!(!ValueSet::none().contains("x"));
        assert!(ValueSet::greater_than(3).contains("4"));
        assert!(!ValueSet::greater_than(3).contains("3"));
        assert!(!ValueSet::greater_than(3).contains("four"));
        assert!(ValueSet::less_than(3).contains("-7"));
    }

    #[test]
    fn intersections() {
        let ab = ValueSet::of(["a", "b"]);
        assert_eq!(
            ab.intersection(&ValueSet::of(["b", "c"])),
            ValueSet::of(["b"])
        );
        assert_eq!(
            ab.intersection(&ValueSet::all_but(["a"])),
            ValueSet::of(["b"])
        );
        assert_eq!(
            ValueSet::all_but(["a"]).intersection(&ab),
            ValueSet::of(["b"])
        );
        assert_eq!(
            ValueSet::all_but(["a"]).intersection(&ValueSet::all_but(["b"])),
            ValueSet::all_but(["a", "b"])
        );
        assert_eq!(ab.intersection(&ValueSet::any()), ab);
        assert!(ab.intersection(&ValueSet::none()).is_empty());
        assert!(ab.intersection(&ValueSet::of(["c"])).is_empty());
    }

    #[test]
    fn bounds_filter_finite_sets_and_collapse_when_crossed() {
        let sizes = ValueSet::of(["1", "2", "4", "8", "x"]);
        let big = sizes.intersection(&ValueSet::greater_than(2));
        assert_eq!(big.values().collect::<Vec<_>>(), vec!["4", "8"]);
        let mid = big.intersection(&ValueSet::less_than(8));
        assert_eq!(mid.single_value(), Some("4"));
        assert!(
            ValueSet::greater_than(5)
                .intersection(&ValueSet::less_than(5))
                .is_empty()
        );
        let open = ValueSet::greater_than(1).intersection(&ValueSet::less_than(10));
        assert!(open.contains("5") && !open.contains("10") && open.len().is_none());
    }

    #[test]
    fn operators_describe_the_set() {
        assert_eq!(ValueSet::of(["a"]).operator(), Operator::In);
        assert_eq!(ValueSet::none().operator(), Operator::DoesNotExist);
        assert_eq!(ValueSet::any().operator(), Operator::Exists);
        assert_eq!(ValueSet::all_but(["a"]).operator(), Operator::NotIn);
        assert_eq!(ValueSet::greater_than(1).operator(), Operator::Gt);
        assert_eq!(ValueSet::less_than(1).operator(), Operator::Lt);
        assert!(ValueSet::none().allows_absent());
        assert!(ValueSet::all_but(["a"]).allows_absent());
        assert!(!ValueSet::any().allows_absent());
    }

    #[test]
    fn from_requirement_validates_gt_lt() {
        let bad = Requirement::in_("k", ["1", "2"]);
        let bad = Requirement {
            operator: Operator::Gt,
            ..bad
        };
        assert!(matches!(
            ValueSet::from_requirement(&bad),
            Err(RequirementError::Arity { count: 2, .. })
        ));
        let nan = Requirement {
            operator: Operator::Lt,
            ..Requirement::in_("k", ["x"])
        };
        assert!(matches!(
            ValueSet::from_requirement(&nan),
            Err(RequirementError::NotInteger { .. })
        ));
        assert_eq!(
            ValueSet::from_requirement(&Requirement::gt("k", 2)),
            Ok(ValueSet::greater_than(2))
        );
    }
}
