use super::*;
use proptest::prelude::*;

const VALUES: [&str; 9] = ["a", "b", "c", "1", "2", "5", "9", "10", "x"];

fn subset() -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(VALUES.to_vec(), 0..=VALUES.len())
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

fn leaf() -> impl Strategy<Value = ValueSet> {
    prop_oneof![
        subset().prop_map(ValueSet::in_),
        subset().prop_map(ValueSet::not_in),
        Just(ValueSet::any()),
        Just(ValueSet::none()),
        (-2i64..12).prop_map(ValueSet::greater_than),
        (-2i64..12).prop_map(ValueSet::less_than),
    ]
}

/// Leaves and intersections of two leaves (bounded complements, filtered finite sets, ...).
fn value_set() -> impl Strategy<Value = ValueSet> {
    prop_oneof![
        leaf(),
        (leaf(), leaf()).prop_map(|(a, b)| a.intersection(&b))
    ]
}

fn probe() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(VALUES.to_vec()).prop_map(str::to_owned),
        (-5i64..15).prop_map(|n| n.to_string()),
    ]
}

proptest! {
    #[test]
    fn intersection_is_commutative(a in value_set(), b in value_set()) {
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
    }

    #[test]
    fn intersection_is_associative(a in value_set(), b in value_set(), c in value_set()) {
        prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
    }

    #[test]
    fn intersection_contains_exactly_common_members(a in value_set(), b in value_set(), v in probe()) {
        prop_assert_eq!(a.intersection(&b).contains(&v), a.contains(&v) && b.contains(&v));
    }

    #[test]
    fn overlaps_agrees_with_intersection(a in value_set(), b in value_set()) {
        prop_assert_eq!(a.overlaps(&b), !a.intersection(&b).is_empty());
    }

    #[test]
    fn per_key_compatibility_is_non_empty_intersection_or_mutual_absence(a in value_set(), b in value_set()) {
        let ra = Requirements::new().with(Requirement::with_set("k", a.clone()));
        let rb = Requirements::new().with(Requirement::with_set("k", b.clone()));
        let expected = !a.intersection(&b).is_empty()
            || (a.operator().allows_absent() && b.operator().allows_absent());
        prop_assert_eq!(ra.intersects(&rb).is_ok(), expected);
        prop_assert_eq!(rb.intersects(&ra).is_ok(), expected, "symmetric");
        // A key only one side constrains never conflicts.
        let other = Requirements::new().with(Requirement::with_set("other", b));
        prop_assert!(ra.intersects(&other).is_ok());
    }

    #[test]
    fn exists_is_identity_and_does_not_exist_absorbs(a in value_set()) {
        prop_assert_eq!(ValueSet::any().intersection(&a), a.clone());
        prop_assert!(ValueSet::none().intersection(&a).is_empty());
        prop_assert_eq!(ValueSet::none().intersection(&a).operator(), SetOperator::DoesNotExist);
    }

    #[test]
    fn bounds_admit_only_integers_strictly_inside(gt in -3i64..10, lt in -3i64..10, v in probe()) {
        let set = ValueSet::greater_than(gt).intersection(&ValueSet::less_than(lt));
        let expected = v.parse::<i64>().is_ok_and(|n| n > gt && n < lt);
        prop_assert_eq!(set.contains(&v), expected);
        prop_assert_eq!(set.is_empty(), lt - gt <= 1);
    }

    #[test]
    fn adding_requirements_is_order_independent(a in value_set(), b in value_set(), m in proptest::option::of(1u32..5)) {
        let ra = Requirement::with_set("k", a).with_min_values(m);
        let rb = Requirement::with_set("k", b);
        let ab = Requirements::new().with(ra.clone()).with(rb.clone());
        let ba = Requirements::new().with(rb).with(ra);
        prop_assert_eq!(ab.clone(), ba);
        prop_assert_eq!(ab.get("k").and_then(Requirement::min_values), m);
    }

    #[test]
    fn label_matching_agrees_with_sets(a in value_set(), v in proptest::option::of(probe())) {
        let reqs = Requirements::new().with(Requirement::with_set("k", a.clone()));
        let matched = reqs.matches_labels(|k| if k == "k" { v.as_deref() } else { None });
        let expected = match &v {
            Some(v) => a.contains(v),
            None => a.operator().allows_absent(),
        };
        prop_assert_eq!(matched, expected);
    }
}

#[test]
fn operators_build_the_right_sets() {
    let r = Requirement::new("k", Operator::Gte, ["3"]).unwrap();
    assert!(r.set().contains("3") && !r.set().contains("2"));
    let r = Requirement::new("k", Operator::Lte, ["3"]).unwrap();
    assert!(r.set().contains("3") && !r.set().contains("4"));
    assert!(matches!(
        Requirement::new("k", Operator::Gt, ["x"]),
        Err(RequirementsError::NotOneInteger { .. })
    ));
    assert!(matches!(
        Requirement::new("k", Operator::Lt, Vec::<String>::new()),
        Err(RequirementsError::NotOneInteger { .. })
    ));
    assert!(Operator::parse("k", "Bogus").is_err());
    assert_eq!(Operator::parse("k", "NotIn").unwrap(), Operator::NotIn);
}

#[test]
fn compatible_rejects_undefined_custom_labels_only_when_required() {
    let pool = Requirements::new().with(Requirement::in_("kubernetes.io/arch", ["amd64"]));
    let wants_team = Requirements::new().with(Requirement::in_("team", ["a"]));
    let avoids_team = Requirements::new().with(Requirement::not_in("team", ["a"]));
    let wants_zone =
        Requirements::new().with(Requirement::in_("topology.kubernetes.io/zone", ["z"]));
    let well_known = |k: &str| k == "topology.kubernetes.io/zone";
    let err = pool.compatible(&wants_team, well_known).unwrap_err();
    assert_eq!(err.key(), "team");
    assert_eq!(
        err.to_string(),
        "label team does not have known values (requirement In [a])"
    );
    assert!(pool.compatible(&avoids_team, well_known).is_ok());
    assert!(pool.compatible(&wants_zone, well_known).is_ok());
    assert!(pool.compatible(&wants_zone, |_| false).is_err());
}

#[test]
fn disjoint_message_reads_like_the_spec() {
    let pool = Requirements::new().with(Requirement::in_("kubernetes.io/arch", ["amd64"]));
    let pod = Requirements::new().with(Requirement::in_("kubernetes.io/arch", ["arm64"]));
    assert_eq!(
        pool.intersects(&pod).unwrap_err().to_string(),
        "requirement kubernetes.io/arch In [arm64] vs [amd64]"
    );
}

#[test]
fn from_labels_and_display() {
    let r = Requirements::from_labels([("b", "2"), ("a", "1")]);
    assert_eq!(r.to_string(), "a In [1], b In [2]");
    assert!(r.matches_labels(|k| match k {
        "a" => Some("1"),
        "b" => Some("2"),
        _ => None,
    }));
}

/// A requirement in its Kubernetes form, for [`Requirements::from_slice`].
struct Raw(&'static str, Operator, Vec<String>, Option<u32>);

impl Selector for Raw {
    fn key(&self) -> &str {
        self.0
    }
    fn operator(&self) -> Operator {
        self.1
    }
    fn values(&self) -> &[String] {
        &self.2
    }
    fn min_values(&self) -> Option<u32> {
        self.3
    }
}

#[test]
fn operators_round_trip() {
    for op in Operator::ALL {
        assert_eq!(op.as_str().parse::<Operator>(), Ok(op));
        assert_eq!(op.to_string(), op.as_str());
    }
    assert!("Bogus".parse::<Operator>().is_err());
}

#[test]
fn inclusive_bounds_are_strict_bounds_one_further_out() {
    assert_eq!(Requirement::gte("k", 3), Requirement::gt("k", 2));
    assert_eq!(Requirement::lte("k", 3), Requirement::lt("k", 4));
    assert_eq!(
        Requirement::new("k", Operator::Gte, ["3"]).unwrap(),
        Requirement::gte("k", 3)
    );
}

#[test]
fn selectors_merge_per_key() {
    let merged = Requirements::from_slice(&[
        Raw("zone", Operator::In, vec!["a".into(), "b".into()], None),
        Raw("zone", Operator::NotIn, vec!["b".into()], Some(1)),
        Raw("cpu", Operator::Gte, vec!["4".into()], None),
    ])
    .unwrap();
    assert_eq!(merged.set_of("zone"), Some(&ValueSet::in_(["a"])));
    assert_eq!(merged.min_values("zone"), Some(1));
    assert!(merged.set_of("cpu").unwrap().contains("4"));
    assert!(!merged.set_of("cpu").unwrap().contains("3"));
    assert_eq!(
        merged.single_values().collect::<Vec<_>>(),
        vec![("zone", "a")]
    );
    assert_eq!(merged.keys().collect::<Vec<_>>(), vec!["cpu", "zone"]);
    let bad = Requirements::from_slice(&[Raw("cpu", Operator::Lte, vec!["x".into()], None)]);
    assert!(matches!(bad, Err(RequirementsError::NotOneInteger { .. })));
}

fn operator() -> impl Strategy<Value = Operator> {
    proptest::sample::select(Operator::ALL.to_vec())
}

proptest! {
    /// One requirement checked in its Kubernetes form means what its value set means.
    #[test]
    fn selector_matching_agrees_with_value_sets(
        op in operator(),
        values in subset(),
        label in proptest::option::of(probe()),
    ) {
        let values = match op {
            Operator::Exists | Operator::DoesNotExist => Vec::new(),
            _ => values,
        };
        // Kubernetes refuses `In`/`NotIn` without values (as a set, `NotIn []` reads as `Exists`).
        prop_assume!(!(matches!(op, Operator::In | Operator::NotIn) && values.is_empty()));
        let expected = match Requirement::new("k", op, values.clone()) {
            Ok(r) => Requirements::new().with(r).matches_labels(|_| label.as_deref()),
            // Malformed bounds match nothing.
            Err(_) => false,
        };
        prop_assert_eq!(selector_matches(op, &values, label.as_deref()), expected);
    }
}
