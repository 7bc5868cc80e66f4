//! The API endpoint: `http(s)://host[:port]/path`, parsed strictly so that what the provider
//! connects to is exactly what the egress grants see.

use std::fmt;

/// A parsed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: String,
    /// `host` or `host:port` as written.
    pub authority: String,
    /// The path, starting with `/` (default `/client/api`).
    pub path: String,
}

/// Why an endpoint is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not `http://` or `https://`.
    #[error("{0:?}: must start with https:// or http://")]
    Scheme(String),
    /// No host.
    #[error("{0:?}: has no host")]
    NoHost(String),
    /// A query, fragment, user info, whitespace or a bad port.
    #[error("{url:?}: {problem}")]
    Malformed {
        /// The endpoint.
        url: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// The path CloudStack serves its API on.
pub const DEFAULT_PATH: &str = "/client/api";

impl Endpoint {
    /// Parses `url`; a missing or `/` path means `/client/api`.
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let malformed = |problem| EndpointError::Malformed {
            url: url.to_string(),
            problem,
        };
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
            ("https", rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            ("http", rest)
        } else {
            return Err(EndpointError::Scheme(url.to_string()));
        };
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(malformed("must not contain whitespace"));
        }
        if url.contains('?') || url.contains('#') {
            return Err(malformed("must not have a query or fragment"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(malformed("must not carry user info"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let Some((inner, after)) = bracketed.split_once(']') else {
                return Err(malformed("has an unclosed IPv6 bracket"));
            };
            match after {
                "" => (inner, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (inner, Some(port)),
                    None => return Err(malformed("has text after the IPv6 address")),
                },
            }
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
            return Err(malformed("has a bad port"));
        }
        if host.is_empty() {
            return Err(EndpointError::NoHost(url.to_string()));
        }
        let path = if path.is_empty() || path == "/" {
            DEFAULT_PATH.to_string()
        } else {
            path.to_string()
        };
        Ok(Self {
            scheme: scheme.to_string(),
            authority: authority.to_string(),
            path,
        })
    }

    /// Whether the scheme is `https`.
    pub fn is_https(&self) -> bool {
        self.scheme == "https"
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        let e = Endpoint::parse("https://cloud.example.com/client/api").unwrap();
        assert_eq!(
            (e.scheme.as_str(), e.authority.as_str(), e.path.as_str()),
            ("https", "cloud.example.com", "/client/api")
        );
        assert!(e.is_https());
        let e = Endpoint::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(e.authority, "127.0.0.1:8080");
        assert_eq!(e.path, DEFAULT_PATH);
        assert_eq!(e.to_string(), "http://127.0.0.1:8080/client/api");
        assert!(Endpoint::parse("http://[::1]:8080/api").is_ok());
    }

    #[test]
    fn rejects_what_it_cannot_connect_to_exactly() {
        for bad in [
            "ftp://x",
            "cloud.example.com",
            "https://",
            "https://:80/",
            "https://a:0/",
            "https://a:99999/",
            "https://a:x/",
            "https://u:p@a/",
            "https://a/client/api?x=1",
            "https://a/#f",
            "https://a b/",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
