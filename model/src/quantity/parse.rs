//! Kubernetes quantity syntax:
//!
//! ```text
//! quantity  ::= [+|-] number suffix
//! number    ::= digits | digits "." | digits "." digits | "." digits
//! suffix    ::= binarySI | decimalSI | ("e" | "E") [+|-] digits
//! binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI ::= n | u | m | "" | k | M | G | T | P | E
//! ```

use super::{Format, Quantity, QuantityError};

/// Largest power of ten an `i128` holds.
const MAX_POW10: i64 = 38;

pub(super) fn parse(s: &str) -> Result<Quantity, QuantityError> {
    let syntax = || QuantityError::Syntax(s.to_string());

    let (negative, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let (int_digits, after_int) = split_digits(rest);
    let (frac_digits, suffix) = match after_int.strip_prefix('.') {
        Some(after_dot) => split_digits(after_dot),
        None => ("", after_int),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(syntax());
    }
    let (format, pow2, pow10) = suffix_scale(suffix).ok_or_else(syntax)?;

    // Significant digits only: leading zeros add nothing, trailing fractional zeros are dropped.
    let frac_digits = frac_digits.trim_end_matches('0');
    let mut mantissa: i128 = 0;
    for digit in int_digits.bytes().chain(frac_digits.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or_else(|| QuantityError::Overflow(s.to_string()))?;
    }
    let millis = scale(mantissa, pow2, pow10, frac_digits.len())
        .ok_or_else(|| QuantityError::Overflow(s.to_string()))?;
    Ok(Quantity::with_format(
        if negative { -millis } else { millis },
        format,
    ))
}

/// `mantissa × 10^-frac_len × 2^pow2 × 10^pow10`, in milli-units, rounded up; `None` on overflow.
fn scale(mantissa: i128, pow2: u32, pow10: i64, frac_len: usize) -> Option<i128> {
    if mantissa == 0 {
        return Some(0);
    }
    let value = mantissa.checked_mul(1i128.checked_shl(pow2)?)?;
    let frac_len = i64::try_from(frac_len).ok()?;
    let exp10 = pow10.checked_add(3)?.checked_sub(frac_len)?;
    if exp10 >= 0 {
        if exp10 > MAX_POW10 {
            return None;
        }
        value.checked_mul(10i128.checked_pow(u32::try_from(exp10).ok()?)?)
    } else if -exp10 > MAX_POW10 {
        // Far below a milli-unit: rounds up to one.
        Some(1)
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-exp10).ok()?)?;
        Some(value / divisor + i128::from(value % divisor != 0))
    }
}

fn split_digits(s: &str) -> (&str, &str) {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    s.split_at(n)
}

/// The notation, power of two and power of ten a suffix stands for; `None` when it is not a suffix.
fn suffix_scale(suffix: &str) -> Option<(Format, u32, i64)> {
    let binary = |pow2| Some((Format::BinarySi, pow2, 0));
    let decimal = |pow10| Some((Format::DecimalSi, 0, pow10));
    match suffix {
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "" => decimal(0),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        _ => {
            let exponent = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let (negative, digits) = match exponent.as_bytes().first() {
                Some(b'+') => (false, &exponent[1..]),
                Some(b'-') => (true, &exponent[1..]),
                _ => (false, exponent),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // All digits, so parsing fails only on overflow; any huge exponent scales out of range
            // (or, negative, far below a milli-unit) just the same.
            let magnitude = digits
                .parse::<i64>()
                .unwrap_or(i64::MAX / 4)
                .min(i64::MAX / 4);
            let pow10 = if negative { -magnitude } else { magnitude };
            Some((Format::DecimalExponent, 0, pow10))
        }
    }
}
