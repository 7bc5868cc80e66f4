//! Kubernetes resource quantities (`"500m"`, `"16Gi"`, `"1.5"`, `"2e3"`) as exact integers.
//!
//! The scheduler works in fixed point: CPU in millicores, everything else in whole units (bytes,
//! pods, devices). [`parse_millis`] gives a quantity's value in thousandths of a unit, rounding
//! anything finer up as Kubernetes' `MilliValue()` does; [`parse_units`] gives whole units, rounding
//! up like `Value()`. Both reject anything that is not Kubernetes quantity syntax:
//!
//! ```text
//! quantity ::= [+|-] number [suffix]
//! number   ::= digits | digits "." | digits "." digits | "." digits
//! suffix   ::= Ki|Mi|Gi|Ti|Pi|Ei | n|u|m|k|M|G|T|P|E | (e|E) [+|-] digits
//! ```
//!
//! This is the host's one exact quantity parser (the conformance kit only needs approximate
//! values; its `f64` parser checks syntax).

/// A quantity that does not parse or does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not Kubernetes quantity syntax.
    #[error(
        "{0:?} is not a Kubernetes quantity (expected e.g. \"500m\", \"2\", \"16Gi\", \"1e3\")"
    )]
    Syntax(String),
    /// Larger than the scheduler's 64-bit fixed point holds.
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
}

/// The value of `text` in milli-units (`"1"` is 1000, `"100m"` is 100), rounded up.
pub fn parse_millis(text: &str) -> Result<i64, QuantityError> {
    let millis = parse_i128_millis(text)?;
    i64::try_from(millis).map_err(|_| QuantityError::Overflow(text.to_owned()))
}

/// The value of `text` in whole units (`"16Gi"` is 17179869184, `"1.5"` is 2), rounded up (away
/// from zero) like Kubernetes' `Value()`.
pub fn parse_units(text: &str) -> Result<i64, QuantityError> {
    let millis = parse_i128_millis(text)?;
    let whole = millis / 1000;
    let rounded = if millis % 1000 == 0 {
        whole
    } else if millis > 0 {
        whole + 1
    } else {
        whole - 1
    };
    i64::try_from(rounded).map_err(|_| QuantityError::Overflow(text.to_owned()))
}

fn parse_i128_millis(text: &str) -> Result<i128, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_owned());
    let overflow = || QuantityError::Overflow(text.to_owned());
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let (int_digits, after) = rest.split_at(int_len);
    let (frac_digits, suffix) = match after.strip_prefix('.') {
        Some(after_dot) => {
            let n = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            after_dot.split_at(n)
        }
        None => ("", after),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(syntax());
    }
    let (pow2, pow10) = suffix_scale(suffix).ok_or_else(syntax)?;
    let frac_digits = frac_digits.trim_end_matches('0');
    let mut mantissa: i128 = 0;
    for digit in int_digits.bytes().chain(frac_digits.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or_else(overflow)?;
    }
    if mantissa == 0 {
        return Ok(0);
    }
    let scaled = mantissa.checked_mul(1i128 << pow2).ok_or_else(overflow)?;
    // Milli-units: three more powers of ten, fewer by the fractional digits.
    let frac_len = i64::try_from(frac_digits.len()).map_err(|_| overflow())?;
    let exp10 = pow10 + 3 - frac_len;
    let millis = if exp10 >= 0 {
        let factor = u32::try_from(exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .ok_or_else(overflow)?;
        scaled.checked_mul(factor).ok_or_else(overflow)?
    } else {
        match u32::try_from(-exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
        {
            Some(divisor) => scaled / divisor + i128::from(scaled % divisor != 0),
            // Far below a milli-unit: rounds up to one.
            None => 1,
        }
    };
    Ok(if negative { -millis } else { millis })
}

/// The power of two and power of ten a suffix stands for; `None` when it is not a suffix.
fn suffix_scale(suffix: &str) -> Option<(u32, i64)> {
    Some(match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Clamp: anything this large overflows (or rounds to one milli) all the same.
            let magnitude = digits.parse::<i64>().unwrap_or(1000).min(1000);
            (
                0,
                if exponent.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                },
            )
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_milli_values() {
        assert_eq!(parse_millis("500m").unwrap(), 500);
        assert_eq!(parse_millis("1.5").unwrap(), 1500);
        assert_eq!(parse_millis("2").unwrap(), 2000);
        assert_eq!(parse_millis("2e3").unwrap(), 2_000_000);
        assert_eq!(parse_millis("1Ki").unwrap(), 1_024_000);
        assert_eq!(parse_millis("100n").unwrap(), 1, "rounds up below a milli");
        assert_eq!(parse_millis("1e-3").unwrap(), 1);
        assert_eq!(parse_millis("-2").unwrap(), -2000);
        assert_eq!(parse_millis(".5").unwrap(), 500);
        assert_eq!(parse_millis("5.").unwrap(), 5000);
        assert_eq!(parse_millis("0").unwrap(), 0);
        assert_eq!(parse_millis("1e-400").unwrap(), 1);
    }

    #[test]
    fn parses_whole_units() {
        assert_eq!(parse_units("16Gi").unwrap(), 16 << 30);
        assert_eq!(parse_units("100M").unwrap(), 100_000_000);
        assert_eq!(parse_units("0.5Gi").unwrap(), 1 << 29);
        assert_eq!(parse_units("1.001").unwrap(), 2);
        assert_eq!(parse_units("-1.001").unwrap(), -2);
        assert_eq!(parse_units("110").unwrap(), 110);
        assert_eq!(parse_units("1Ei").unwrap(), 1 << 60);
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        for bad in [
            "", " 1", "1 ", "Gi", "1.2.3", "1Q", "--1", "1e", "1e+", "1Kib", ".", "+", "1ki", "e3",
            "1m2",
        ] {
            assert!(
                matches!(parse_millis(bad), Err(QuantityError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_millis("1e100"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            parse_units("10Ei"),
            Err(QuantityError::Overflow(_))
        ));
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
}
