//! Kubernetes quantity syntax (`4`, `100m`, `16Gi`, `1.5`, `1e3`), for checking what providers
//! report. Only the syntax and an approximate value: the scheduler keeps its own exact arithmetic.

/// The approximate value of a quantity in base units, or why it is not one.
pub fn parse(text: &str) -> Result<f64, String> {
    let bad = || format!("{text:?} is not a Kubernetes quantity");
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.replace('.', "");
    if digits.is_empty() || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let scale = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E']).ok_or_else(bad)?;
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.chars().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let exp: i32 = digits.parse().map_err(|_| bad())?;
            10f64.powi(exp)
        }
    };
    let sign = if text.starts_with('-') { -1.0 } else { 1.0 };
    Ok(sign * value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid() {
        assert_eq!(parse("4").unwrap(), 4.0);
        assert_eq!(parse("100m").unwrap(), 0.1);
        assert_eq!(parse("16Gi").unwrap(), 16.0 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(parse("1.5").unwrap(), 1.5);
        assert_eq!(parse("1e3").unwrap(), 1000.0);
        assert_eq!(parse("110").unwrap(), 110.0);
        assert_eq!(parse(".5").unwrap(), 0.5);
        assert_eq!(parse("-1").unwrap(), -1.0);
    }

    #[test]
    fn invalid() {
        for bad in [
            "", "Gi", "4 Gi", "4GB", "1..2", "e3", "1e", "abc", "4gi", "1.2.3",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
