use std::collections::BTreeMap;

use capstan_model::Quantity;

use super::*;
use crate::template::{AttributeValue, Device};

fn q(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn gpu() -> DeviceValue {
    let device = Device {
        name: "gpu-0".into(),
        attributes: BTreeMap::from([
            ("type".into(), AttributeValue::String("gpu".into())),
            ("index".into(), AttributeValue::Int(0)),
            (
                "driverVersion".into(),
                AttributeValue::Version("1.5.2".into()),
            ),
            ("numa.example.com/node".into(), AttributeValue::Int(1)),
            ("healthy".into(), AttributeValue::Bool(true)),
        ]),
        capacity: BTreeMap::from([("memory".into(), q("80Gi"))]),
        allow_multiple_allocations: false,
        consumes_counters: vec![],
    };
    DeviceValue::new("gpu.example.com", &device)
}

fn eval(expression: &str) -> Result<bool, SelectorError> {
    SelectorCache::new().compile(expression)?.matches(&gpu())
}

#[test]
fn real_device_class_selectors_match() {
    for expression in [
        r#"device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].type == "gpu""#,
        r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0"#,
        r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("79Gi"))"#,
        r#"device.capacity["gpu.example.com"].memory == quantity("80Gi")"#,
        r#"quantity("1").isLessThan(quantity("1001m"))"#,
        r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.5.1"))"#,
        r#"device.attributes["gpu.example.com"].driverVersion.compareTo(semver("1.5.2")) == 0"#,
        r#"device.attributes["numa.example.com"].node == 1"#,
        r#"device.attributes["gpu.example.com"].healthy"#,
        r#""type" in device.attributes["gpu.example.com"]"#,
        r#"!("model" in device.attributes["gpu.example.com"])"#,
        r#"device.attributes["gpu.example.com"].type.startsWith("g")"#,
        r#"!device.allowMultipleAllocations"#,
        r#"device.capacity["gpu.example.com"].memory.asInteger() == 85899345920"#,
        r#"isQuantity("10Gi") && !isSemver("x") && semver("2.1.0").major() == 2"#,
        r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")"#,
    ] {
        assert_eq!(eval(expression), Ok(true), "{expression}");
    }
}

#[test]
fn non_matching_selectors_are_false() {
    for expression in [
        r#"device.driver == "other.example.com""#,
        r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("100Gi")) >= 0"#,
        r#"device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.0.0"))"#,
    ] {
        assert_eq!(eval(expression), Ok(false), "{expression}");
    }
}

#[test]
fn runtime_errors_and_non_bools_are_per_device() {
    let missing = eval(r#"device.attributes["gpu.example.com"].model == "x""#);
    assert!(
        matches!(&missing, Err(SelectorError::Runtime { .. })),
        "{missing:?}"
    );
    let not_bool = eval(r#"device.driver"#);
    assert!(
        matches!(&not_bool, Err(SelectorError::NotBool { .. })),
        "{not_bool:?}"
    );
    let bad_quantity = eval(r#"quantity("lots").isLessThan(quantity("1"))"#);
    assert!(matches!(bad_quantity, Err(SelectorError::Runtime { .. })));
    assert!(!missing.unwrap_err().is_compile());
}

#[test]
fn compile_errors_name_the_expression_and_are_cached() {
    let mut cache = SelectorCache::new();
    let error = cache
        .compile(r#"device.driver == "#)
        .expect_err("does not parse");
    assert!(error.is_compile());
    assert!(
        error.to_string().contains(r#"device.driver == "#),
        "{error}"
    );
    assert!(cache.compile(r#"device.driver == "#).is_err());
    assert!(cache.compile("true").is_ok());
    assert!(cache.compile("true").is_ok());
    assert_eq!(cache.len(), 2);
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    fn quantity_text() -> impl Strategy<Value = String> {
        (
            0u32..5000,
            prop::sample::select(vec!["", "m", "k", "M", "G", "Ki", "Mi", "Gi"]),
        )
            .prop_map(|(n, suffix)| format!("{n}{suffix}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn quantity_comparisons_agree_with_rust(a in quantity_text(), b in quantity_text()) {
            let expected = match q(&a).cmp(&q(&b)) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            };
            let mut cache = SelectorCache::new();
            for (expression, want) in [
                (format!(r#"quantity("{a}").compareTo(quantity("{b}")) == {expected}"#), true),
                (format!(r#"quantity("{a}").isGreaterThan(quantity("{b}"))"#), expected > 0),
                (format!(r#"quantity("{a}").isLessThan(quantity("{b}"))"#), expected < 0),
                (format!(r#"quantity("{a}") == quantity("{b}")"#), expected == 0),
            ] {
                let selector = cache.compile(&expression).unwrap();
                prop_assert_eq!(selector.matches(&gpu()), Ok(want), "{}", expression);
            }
        }

        #[test]
        fn semver_comparisons_agree_with_tuples(
            a in (0u8..3, 0u8..3, 0u8..3),
            b in (0u8..3, 0u8..3, 0u8..3),
        ) {
            let text = |(x, y, z): (u8, u8, u8)| format!("{x}.{y}.{z}");
            let expression = format!(
                r#"semver("{}").isGreaterThan(semver("{}"))"#,
                text(a),
                text(b)
            );
            let selector = SelectorCache::new().compile(&expression).unwrap();
            prop_assert_eq!(selector.matches(&gpu()), Ok(a > b));
        }
    }
}
