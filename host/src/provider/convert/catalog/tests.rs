use super::*;

use super::builder::CatalogBuilder;

fn catalog() -> Catalog {
    let mut b = CatalogBuilder::new();
    for (name, cpu) in [("small", 2u64), ("large", 8)] {
        let mut t = b.instance_type(name);
        t.requirement_in("node.kubernetes.io/instance-type", &[name])
            .requirement_in("kubernetes.io/arch", &["amd64"])
            .requirement("example.com/generation", Operator::Gt, &["3"], Some(2))
            .offering("zone-a", "spot", 0.25, true)
            .offering_requirement("example.com/reservation", Operator::In, &["r-1"], None)
            .offering("zone-b", "on-demand", 1.0, false)
            .capacity("cpu", cpu * 1000)
            .capacity("memory", 1536)
            .capacity("pods", 110_000)
            .kube_reserved("cpu", 100)
            .eviction_threshold("memory", 1000);
    }
    b.finish().into()
}

fn err(c: &Catalog) -> CatalogError {
    match CatalogView::new(c) {
        Ok(_) => panic!("catalog accepted"),
        Err(e) => e,
    }
}

#[test]
fn a_well_formed_catalog_reads_back() {
    let c = catalog();
    let view = CatalogView::new(&c).unwrap();
    assert_eq!(view.len(), 2);
    let large = view.instance_types().nth(1).unwrap();
    assert_eq!(large.name, "large");
    let reqs: Vec<(String, Operator, Vec<&str>, Option<u32>)> = large
        .requirements()
        .map(|r| {
            (
                r.key().to_owned(),
                r.operator(),
                r.values().collect(),
                r.min_values(),
            )
        })
        .collect();
    assert_eq!(
        reqs[0],
        (
            "node.kubernetes.io/instance-type".into(),
            Operator::In,
            vec!["large"],
            None
        )
    );
    assert_eq!(
        reqs[2],
        (
            "example.com/generation".into(),
            Operator::Gt,
            vec!["3"],
            Some(2)
        )
    );
    let offerings: Vec<OfferingView<'_>> = large.offerings().collect();
    assert_eq!(offerings.len(), 2);
    assert_eq!(
        (offerings[0].zone(), offerings[0].capacity_type()),
        ("zone-a", "spot")
    );
    assert_eq!(offerings[0].requirements().count(), 1);
    assert_eq!(offerings[1].requirements().count(), 0);
    assert!(!offerings[1].available());
    let capacity: Vec<(&str, i64, i64)> = large
        .capacity()
        .map(|a| (a.name, a.milli_value, a.units()))
        .collect();
    assert_eq!(
        capacity,
        vec![
            ("cpu", 8000, 8),
            ("memory", 1536, 2),
            ("pods", 110_000, 110)
        ]
    );
    assert_eq!(large.overhead().count(), 2);
}

#[test]
fn out_of_range_string_indices_are_errors() {
    let mut c = catalog();
    c.instance_types[1].name = 999;
    assert!(matches!(
        err(&c),
        CatalogError::Index {
            list: "strings",
            index: 999,
            ..
        }
    ));
    let mut c = catalog();
    c.offerings[0].zone = u32::MAX;
    let e = err(&c);
    assert!(
        matches!(&e, CatalogError::Index { what, .. } if what.ends_with("offering #0 zone")),
        "{e}"
    );
    let mut c = catalog();
    c.values[0] = 1000;
    assert!(matches!(
        err(&c),
        CatalogError::Index {
            list: "strings",
            index: 1000,
            ..
        }
    ));
    let mut c = catalog();
    c.amounts[0].name = 77;
    assert!(matches!(
        err(&c),
        CatalogError::Index {
            list: "strings",
            ..
        }
    ));
}

#[test]
fn out_of_range_list_indices_and_spans_are_errors() {
    let mut c = catalog();
    c.requirement_lists[0] = 50;
    assert!(matches!(
        err(&c),
        CatalogError::Index {
            list: "requirements",
            index: 50,
            ..
        }
    ));
    let mut c = catalog();
    c.instance_types[0].offerings = Span { start: 3, len: 2 };
    assert!(matches!(
        err(&c),
        CatalogError::Span {
            list: "offerings",
            start: 3,
            len: 2,
            total: 4,
            ..
        }
    ));
    // start + len overflows u32: still an error, not a panic.
    let mut c = catalog();
    c.instance_types[0].capacity = Span {
        start: u32::MAX,
        len: u32::MAX,
    };
    assert!(matches!(
        err(&c),
        CatalogError::Span {
            list: "amounts",
            ..
        }
    ));
    let mut c = catalog();
    c.requirements[0].values = Span { start: 0, len: 100 };
    assert!(matches!(err(&c), CatalogError::Span { list: "values", .. }));
    let mut c = catalog();
    c.offerings[1].requirements = Span { start: 100, len: 1 };
    assert!(matches!(
        err(&c),
        CatalogError::Span {
            list: "requirement-lists",
            ..
        }
    ));
    // An empty span may start anywhere.
    let mut c = catalog();
    c.instance_types[0].overhead.system_reserved = Span {
        start: u32::MAX,
        len: 0,
    };
    assert!(CatalogView::new(&c).is_ok());
}

#[test]
fn bad_prices_are_errors() {
    for price in [f64::NAN, f64::INFINITY, -0.5] {
        let mut c = catalog();
        c.offerings[3].price = price;
        match err(&c) {
            CatalogError::Price {
                instance_type,
                offering,
                ..
            } => {
                assert_eq!((instance_type.as_str(), offering), ("large", 1));
            }
            other => panic!("{other}"),
        }
    }
}

#[test]
fn empty_zones_capacity_types_and_names_are_errors() {
    let mut c = catalog();
    c.strings.push(String::new());
    let empty = (c.strings.len() - 1) as u32;
    let mut zone = c.clone();
    zone.offerings[0].zone = empty;
    assert_eq!(
        err(&zone),
        CatalogError::EmptyField {
            instance_type: "small".into(),
            offering: 0,
            field: "zone"
        }
    );
    let mut ct = c.clone();
    ct.offerings[2].capacity_type = empty;
    assert!(matches!(
        err(&ct),
        CatalogError::EmptyField {
            field: "capacity-type",
            offering: 0,
            ..
        }
    ));
    let mut name = c.clone();
    name.instance_types[1].name = empty;
    assert_eq!(err(&name), CatalogError::EmptyName { index: 1 });
}

#[test]
fn requirements_must_fit_their_operator() {
    let c = catalog();
    let generation = c
        .requirements
        .iter()
        .position(|r| r.operator == Operator::Gt)
        .unwrap();
    let mut bad = c.clone();
    let arch_value = bad.values[bad.requirements[1].values.start as usize];
    bad.values[bad.requirements[generation].values.start as usize] = arch_value;
    assert!(matches!(
        err(&bad),
        CatalogError::Requirement {
            why: "Gt/Lt take exactly one integer value",
            ..
        }
    ));
    let mut bad = c.clone();
    bad.requirements[1].values = Span { start: 0, len: 0 };
    assert!(matches!(
        err(&bad),
        CatalogError::Requirement { index: 1, .. }
    ));
    let mut bad = c.clone();
    bad.requirements[1].operator = Operator::Exists;
    assert!(matches!(
        err(&bad),
        CatalogError::Requirement {
            why: "Exists/DoesNotExist take no values",
            ..
        }
    ));
}

#[test]
fn amounts_above_i64_are_errors() {
    let mut c = catalog();
    c.amounts[0].milli_value = u64::MAX;
    assert!(matches!(
        err(&c),
        CatalogError::AmountOverflow {
            milli_value: u64::MAX,
            ..
        }
    ));
    let msg = err(&c).to_string();
    assert!(msg.contains("cpu"), "{msg}");
}
