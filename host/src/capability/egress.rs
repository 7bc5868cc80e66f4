//! Egress grants: which HTTP endpoints a provider may call through `wasi:http/outgoing-handler`
//! (contract 0.2).
//!
//! A rule is `scheme://host[:port]`, as written in `Provider.spec.egress`:
//!
//! ```yaml
//! egress:
//!   - https://api.example.com          # port 443
//!   - http://127.0.0.1:8080
//!   - https://*.example.com:8443       # any subdomain of example.com, not example.com itself
//!   - https://api.example.com:*        # any port
//! ```
//!
//! - **Scheme**: `http`, `https`, or `*` (either). The port defaults to the scheme's (80, 443);
//!   with `*://` and no port, each scheme's own default.
//! - **Host**: a DNS name or IP literal (IPv6 in brackets), compared case-insensitively; `*`
//!   alone is any host; a leading `*.` label is one or more labels in front of the rest (as Spin
//!   writes wildcard hosts). No other wildcards.
//! - **Port**: a number or `*`.
//! - Nothing else: no user info, no path (a lone `/` is accepted), no query.
//!
//! Deny by default: a request is allowed only if one rule matches its scheme, host and port. The
//! host checks the scheme and authority of the request the guest hands over, which is where it
//! connects, never a `Host` header.

use std::fmt;

/// A scheme providers may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// The scheme's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The scheme's default port.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn parse(text: &str) -> Option<Self> {
        if text.eq_ignore_ascii_case("http") {
            Some(Scheme::Http)
        } else if text.eq_ignore_ascii_case("https") {
            Some(Scheme::Https)
        } else {
            None
        }
    }
}

/// Where a request goes: the scheme, host (lower case, IPv6 in brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The scheme.
    pub scheme: Scheme,
    /// The host, lower case; an IPv6 literal in brackets.
    pub host: String,
    /// The port (the scheme's default when the URI has none).
    pub port: u16,
}

impl Endpoint {
    /// The endpoint of a request URI, or none if it has no supported scheme or no host.
    pub fn of_uri(uri: &http::Uri) -> Option<Self> {
        let scheme = Scheme::parse(uri.scheme_str()?)?;
        let host = uri.host()?.trim_end_matches('.').to_ascii_lowercase();
        if host.is_empty() {
            return None;
        }
        Some(Self {
            scheme,
            host,
            port: uri.port_u16().unwrap_or(scheme.default_port()),
        })
    }

    /// The host without IPv6 brackets, to connect to or to name a TLS server.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SchemeRule {
    Any,
    One(Scheme),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    /// `*`.
    Any,
    /// `*.suffix`: stored as `.suffix`.
    Subdomains(String),
    Exact(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortRule {
    Any,
    /// The scheme's default.
    Default,
    One(u16),
}

/// One egress rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRule {
    text: String,
    scheme: SchemeRule,
    host: HostRule,
    port: PortRule,
}

/// Why an egress rule does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress rule {rule:?}: {reason}")]
pub struct EgressRuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong.
    pub reason: String,
}

impl EgressRule {
    /// Parses `scheme://host[:port]`.
    pub fn parse(text: &str) -> Result<Self, EgressRuleError> {
        let fail = |reason: &str| EgressRuleError {
            rule: text.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = text
            .trim()
            .split_once("://")
            .ok_or_else(|| fail("expected scheme://host[:port], e.g. https://api.example.com"))?;
        let scheme = match scheme {
            "*" => SchemeRule::Any,
            other => SchemeRule::One(
                Scheme::parse(other).ok_or_else(|| fail("the scheme must be http, https or *"))?,
            ),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(fail(
                "a rule names scheme, host and port only: no path or query",
            ));
        }
        if authority.contains('@') {
            return Err(fail("a rule has no user info"));
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| fail("malformed host"))?;
        let port = match port {
            None => PortRule::Default,
            Some("*") => PortRule::Any,
            Some(port) => PortRule::One(
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| fail("the port must be 1-65535 or *"))?,
            ),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let host = if host == "*" {
            HostRule::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            check_host(suffix).map_err(|reason| fail(&reason))?;
            HostRule::Subdomains(format!(".{suffix}"))
        } else {
            check_host(&host).map_err(|reason| fail(&reason))?;
            HostRule::Exact(host)
        };
        Ok(Self {
            text: text.trim().to_owned(),
            scheme,
            host,
            port,
        })
    }

    /// Whether this rule allows `endpoint`.
    pub fn allows(&self, endpoint: &Endpoint) -> bool {
        let scheme = match self.scheme {
            SchemeRule::Any => true,
            SchemeRule::One(scheme) => scheme == endpoint.scheme,
        };
        let host = match &self.host {
            HostRule::Any => true,
            HostRule::Exact(host) => *host == endpoint.host,
            HostRule::Subdomains(suffix) => {
                endpoint.host.len() > suffix.len() && endpoint.host.ends_with(suffix.as_str())
            }
        };
        let port = match self.port {
            PortRule::Any => true,
            PortRule::Default => endpoint.port == endpoint.scheme.default_port(),
            PortRule::One(port) => port == endpoint.port,
        };
        scheme && host && port
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `host[:port]`, `[v6][:port]`.
fn split_host_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            rest => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    match authority.split_once(':') {
        Some((host, port)) if !port.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None => Some((authority, None)),
    }
}

fn check_host(host: &str) -> Result<(), String> {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .map(|_| ())
            .map_err(|_| format!("{host} is not an IPv6 address"));
    }
    if host.is_empty() || host.len() > 253 {
        return Err("the host is empty or longer than 253 characters".into());
    }
    for label in host.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("{host} has an empty or overlong label"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "{host}: a host is letters, digits, '-' and '.' (a wildcard only as the whole \
                 first label, `*.`)"
            ));
        }
    }
    Ok(())
}

/// The egress rules of one provider, deny by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressRules {
    rules: Vec<EgressRule>,
}

impl EgressRules {
    /// No rules: every request is denied.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses every rule; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<Self, EgressRuleError> {
        Ok(Self {
            rules: rules
                .iter()
                .map(|rule| EgressRule::parse(rule.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether some rule allows `endpoint`.
    pub fn allows(&self, endpoint: &Endpoint) -> bool {
        self.rules.iter().any(|rule| rule.allows(endpoint))
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint::of_uri(&url.parse::<http::Uri>().unwrap()).unwrap()
    }

    fn allows(rule: &str, url: &str) -> bool {
        EgressRule::parse(rule).unwrap().allows(&endpoint(url))
    }

    #[test]
    fn exact_rules_match_scheme_host_and_default_port() {
        assert!(allows(
            "https://api.example.com",
            "https://api.example.com/v1?x=1"
        ));
        assert!(allows(
            "https://api.example.com",
            "https://API.Example.com:443/"
        ));
        assert!(!allows(
            "https://api.example.com",
            "http://api.example.com/"
        ));
        assert!(!allows(
            "https://api.example.com",
            "https://api.example.com:8443/"
        ));
        assert!(!allows(
            "https://api.example.com",
            "https://api.example.com.evil.io/"
        ));
        assert!(allows("http://127.0.0.1:8080", "http://127.0.0.1:8080/x"));
        assert!(!allows("http://127.0.0.1:8080", "http://127.0.0.1:8081/x"));
        assert!(!allows("http://127.0.0.1:8080", "http://127.0.0.1/x"));
        assert!(allows("http://[::1]:8080", "http://[::1]:8080/"));
        assert!(allows(
            "https://api.example.com:*",
            "https://api.example.com:1234/"
        ));
        assert!(allows("*://api.example.com", "http://api.example.com/"));
        assert!(allows("*://api.example.com", "https://api.example.com/"));
        assert!(!allows(
            "*://api.example.com",
            "https://api.example.com:80/"
        ));
        assert!(allows("https://*", "https://anything.at.all/"));
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let rule = "https://*.example.com:8443";
        assert!(allows(rule, "https://api.example.com:8443/"));
        assert!(allows(rule, "https://a.b.example.com:8443/"));
        assert!(!allows(rule, "https://example.com:8443/"));
        assert!(!allows(rule, "https://api.example.com/"));
        assert!(!allows(rule, "https://apiexample.com:8443/"));
        assert!(!allows(rule, "https://api.example.com.evil.io:8443/"));
        assert!(!allows(rule, "http://api.example.com:8443/"));
    }

    #[test]
    fn bad_rules_say_why() {
        for (rule, why) in [
            ("api.example.com", "scheme://"),
            ("ftp://api.example.com", "scheme"),
            ("https://api.example.com/v1", "no path"),
            ("https://user@api.example.com", "user info"),
            ("https://api.example.com:0", "port"),
            ("https://api.example.com:99999", "port"),
            ("https://api.*.com", "wildcard"),
            ("https://*example.com", "wildcard"),
            ("https://", "empty"),
            ("https://[::zz]", "IPv6"),
        ] {
            let err = EgressRule::parse(rule).unwrap_err().to_string();
            assert!(err.contains(why), "{rule}: {err}");
        }
        assert!(EgressRule::parse("https://api.example.com/").is_ok());
    }

    #[test]
    fn no_rules_deny_everything() {
        assert!(!EgressRules::none().allows(&endpoint("https://api.example.com/")));
        let rules =
            EgressRules::parse(&["http://127.0.0.1:8080", "https://*.example.com"]).unwrap();
        assert!(rules.allows(&endpoint("https://x.example.com/")));
        assert!(!rules.allows(&endpoint("https://example.org/")));
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
    }

    proptest! {
        /// An exact rule allows exactly its own endpoint.
        #[test]
        fn exact_rule_allows_only_itself(
            a in proptest::collection::vec(label(), 1..4),
            b in proptest::collection::vec(label(), 1..4),
            pa in 1u16.., pb in 1u16..,
        ) {
            let (ha, hb) = (a.join("."), b.join("."));
            let rule = EgressRule::parse(&format!("https://{ha}:{pa}")).unwrap();
            let own = endpoint(&format!("https://{ha}:{pa}/"));
            prop_assert!(rule.allows(&own));
            prop_assert_eq!(
                rule.allows(&endpoint(&format!("https://{hb}:{pb}/"))),
                ha == hb && pa == pb
            );
        }

        /// `*.suffix` allows a host iff it is `something.suffix`.
        #[test]
        fn wildcard_is_a_strict_suffix_match(
            suffix in proptest::collection::vec(label(), 1..3),
            host in proptest::collection::vec(label(), 1..5),
        ) {
            let (suffix, host) = (suffix.join("."), host.join("."));
            let rule = EgressRule::parse(&format!("https://*.{suffix}")).unwrap();
            let expected = host.ends_with(&format!(".{suffix}"));
            prop_assert_eq!(rule.allows(&endpoint(&format!("https://{host}/"))), expected);
        }

        /// Parsing never panics.
        #[test]
        fn parse_never_panics(text in "\\PC{0,40}") {
            let _ = EgressRule::parse(&text);
        }
    }
}
