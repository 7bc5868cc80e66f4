//! The `expires` parameter of signature version 3: written as `yyyy-MM-dd'T'HH:mm:ssZ` in UTC
//! (`2026-01-02T03:04:05+0000`, the form the `cs` client sends), read in every form CloudStack's
//! `DateUtil.parseTZDateString` accepts: ISO-8601 with an offset (`Z`, `+01:00`, `+0100`, `+01`),
//! optional seconds and fractions, and the legacy `...ssZ+0000`.

use capstan_model::civil::{civil_from_days, days_from_civil, days_in_month};

use crate::Error;

const MILLIS_PER_SECOND: i64 = 1_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Formats `unix_seconds` as `yyyy-MM-dd'T'HH:mm:ss+0000`.
pub fn format_expires(unix_seconds: i64) -> String {
    let days = unix_seconds.div_euclid(SECONDS_PER_DAY);
    let secs = unix_seconds.rem_euclid(SECONDS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+0000",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Parses an `expires` value into milliseconds since the Unix epoch.
pub fn parse_expires(s: &str) -> Result<i64, Error> {
    let bad = || Error::BadExpires(s.to_string());
    let mut p = Cursor {
        s: s.as_bytes(),
        i: 0,
    };
    let year = p.digits(4).ok_or_else(bad)?;
    p.expect(b'-').ok_or_else(bad)?;
    let month = p.digits(2).ok_or_else(bad)?;
    p.expect(b'-').ok_or_else(bad)?;
    let day = p.digits(2).ok_or_else(bad)?;
    p.expect(b'T').ok_or_else(bad)?;
    let hour = p.digits(2).ok_or_else(bad)?;
    p.expect(b':').ok_or_else(bad)?;
    let minute = p.digits(2).ok_or_else(bad)?;
    let mut second = 0;
    let mut millis = 0;
    if p.peek() == Some(b':') {
        p.i += 1;
        second = p.digits(2).ok_or_else(bad)?;
        if p.peek() == Some(b'.') {
            p.i += 1;
            let start = p.i;
            while p.peek().is_some_and(|b| b.is_ascii_digit()) {
                p.i += 1;
            }
            let fraction = &p.s[start..p.i];
            if fraction.is_empty() || fraction.len() > 9 {
                return Err(bad());
            }
            millis = fraction
                .iter()
                .chain(std::iter::repeat(&b'0'))
                .take(3)
                .fold(0, |acc, b| acc * 10 + i64::from(b - b'0'));
        }
    }
    let offset_seconds = p.offset().ok_or_else(bad)?;
    if p.i != p.s.len() {
        return Err(bad());
    }
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second - offset_seconds;
    Ok(seconds * MILLIS_PER_SECOND + millis)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.peek() == Some(b)).then(|| self.i += 1)
    }

    fn digits(&mut self, n: usize) -> Option<i64> {
        let digits = self.s.get(self.i..self.i + n)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.i += n;
        Some(
            digits
                .iter()
                .fold(0, |acc, b| acc * 10 + i64::from(b - b'0')),
        )
    }

    /// `Z`, `Z±HHMM` (legacy), `±HH:MM`, `±HHMM` or `±HH`, in seconds east of UTC.
    fn offset(&mut self) -> Option<i64> {
        if self.expect(b'Z').is_some() {
            return if self.peek().is_some() {
                self.numeric_offset()
            } else {
                Some(0)
            };
        }
        self.numeric_offset()
    }

    fn numeric_offset(&mut self) -> Option<i64> {
        let sign = match self.peek()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        self.i += 1;
        let hours = self.digits(2)?;
        let minutes = match self.peek() {
            None => 0,
            Some(b':') => {
                self.i += 1;
                self.digits(2)?
            }
            Some(_) => self.digits(2)?,
        };
        (hours < 24 && minutes < 60).then_some(sign * (hours * 3600 + minutes * 60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_like_the_cs_client() {
        assert_eq!(format_expires(0), "1970-01-01T00:00:00+0000");
        // 2026-01-02T03:04:05Z
        assert_eq!(format_expires(1_767_323_045), "2026-01-02T03:04:05+0000");
        assert_eq!(format_expires(951_782_400), "2000-02-29T00:00:00+0000");
    }

    #[test]
    fn parses_every_accepted_form() {
        let base = 1_767_323_045_000;
        for s in [
            "2026-01-02T03:04:05+0000",
            "2026-01-02T03:04:05Z",
            "2026-01-02T03:04:05+00:00",
            "2026-01-02T04:04:05+01:00",
            "2026-01-02T04:04:05+0100",
            "2026-01-02T04:04:05+01",
            "2026-01-02T02:04:05-01:00",
            "2026-01-02T03:04:05Z+0000",
        ] {
            assert_eq!(parse_expires(s).unwrap(), base, "{s}");
        }
        assert_eq!(
            parse_expires("2026-01-02T03:04:05.250000Z").unwrap(),
            base + 250
        );
        assert_eq!(parse_expires("2026-01-02T03:04Z").unwrap(), base - 5_000);
    }

    #[test]
    fn rejects_what_cloudstack_cannot_parse() {
        for s in [
            "",
            "tomorrow",
            "2026-01-02",
            "2026-01-02T03:04:05",
            "2026-13-02T03:04:05Z",
            "2026-02-30T03:04:05Z",
            "2026-01-02T24:04:05Z",
            "2026-01-02T03:04:05+2500",
            "2026-01-02T03:04:05Zjunk",
            "1767323045",
        ] {
            assert!(parse_expires(s).is_err(), "{s}");
        }
    }
}
