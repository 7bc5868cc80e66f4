//! Requirements merged per key, and Karpenter's compatibility rules between two such sets.

use std::collections::BTreeMap;
use std::fmt;

use super::{RequirementError, ValueSet};
use crate::{Operator, Requirement};

/// Requirements merged per key: each key maps to the intersection of every requirement on it, plus
/// the largest `min-values` asked for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    keys: BTreeMap<String, (ValueSet, Option<u32>)>,
}

/// Why two sets of requirements cannot be met by one node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct Incompatibility {
    /// The label key that conflicts.
    pub key: String,
    /// What conflicts, for people.
    pub reason: String,
}

impl Requirements {
    /// No requirements (anything goes).
    pub fn new() -> Self {
        Self::default()
    }

    /// Merges `requirements`; fails on malformed `Gt`/`Lt`.
    pub fn from_slice(requirements: &[Requirement]) -> Result<Self, RequirementError> {
        let mut set = Self::new();
        for r in requirements {
            set.add(r)?;
        }
        Ok(set)
    }

    /// Narrows the set by one more requirement.
    pub fn add(&mut self, requirement: &Requirement) -> Result<(), RequirementError> {
        let values = ValueSet::from_requirement(requirement)?;
        self.add_set(&requirement.key, values, requirement.min_values);
        Ok(())
    }

    /// Narrows the set for `key` by `values`.
    pub fn add_set(&mut self, key: &str, values: ValueSet, min_values: Option<u32>) {
        match self.keys.get_mut(key) {
            Some((existing, existing_min)) => {
                *existing = existing.intersection(&values);
                *existing_min = match (*existing_min, min_values) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
            None => {
                self.keys.insert(key.to_string(), (values, min_values));
            }
        }
    }

    /// Narrows by every requirement of `other`.
    pub fn merge(&mut self, other: &Requirements) {
        for (key, (values, min)) in &other.keys {
            self.add_set(key, values.clone(), *min);
        }
    }

    /// What the set allows for `key`; `None` when it says nothing about it.
    pub fn get(&self, key: &str) -> Option<&ValueSet> {
        self.keys.get(key).map(|(values, _)| values)
    }

    /// The `min-values` asked for `key`.
    pub fn min_values(&self, key: &str) -> Option<u32> {
        self.keys.get(key).and_then(|(_, min)| *min)
    }

    /// Whether the set constrains `key`.
    pub fn has(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// The keys constrained, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Whether the set constrains nothing.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keys pinned to exactly one value (`In [v]`), as labels a node meeting the set must carry.
    pub fn single_values(&self) -> impl Iterator<Item = (&str, &str)> {
        self.keys
            .iter()
            .filter_map(|(k, (v, _))| v.single_value().map(|v| (k.as_str(), v)))
    }

    /// Whether one node can meet both sets, looking only at keys both constrain (Karpenter's
    /// `Intersects`): the allowed values must overlap, unless both sides accept the label being
    /// absent (`NotIn`/`DoesNotExist`).
    pub fn intersects(&self, other: &Requirements) -> Result<(), Incompatibility> {
        for (key, (mine, _)) in &self.keys {
            let Some((theirs, _)) = other.keys.get(key) else {
                continue;
            };
            if mine.intersection(theirs).is_empty()
                && !(mine.allows_absent() && theirs.allows_absent())
            {
                return Err(Incompatibility {
                    key: key.clone(),
                    reason: format!("{} does not intersect {}", describe(theirs), describe(mine)),
                });
            }
        }
        Ok(())
    }

    /// Whether `incoming` (e.g. a pod's or claim's requirements) can be met by what `self` describes
    /// (e.g. an instance type), Karpenter's `Compatible`: keys both constrain must
    /// [intersect](Self::intersects); a key only `incoming` constrains is accepted when
    /// `allow_undefined(key)` says so (typically [`crate::labels::is_well_known`]) or when
    /// `incoming` allows the label to be absent.
    pub fn compatible(
        &self,
        incoming: &Requirements,
        allow_undefined: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatibility> {
        for (key, (theirs, _)) in &incoming.keys {
            if !self.keys.contains_key(key) && !allow_undefined(key) && !theirs.allows_absent() {
                return Err(Incompatibility {
                    key: key.clone(),
                    reason: format!("{} but the label has no known values", describe(theirs)),
                });
            }
        }
        self.intersects(incoming)
    }

    /// Whether a node with these labels meets every key of the set.
    pub fn matches_labels<'a>(&self, mut label: impl FnMut(&str) -> Option<&'a str>) -> bool {
        self.keys.iter().all(|(key, (values, _))| match label(key) {
            Some(value) => values.contains(value),
            None => values.allows_absent(),
        })
    }

    /// The set written back as one requirement per key.
    pub fn to_requirements(&self) -> Vec<Requirement> {
        self.keys
            .iter()
            .flat_map(|(key, (values, min))| to_requirements(key, values, *min))
            .collect()
    }
}

fn to_requirements(key: &str, values: &ValueSet, min_values: Option<u32>) -> Vec<Requirement> {
    let listed = || values.values().map(str::to_string).collect::<Vec<_>>();
    let one = |operator, values| Requirement {
        key: key.to_string(),
        operator,
        values,
        min_values,
    };
    match values.operator() {
        Operator::In => vec![one(Operator::In, listed())],
        Operator::DoesNotExist => vec![one(Operator::DoesNotExist, Vec::new())],
        Operator::Exists => vec![one(Operator::Exists, Vec::new())],
        _ => {
            // Complement sets with bounds: NotIn for the exclusions, plus Gt/Lt for the bounds.
            let mut out = Vec::new();
            if values.values().next().is_some() {
                out.push(one(Operator::NotIn, listed()));
            }
            let (gt, lt) = values.bounds();
            if let Some(gt) = gt {
                out.push(one(Operator::Gt, vec![gt.to_string()]));
            }
            if let Some(lt) = lt {
                out.push(one(Operator::Lt, vec![lt.to_string()]));
            }
            out
        }
    }
}

fn describe(values: &ValueSet) -> String {
    struct D<'a>(&'a ValueSet);
    impl fmt::Display for D<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let op = self.0.operator();
            let listed: Vec<&str> = self.0.values().collect();
            match op {
                Operator::In | Operator::NotIn => write!(f, "{} {:?}", op.as_str(), listed),
                Operator::Gt | Operator::Lt => {
                    let (gt, lt) = self.0.bounds();
                    match (gt, lt) {
                        (Some(g), Some(l)) => write!(f, "Gt {g} and Lt {l}"),
                        (Some(g), None) => write!(f, "Gt {g}"),
                        (None, Some(l)) => write!(f, "Lt {l}"),
                        (None, None) => write!(f, "Exists"),
                    }
                }
                _ => write!(f, "{}", op.as_str()),
            }
        }
    }
    D(values).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels;

    fn reqs(list: &[Requirement]) -> Requirements {
        Requirements::from_slice(list).unwrap()
    }

    #[test]
    fn same_key_requirements_are_intersected() {
        let r = reqs(&[
            Requirement::in_("zone", ["a", "b", "c"]),
            Requirement::not_in("zone", ["b"]),
            Requirement::in_("zone", ["a", "c", "d"]).with_min_values(2),
        ]);
        assert_eq!(r.get("zone"), Some(&ValueSet::of(["a", "c"])));
        assert_eq!(r.min_values("zone"), Some(2));
    }

    #[test]
    fn intersects_checks_shared_keys_only() {
        let it = reqs(&[
            Requirement::in_(labels::INSTANCE_TYPE, ["m-4x"]),
            Requirement::in_(labels::ZONE, ["a", "b"]),
        ]);
        assert!(
            it.intersects(&reqs(&[Requirement::in_(labels::ZONE, ["b"])]))
                .is_ok()
        );
        assert!(
            it.intersects(&reqs(&[Requirement::in_("custom", ["x"])]))
                .is_ok()
        );
        let err = it
            .intersects(&reqs(&[Requirement::in_(labels::ZONE, ["c"])]))
            .unwrap_err();
        assert_eq!(err.key, labels::ZONE);
        assert!(err.to_string().contains("In [\"c\"]"), "{err}");
    }

    #[test]
    fn absent_labels_satisfy_both_notin_and_does_not_exist() {
        let a = reqs(&[Requirement::does_not_exist("gpu")]);
        let b = reqs(&[Requirement::not_in("gpu", ["t4"])]);
        assert!(a.intersects(&b).is_ok());
        assert!(b.intersects(&a).is_ok());
        assert!(a.intersects(&a).is_ok());
        assert!(a.intersects(&reqs(&[Requirement::exists("gpu")])).is_err());
    }

    #[test]
    fn compatible_rejects_unknown_custom_labels() {
        let it = reqs(&[Requirement::in_(labels::ARCH, ["amd64"])]);
        let pod = reqs(&[Requirement::in_("team", ["a"])]);
        assert!(it.compatible(&pod, labels::is_well_known).is_err());
        assert!(it.compatible(&pod, |_| true).is_ok());
        let zone = reqs(&[Requirement::in_(labels::ZONE, ["a"])]);
        assert!(it.compatible(&zone, labels::is_well_known).is_ok());
        let not_gpu = reqs(&[Requirement::does_not_exist("gpu")]);
        assert!(it.compatible(&not_gpu, labels::is_well_known).is_ok());
    }

    #[test]
    fn gt_lt_against_finite_values() {
        let it = reqs(&[Requirement::in_("cpu", ["4"])]);
        assert!(it.intersects(&reqs(&[Requirement::gt("cpu", 2)])).is_ok());
        assert!(it.intersects(&reqs(&[Requirement::gt("cpu", 4)])).is_err());
        assert!(it.intersects(&reqs(&[Requirement::lt("cpu", 8)])).is_ok());
        assert!(it.intersects(&reqs(&[Requirement::lt("cpu", 4)])).is_err());
    }

    #[test]
    fn label_matching_and_single_values() {
        let r = reqs(&[
            Requirement::in_("zone", ["a"]),
            Requirement::not_in("gpu", ["t4"]),
            Requirement::in_("arch", ["amd64", "arm64"]),
        ]);
        let labels = [("zone", "a"), ("arch", "arm64")];
        let get = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        assert!(r.matches_labels(get));
        assert!(!r.matches_labels(|k| if k == "zone" { Some("b") } else { get(k) }));
        assert_eq!(r.single_values().collect::<Vec<_>>(), vec![("zone", "a")]);
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
        ]);
        let again = reqs(&original.to_requirements());
        assert_eq!(original, again);
    }
}
