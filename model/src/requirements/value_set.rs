//! The set of values one label key may take.

use std::fmt;

/// What a node may carry for one label key: a finite set of values (`In`; empty means the label
/// must be absent, `DoesNotExist`) or everything but a finite set (`NotIn`; nothing excluded is
/// `Exists`), the latter optionally bounded by integer limits (`Gt`/`Lt`: the value must then parse
/// as an integer strictly inside the bounds).
///
/// Invariants: `values` is sorted and deduplicated; a finite set carries no bounds (intersection
/// applies them to its values and drops them, as Karpenter does).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueSet {
    complement: bool,
    values: Vec<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
}

/// The Kubernetes operator a [`ValueSet`] reads as. `Gt`/`Lt` bounds read as `Exists` (or `NotIn`)
/// with bounds, like Karpenter's `Requirement.Operator()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl SetOperator {
    /// `NotIn` and `DoesNotExist` allow a node without the label.
    #[inline]
    pub fn allows_absent(self) -> bool {
        matches!(self, SetOperator::NotIn | SetOperator::DoesNotExist)
    }

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SetOperator::In => "In",
            SetOperator::NotIn => "NotIn",
            SetOperator::Exists => "Exists",
            SetOperator::DoesNotExist => "DoesNotExist",
        }
    }
}

#[inline]
fn sorted(values: impl IntoIterator<Item = impl Into<String>>) -> Vec<String> {
    let mut v: Vec<String> = values.into_iter().map(Into::into).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether `value` parses as an integer strictly between the bounds (always true unbounded).
#[inline]
fn within(value: &str, greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    if greater_than.is_none() && less_than.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    greater_than.is_none_or(|gt| n > gt) && less_than.is_none_or(|lt| n < lt)
}

/// Whether no integer lies strictly between the bounds.
#[inline]
fn empty_range(greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    match (greater_than, less_than) {
        (Some(gt), Some(lt)) => i128::from(lt) - i128::from(gt) <= 1,
        _ => false,
    }
}

impl ValueSet {
    /// Any value; the label must exist (`Exists`).
    #[inline]
    pub fn any() -> Self {
        Self {
            complement: true,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
        }
    }

    /// No value: the label must be absent (`DoesNotExist`).
    #[inline]
    pub fn none() -> Self {
        Self {
            complement: false,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
        }
    }

    /// Exactly these values (`In`).
    #[inline]
    pub fn in_(values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            values: sorted(values),
            ..Self::none()
        }
    }

    /// One value (`In [value]`).
    #[inline]
    pub fn single(value: impl Into<String>) -> Self {
        Self {
            values: vec![value.into()],
            ..Self::none()
        }
    }

    /// Anything but these values, or no label at all (`NotIn`).
    #[inline]
    pub fn not_in(values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            values: sorted(values),
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

    /// Whether this is an "everything but" set.
    #[inline]
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The listed values: the members of a finite set, the exclusions of a complement.
    #[inline]
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// The `Gt` bound.
    #[inline]
    pub fn greater_than_bound(&self) -> Option<i64> {
        self.greater_than
    }

    /// The `Lt` bound.
    #[inline]
    pub fn less_than_bound(&self) -> Option<i64> {
        self.less_than
    }

    /// Both bounds: (`Gt`, `Lt`).
    #[inline]
    pub fn bounds(&self) -> (Option<i64>, Option<i64>) {
        (self.greater_than, self.less_than)
    }

    /// Whether a node without the label satisfies the set (`NotIn`, `DoesNotExist`).
    #[inline]
    pub fn allows_absent(&self) -> bool {
        self.operator().allows_absent()
    }

    /// The operator this set reads as.
    #[inline]
    pub fn operator(&self) -> SetOperator {
        match (self.complement, self.values.is_empty()) {
            (true, true) => SetOperator::Exists,
            (true, false) => SetOperator::NotIn,
            (false, false) => SetOperator::In,
            (false, true) => SetOperator::DoesNotExist,
        }
    }

    /// How many values the set holds; `None` when unbounded (complements are infinite: with
    /// integer bounds, `"02"` and `"2"` are different label values of the same integer).
    #[inline]
    pub fn len(&self) -> Option<usize> {
        if self.complement {
            if empty_range(self.greater_than, self.less_than) {
                Some(0)
            } else {
                None
            }
        } else {
            Some(self.values.len())
        }
    }

    /// Whether no label value satisfies the set (a node may still satisfy it by lacking the label,
    /// see [`SetOperator::allows_absent`]).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Whether a node labelled `value` satisfies the set.
    #[inline]
    pub fn contains(&self, value: &str) -> bool {
        if self.complement {
            self.values
                .binary_search_by(|v| v.as_str().cmp(value))
                .is_err()
                && within(value, self.greater_than, self.less_than)
        } else {
            self.values
                .binary_search_by(|v| v.as_str().cmp(value))
                .is_ok()
        }
    }

    /// The values both sets allow.
    #[inline]
    pub fn intersection(&self, other: &ValueSet) -> ValueSet {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        if empty_range(greater_than, less_than) {
            return ValueSet::none();
        }
        match (self.complement, other.complement) {
            (true, true) => {
                let mut values = self.values.clone();
                values.extend(other.values.iter().cloned());
                values.sort_unstable();
                values.dedup();
                ValueSet {
                    complement: true,
                    values,
                    greater_than,
                    less_than,
                }
            }
            (true, false) => {
                other.filtered(|v| self.contains(v) && within(v, greater_than, less_than))
            }
            (false, true) => {
                self.filtered(|v| other.contains(v) && within(v, greater_than, less_than))
            }
            (false, false) => {
                self.filtered(|v| other.contains(v) && within(v, greater_than, less_than))
            }
        }
    }

    #[inline]
    fn filtered(&self, keep: impl Fn(&str) -> bool) -> ValueSet {
        ValueSet {
            complement: false,
            values: self.values.iter().filter(|v| keep(v)).cloned().collect(),
            greater_than: None,
            less_than: None,
        }
    }

    /// Whether [`ValueSet::intersection`] would be non-empty, without building it.
    #[inline]
    pub fn overlaps(&self, other: &ValueSet) -> bool {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        if empty_range(greater_than, less_than) {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| self.contains(v) && within(v, greater_than, less_than)),
            (false, _) => self
                .values
                .iter()
                .any(|v| other.contains(v) && within(v, greater_than, less_than)),
        }
    }

    /// Karpenter's per-key compatibility: the sets overlap, or both allow the label to be absent
    /// (`NotIn`/`DoesNotExist` on both sides).
    #[inline]
    pub fn compatible_with(&self, other: &ValueSet) -> bool {
        self.overlaps(other)
            || (self.operator().allows_absent() && other.operator().allows_absent())
    }

    /// Whether the set is exactly one value, and which.
    #[inline]
    pub fn single_value(&self) -> Option<&str> {
        match (self.complement, self.values.as_slice()) {
            (false, [only]) => Some(only),
            _ => None,
        }
    }

    /// Whether the set is `Exists` without bounds (allows every value).
    #[inline]
    pub fn is_any(&self) -> bool {
        self.complement
            && self.values.is_empty()
            && self.greater_than.is_none()
            && self.less_than.is_none()
    }
}

#[inline]
fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[inline]
fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Writes up to five values then "and N others".
pub(crate) fn write_values(f: &mut fmt::Formatter<'_>, values: &[String]) -> fmt::Result {
    f.write_str("[")?;
    for (i, v) in values.iter().take(5).enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        f.write_str(v)?;
    }
    if values.len() > 5 {
        write!(f, " and {} others", values.len() - 5)?;
    }
    f.write_str("]")
}

impl fmt::Display for ValueSet {
    /// `In [a, b]`, `NotIn [c]`, `Exists >3 <9`, `DoesNotExist`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.operator();
        f.write_str(op.as_str())?;
        if matches!(op, SetOperator::In | SetOperator::NotIn) {
            f.write_str(" ")?;
            write_values(f, &self.values)?;
        }
        if let Some(gt) = self.greater_than {
            write!(f, " >{gt}")?;
        }
        if let Some(lt) = self.less_than {
            write!(f, " <{lt}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators() {
        assert_eq!(ValueSet::any().operator(), SetOperator::Exists);
        assert_eq!(ValueSet::none().operator(), SetOperator::DoesNotExist);
        assert_eq!(ValueSet::in_(["a"]).operator(), SetOperator::In);
        assert_eq!(ValueSet::not_in(["a"]).operator(), SetOperator::NotIn);
        assert_eq!(ValueSet::greater_than(3).operator(), SetOperator::Exists);
    }

    #[test]
    fn intersections() {
        let ab = ValueSet::in_(["a", "b"]);
        let bc = ValueSet::in_(["b", "c"]);
        assert_eq!(ab.intersection(&bc), ValueSet::in_(["b"]));
        assert_eq!(
            ab.intersection(&ValueSet::not_in(["a"])),
            ValueSet::in_(["b"])
        );
        assert_eq!(
            ValueSet::not_in(["a"]).intersection(&ValueSet::not_in(["b"])),
            ValueSet::not_in(["a", "b"])
        );
        assert_eq!(ab.intersection(&ValueSet::none()), ValueSet::none());
        assert_eq!(ab.intersection(&ValueSet::any()), ab);
    }

    #[test]
    fn bounds() {
        let gt = ValueSet::greater_than(3);
        let lt = ValueSet::less_than(8);
        let both = gt.intersection(&lt);
        assert!(both.contains("4") && both.contains("7"));
        assert!(!both.contains("3") && !both.contains("8") && !both.contains("x"));
        assert_eq!(
            both.intersection(&ValueSet::in_(["2", "5", "9", "z"])),
            ValueSet::in_(["5"])
        );
        assert!(
            ValueSet::greater_than(3)
                .intersection(&ValueSet::less_than(4))
                .is_empty()
        );
        assert!(
            !ValueSet::greater_than(3)
                .intersection(&ValueSet::less_than(5))
                .is_empty()
        );
        assert!(!ValueSet::greater_than(3).overlaps(&ValueSet::less_than(4)));
        assert_eq!(both.to_string(), "Exists >3 <8");
    }

    #[test]
    fn compatibility_allows_mutual_absence() {
        assert!(ValueSet::none().compatible_with(&ValueSet::not_in(["a"])));
        assert!(ValueSet::none().compatible_with(&ValueSet::none()));
        assert!(!ValueSet::none().compatible_with(&ValueSet::any()));
        assert!(!ValueSet::in_(["a"]).compatible_with(&ValueSet::in_(["b"])));
        assert!(!ValueSet::in_(["a"]).compatible_with(&ValueSet::not_in(["a"])));
    }

    #[test]
    fn display_truncates() {
        let many = ValueSet::in_(["a", "b", "c", "d", "e", "f", "g"]);
        assert_eq!(many.to_string(), "In [a, b, c, d, e and 2 others]");
    }
}
