//! Karpenter's duration strings: `"30s"`, `"720h"`, `"1h30m"`, and `"Never"` where a field allows it.

use std::time::Duration;

use thiserror::Error;

/// The CRD pattern for a duration that may be `Never` (`expireAfter`, `consolidateAfter`).
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// The CRD pattern for a duration that must be finite (`terminationGracePeriod`).
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error(
        "invalid duration {0:?}: expected digits followed by s, m or h (e.g. 90s, 1h30m) or Never"
    )]
    Invalid(String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Parses a duration; `Ok(None)` means `Never`.
pub fn parse_nillable(text: &str) -> Result<Option<Duration>, DurationError> {
    if text == "Never" {
        return Ok(None);
    }
    parse(text).map(Some)
}

/// Parses a finite duration made of `<digits><s|m|h>` groups (Go's `time.ParseDuration` subset that
/// Karpenter's CRDs admit).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u64 = 0;
    let mut digits: Option<u64> = None;
    for c in text.chars() {
        if let Some(d) = c.to_digit(10) {
            let current = digits.unwrap_or(0);
            digits = Some(
                current
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(d)))
                    .ok_or_else(|| DurationError::Overflow(text.to_owned()))?,
            );
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(DurationError::Invalid(text.to_owned())),
        };
        let value = digits
            .take()
            .ok_or_else(|| DurationError::Invalid(text.to_owned()))?;
        total = value
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::Overflow(text.to_owned()))?;
    }
    if digits.is_some() {
        return Err(DurationError::Invalid(text.to_owned()));
    }
    Ok(Duration::from_secs(total))
}

/// Formats a duration the way Karpenter's defaults read (`720h`, `1h30m`, `15s`).
pub fn format(duration: Duration) -> String {
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_karpenter_durations() {
        assert_eq!(parse("720h").unwrap(), Duration::from_secs(720 * 3600));
        assert_eq!(parse("1h30m15s").unwrap(), Duration::from_secs(5415));
        assert_eq!(parse("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_nillable("Never").unwrap(), None);
        assert_eq!(
            parse_nillable("10s").unwrap(),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn rejects_malformed_durations() {
        for bad in ["", "h", "10", "10d", "1.5h", "never", "-1s", "1h 2m"] {
            assert!(parse_nillable(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(
            parse("99999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    proptest! {
        #[test]
        fn format_round_trips(secs in 0u64..10_000_000) {
            let d = Duration::from_secs(secs);
            prop_assert_eq!(parse(&format(d)).unwrap(), d);
        }
    }
}
