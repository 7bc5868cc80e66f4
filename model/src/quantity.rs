//! Kubernetes resource quantities (`"500m"`, `"16Gi"`, `"1.5"`, `"2e3"`, `"100M"`) as exact integers.
//!
//! A [`Quantity`] holds its value in milli-units (thousandths: `"500m"` is 500, `"2"` is 2000,
//! `"1Ki"` is 1,024,000) in an `i128`, which covers every quantity up to 10^35 exactly. Parsing rounds
//! anything finer than a milli-unit up, as Kubernetes' `MilliValue` does. Formatting produces the
//! canonical Kubernetes spelling in the notation the quantity was written in (binary suffixes stay
//! binary, `"1.5"` becomes `"1500m"`, `"2000"` becomes `"2k"`).
//!
//! The scheduler works in 64-bit fixed point: [`parse_millis`] (CPU in millicores) and
//! [`parse_units`] (bytes, pods, devices, rounded up like Kubernetes' `Value()`) give the value as
//! an `i64`; [`format_millis`] and [`format_bytes`] write such values for people. The syntax:
//!
//! ```text
//! quantity ::= [+|-] number [suffix]
//! number   ::= digits | digits "." | digits "." digits | "." digits
//! suffix   ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|k|M|G|T|P|E | (e|E) [+|-] digits
//! ```

mod format;
mod parse;

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Notation a quantity is written in; kept so formatting stays in the same family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `m`, (none), `k`, `M`, `G`, `T`, `P`, `E` (and `n`, `u` when parsing).
    DecimalSi,
    /// `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei`.
    BinarySi,
    /// `e3`, `E-3`, ...
    DecimalExponent,
}

/// A quantity that does not parse or does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not Kubernetes quantity syntax.
    #[error(
        "{0:?} is not a Kubernetes quantity (expected e.g. \"500m\", \"2\", \"16Gi\", \"1e3\")"
    )]
    Syntax(String),
    /// Outside what an `i128` of milli-units (or, for the `i64` functions, an `i64`) holds.
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
}

/// The value of `text` in milli-units (`"1"` is 1000, `"100m"` is 100), rounded up.
pub fn parse_millis(text: &str) -> Result<i64, QuantityError> {
    let millis = Quantity::parse(text)?.millis();
    i64::try_from(millis).map_err(|_| QuantityError::Overflow(text.to_owned()))
}

/// The value of `text` in whole units (`"16Gi"` is 17179869184, `"1.5"` is 2), rounded up (away
/// from zero) like Kubernetes' `Value()`.
pub fn parse_units(text: &str) -> Result<i64, QuantityError> {
    let units = Quantity::parse(text)?.value();
    i64::try_from(units).map_err(|_| QuantityError::Overflow(text.to_owned()))
}

/// Formats whole bytes the way people read them: the largest binary suffix that divides exactly
/// (`1Ti`, `1536Mi`), else decimal bytes.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    if bytes != 0 {
        for (i, suffix) in SUFFIXES.iter().enumerate() {
            let unit = 1i64 << (10 * (6 - i));
            if bytes % unit == 0 {
                return format!("{}{suffix}", bytes / unit);
            }
        }
    }
    bytes.to_string()
}

/// Formats millicores as Kubernetes would: whole cores when exact (`4`), else `1500m`.
pub fn format_millis(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// A Kubernetes quantity, exact to the milli-unit. Equality and order compare values only.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    millis: i128,
    format: Format,
}

impl Quantity {
    /// Zero.
    pub const ZERO: Quantity = Quantity {
        millis: 0,
        format: Format::DecimalSi,
    };

    /// `millis` thousandths, decimal notation (`Quantity::from_millis(1500)` is `"1500m"`).
    pub fn from_millis(millis: i128) -> Self {
        Self::with_format(millis, Format::DecimalSi)
    }

    /// `millis` thousandths in the given notation.
    pub fn with_format(millis: i128, format: Format) -> Self {
        Self { millis, format }
    }

    /// A whole number in decimal notation (`Quantity::from_units(4)` is `"4"`), saturating.
    pub fn from_units(units: i128) -> Self {
        Self::from_millis(units.saturating_mul(1000))
    }

    /// A byte count in binary notation (`Quantity::from_bytes(1 << 30)` is `"1Gi"`), saturating.
    pub fn from_bytes(bytes: i128) -> Self {
        Self::with_format(bytes.saturating_mul(1000), Format::BinarySi)
    }

    /// Parses Kubernetes quantity syntax.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        parse::parse(s)
    }

    /// The value in milli-units.
    pub fn millis(&self) -> i128 {
        self.millis
    }

    /// The value in whole units (bytes, cores, pods), rounded up (away from zero) like Kubernetes'
    /// `Value()`.
    pub fn value(&self) -> i128 {
        let whole = self.millis / 1000;
        if self.millis % 1000 == 0 {
            whole
        } else if self.millis > 0 {
            whole + 1
        } else {
            whole - 1
        }
    }

    /// The notation used when formatting.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.millis == 0
    }

    /// Sum, in this quantity's notation; `None` on overflow.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        Some(Self::with_format(
            self.millis.checked_add(other.millis)?,
            self.format,
        ))
    }

    /// Difference, in this quantity's notation; `None` on overflow.
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        Some(Self::with_format(
            self.millis.checked_sub(other.millis)?,
            self.format,
        ))
    }

    /// Difference, never below zero.
    pub fn saturating_sub(&self, other: &Quantity) -> Quantity {
        Self::with_format(self.millis.saturating_sub(other.millis).max(0), self.format)
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.millis == other.millis
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.millis.cmp(&other.millis)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse::parse(s)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format::canonical(self.millis, self.format))
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Kubernetes quantity (string or number)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Quantity::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v.into()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity::from_units(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                Quantity::parse(&v.to_string()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_to_milli_units() {
        assert_eq!(q("500m").millis(), 500);
        assert_eq!(q("1.5").millis(), 1500);
        assert_eq!(q("2e3").millis(), 2_000_000);
        assert_eq!(q("100M").value(), 100_000_000);
        assert_eq!(q("16Gi").value(), 16 << 30);
        assert_eq!(q("1Ki").millis(), 1_024_000);
        assert_eq!(q("0.5Gi").value(), 1 << 29);
        assert_eq!(q("-2").millis(), -2000);
        assert_eq!(q("+3k").value(), 3000);
        assert_eq!(q(".5").millis(), 500);
        assert_eq!(q("5.").millis(), 5000);
        assert_eq!(q("1E").value(), 1_000_000_000_000_000_000);
        assert_eq!(q("1E2").value(), 100);
        assert_eq!(q("1e-3").millis(), 1);
        assert_eq!(q("100n").millis(), 1, "rounds up below a milli");
        assert_eq!(q("1u").millis(), 1);
        assert_eq!(q("0.0001").millis(), 1);
        assert_eq!(q("-0.0001").millis(), -1);
        assert_eq!(q("1Ei").value(), 1 << 60);
        assert_eq!(q("0").millis(), 0);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", " 1", "1 ", "Gi", "1.2.3", "1Q", "--1", "1e", "1e+", "1Kib", ".", "+", "1ki", "e3",
            "1e3.5", "1m2",
        ] {
            assert!(
                matches!(Quantity::parse(bad), Err(QuantityError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            Quantity::parse("1e100"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn formats_canonically() {
        for (input, canonical) in [
            ("500m", "500m"),
            ("1.5", "1500m"),
            ("2e3", "2e3"),
            ("100M", "100M"),
            ("16Gi", "16Gi"),
            ("2000", "2k"),
            ("1024", "1024"),
            ("1536Mi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1000Ki", "1000Ki"),
            ("512Ki", "512Ki"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("100m", "100m"),
            ("0", "0"),
            ("-1.5", "-1500m"),
            ("-2Gi", "-2Gi"),
            ("1.5e3", "1500"),
            ("1.5e0", "1500e-3"),
            ("1E", "1E"),
            ("1000E", "1000E"),
            ("4", "4"),
            ("110", "110"),
        ] {
            assert_eq!(q(input).to_string(), canonical, "{input}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn serde_accepts_strings_and_numbers() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["16Gi", 4, 1.5]"#).unwrap();
        assert_eq!(v[0].value(), 16 << 30);
        assert_eq!(v[1].millis(), 4000);
        assert_eq!(v[2].millis(), 1500);
        assert_eq!(serde_json::to_string(&v[0]).unwrap(), "\"16Gi\"");
    }

    #[test]
    fn fixed_point_values() {
        assert_eq!(parse_millis("500m").unwrap(), 500);
        assert_eq!(parse_millis("1.5").unwrap(), 1500);
        assert_eq!(parse_millis("1Ki").unwrap(), 1_024_000);
        assert_eq!(parse_millis("100n").unwrap(), 1, "rounds up below a milli");
        assert_eq!(parse_millis("1e-400").unwrap(), 1);
        assert_eq!(parse_millis("-2").unwrap(), -2000);
        assert_eq!(parse_units("16Gi").unwrap(), 16 << 30);
        assert_eq!(parse_units("0.5Gi").unwrap(), 1 << 29);
        assert_eq!(parse_units("1.001").unwrap(), 2);
        assert_eq!(parse_units("-1.001").unwrap(), -2);
        assert_eq!(parse_units("1Ei").unwrap(), 1 << 60);
        assert!(matches!(
            parse_millis("1e100"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            parse_millis("1Ei"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            parse_units("10Ei"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(parse_units("1Q"), Err(QuantityError::Syntax(_))));
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_bytes(1 << 40), "1Ti");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_millis(64_000), "64");
        assert_eq!(format_millis(1500), "1500m");
    }

    #[test]
    fn arithmetic() {
        assert_eq!(q("1").checked_add(&q("500m")), Some(q("1.5")));
        assert_eq!(q("1").saturating_sub(&q("2")), Quantity::ZERO);
        assert_eq!(
            q("16Gi").checked_sub(&q("10Mi")).unwrap().to_string(),
            "16374Mi"
        );
        assert!(q("1") > q("999m"));
        assert_eq!(q("1.001").value(), 2);
        assert_eq!(q("-1.001").value(), -2);
    }

    #[cfg(not(target_arch = "wasm32"))]
    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn formats() -> impl Strategy<Value = Format> {
            prop_oneof![
                Just(Format::DecimalSi),
                Just(Format::BinarySi),
                Just(Format::DecimalExponent)
            ]
        }

        proptest! {
            #[test]
            fn formatting_round_trips(millis in -(1i128 << 100)..(1i128 << 100), format in formats()) {
                let quantity = Quantity::with_format(millis, format);
                let text = quantity.to_string();
                let back = Quantity::parse(&text).unwrap();
                prop_assert_eq!(back.millis(), millis, "{}", text);
                prop_assert_eq!(back.to_string(), text);
            }

            #[test]
            fn small_values_round_trip(millis in -10_000_000i128..10_000_000, format in formats()) {
                let text = Quantity::with_format(millis, format).to_string();
                prop_assert_eq!(Quantity::parse(&text).unwrap().millis(), millis, "{}", text);
            }

            #[test]
            fn suffixed_integers_parse_exactly(n in 0i64..1_000_000, suffix in 0usize..13) {
                let (text, scale): (&str, i128) = [
                    ("m", 1), ("", 1000), ("k", 1_000_000), ("M", 1_000_000_000),
                    ("G", 1_000_000_000_000), ("T", 1_000_000_000_000_000),
                    ("Ki", 1_024_000), ("Mi", 1_048_576_000), ("Gi", 1_073_741_824_000),
                    ("Ti", 1_099_511_627_776_000), ("e3", 1_000_000), ("e0", 1000), ("E-3", 1),
                ][suffix];
                let quantity = Quantity::parse(&format!("{n}{text}")).unwrap();
                prop_assert_eq!(quantity.millis(), i128::from(n) * scale);
                let again = Quantity::parse(&quantity.to_string()).unwrap();
                prop_assert_eq!(again, quantity);
            }

            #[test]
            fn decimals_parse_like_their_milli_value(whole in 0u32..100_000, frac in 0u32..1000) {
                let text = format!("{whole}.{frac:03}");
                prop_assert_eq!(
                    Quantity::parse(&text).unwrap().millis(),
                    i128::from(whole) * 1000 + i128::from(frac)
                );
            }

            #[test]
            fn parse_never_panics(s in "\\PC{0,24}") {
                let _ = Quantity::parse(&s);
            }

            #[test]
            fn fixed_point_agrees_with_quantities(millis in -(1i128 << 70)..(1i128 << 70), format in formats()) {
                let text = Quantity::with_format(millis, format).to_string();
                prop_assert_eq!(parse_millis(&text).ok().map(i128::from), i64::try_from(millis).ok().map(i128::from));
                let units = Quantity::with_format(millis, format).value();
                prop_assert_eq!(parse_units(&text).ok().map(i128::from), i64::try_from(units).ok().map(i128::from));
            }
        }
    }
}
