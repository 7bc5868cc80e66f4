//! RFC 3339 timestamps (`metadata.creationTimestamp`) to and from milliseconds since the Unix
//! epoch.

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff][Z|±HH:MM]`; `None` if it is not one.
pub fn parse_millis(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(range)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3: String = frac[..digits]
            .chars()
            .chain("000".chars())
            .take(3)
            .collect();
        millis = first3.parse().ok()?;
        rest = &frac[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let t = rest.get(1..)?;
            if t.len() != 5 || t.as_bytes()[2] != b':' {
                return None;
            }
            let (h, m) = (t[..2].parse::<i64>().ok()?, t[3..].parse::<i64>().ok()?);
            sign * (h * 60 + m)
        }
    };
    let days = capstan_model::civil::days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    u64::try_from(seconds * 1000 + millis).ok()
}

/// `millis` as Kubernetes writes a timestamp: `YYYY-MM-DDTHH:MM:SSZ` (whole seconds, UTC).
pub fn format_millis(millis: u64) -> String {
    let seconds = i64::try_from(millis / 1000).unwrap_or(i64::MAX);
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = capstan_model::civil::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_what_it_parses() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_millis(1_732_576_865_500), "2024-11-25T23:21:05Z");
        for millis in [951_868_800_000, 1_709_164_799_000, 4_102_444_800_000] {
            assert_eq!(parse_millis(&format_millis(millis)), Some(millis));
        }
    }

    #[test]
    fn parses_kubernetes_timestamps() {
        assert_eq!(parse_millis("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_millis("2000-03-01T00:00:00Z"), Some(951_868_800_000));
        assert_eq!(
            parse_millis("2024-11-25T23:21:05Z"),
            Some(1_732_576_865_000)
        );
        assert_eq!(
            parse_millis("2024-11-25T23:21:05.5Z"),
            Some(1_732_576_865_500)
        );
        assert_eq!(
            parse_millis("2024-11-26T01:21:05+02:00"),
            Some(1_732_576_865_000)
        );
        assert_eq!(
            parse_millis("2024-11-25T22:21:05-01:00"),
            Some(1_732_576_865_000)
        );
        assert_eq!(parse_millis("nope"), None);
        assert_eq!(parse_millis("2024-13-25T23:21:05Z"), None);
        assert_eq!(parse_millis("2024-11-25T23:21:05"), None);
        assert_eq!(parse_millis("1969-12-31T23:59:59Z"), None);
    }
}
