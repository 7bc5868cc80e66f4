//! Canonical Kubernetes spelling of a quantity.

use super::Format;

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// Largest decimal-SI exponent with a suffix (`E`).
const MAX_SI_EXPONENT: i32 = 18;

/// Formats `millis` the way Kubernetes canonicalises a quantity of that notation: the largest
/// suffix that keeps the mantissa an integer. Binary notation falls back to decimal for values that
/// are fractional or smaller than 1024 in magnitude, as Kubernetes does.
pub(super) fn canonical(millis: i128, format: Format) -> String {
    if millis == 0 {
        return "0".to_string();
    }
    let sign = if millis < 0 { "-" } else { "" };
    let abs = millis.unsigned_abs();
    let format = match format {
        Format::BinarySi if !abs.is_multiple_of(1000) || abs < 1024 * 1000 => Format::DecimalSi,
        other => other,
    };
    if format == Format::BinarySi {
        let mut mantissa = abs / 1000;
        let mut power = 0;
        while power < BINARY_SUFFIXES.len() - 1 && mantissa.is_multiple_of(1024) {
            mantissa /= 1024;
            power += 1;
        }
        return format!("{sign}{mantissa}{}", BINARY_SUFFIXES[power]);
    }
    let mut mantissa = abs;
    let mut exponent: i32 = -3;
    while mantissa.is_multiple_of(1000)
        && (format == Format::DecimalExponent || exponent < MAX_SI_EXPONENT)
    {
        mantissa /= 1000;
        exponent += 3;
    }
    let suffix = match (format, exponent) {
        (_, 0) => String::new(),
        (Format::DecimalExponent, e) => format!("e{e}"),
        (_, -3) => "m".to_string(),
        (_, 3) => "k".to_string(),
        (_, 6) => "M".to_string(),
        (_, 9) => "G".to_string(),
        (_, 12) => "T".to_string(),
        (_, 15) => "P".to_string(),
        _ => "E".to_string(),
    };
    format!("{sign}{mantissa}{suffix}")
}
