//! The URL encodings on both sides of a CloudStack request: the server decodes a query string or
//! form body (`application/x-www-form-urlencoded`: `+` is a space) and re-encodes each value as
//! Java's `URLEncoder.encode(value, "UTF-8")` does, with `+` replaced by `%20`, before signing.

/// Encodes `s` as CloudStack does before signing: Java's `URLEncoder.encode(s, "UTF-8")` with
/// the `+` it writes for a space replaced by `%20`. Letters, digits and `.`, `-`, `*`, `_` stay
/// as they are; every other byte of the UTF-8 form becomes `%XX` (upper-case hex). Note `~` is
/// escaped (`%7E`), unlike RFC 3986.
pub fn java_url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'*' | b'_') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(hex_digit(b >> 4));
            out.push(hex_digit(b & 0x0f));
        }
    }
    out
}

fn hex_digit(n: u8) -> char {
    char::from(if n < 10 { b'0' + n } else { b'A' + n - 10 })
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes one `application/x-www-form-urlencoded` component as a servlet container does:
/// `+` is a space, `%XX` a byte; a `%` not followed by two hex digits stays as it is; bytes
/// that are not UTF-8 become U+FFFD.
pub fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = bytes.get(i + 1).copied().and_then(hex_value);
                let lo = bytes.get(i + 2).copied().and_then(hex_value);
                if let (Some(hi), Some(lo)) = (hi, lo) {
                    out.push(hi << 4 | lo);
                    i += 2;
                } else {
                    out.push(b'%');
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a query string or form body into decoded `(name, value)` pairs in the order they
/// came. Empty segments are skipped; a segment without `=` is a name with an empty value.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| match segment.split_once('=') {
            Some((name, value)) => (form_decode(name), form_decode(value)),
            None => (form_decode(segment), String::new()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_java_url_encoder_with_spaces_as_percent_20() {
        assert_eq!(java_url_encode("a b"), "a%20b");
        assert_eq!(java_url_encode("a+b"), "a%2Bb");
        assert_eq!(java_url_encode("Az09.-*_"), "Az09.-*_");
        assert_eq!(java_url_encode("~"), "%7E");
        assert_eq!(java_url_encode("/=&?,:"), "%2F%3D%26%3F%2C%3A");
        assert_eq!(java_url_encode("é"), "%C3%A9");
        assert_eq!(java_url_encode(""), "");
    }

    #[test]
    fn decodes_forms_like_a_servlet() {
        assert_eq!(form_decode("a+b%20c"), "a b c");
        assert_eq!(form_decode("%2B%3d"), "+=");
        assert_eq!(form_decode("100%"), "100%");
        assert_eq!(form_decode("%zz"), "%zz");
        assert_eq!(form_decode("%C3%A9"), "é");
    }

    #[test]
    fn parses_queries_in_order() {
        assert_eq!(
            parse_query("command=listZones&&flag&tags%5B0%5D.key=a+b"),
            vec![
                ("command".to_string(), "listZones".to_string()),
                ("flag".to_string(), String::new()),
                ("tags[0].key".to_string(), "a b".to_string()),
            ]
        );
    }
}
