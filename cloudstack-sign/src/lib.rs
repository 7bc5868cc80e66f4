//! CloudStack API request signing, exactly as CloudStack's API server (`ApiServer.verifyRequest`)
//! verifies it, for clients (the CloudStack provider) and for the test emulator.
//!
//! The string to sign is every request parameter except `signature` (the command, `apiKey`,
//! `response`, and with signature version 3 `signatureVersion=3` and `expires`), one
//! `name=value` per parameter name (its first value), sorted by name as Java sorts strings (so
//! case-sensitively: `Z` sorts before `a`), each value encoded as Java's `URLEncoder` does with
//! spaces as `%20` ([`java_url_encode`]) while the name stays as it is, joined with `&`, and the
//! whole string lower-cased. The signature is the Base64 of its HMAC-SHA1 under the secret key,
//! sent URL-encoded as `signature`. With `signatureVersion=3` the server also refuses a request
//! whose `expires` is missing, unparseable or in the past.
//!
//! Because the string is lower-cased, changing only the case of a value or name keeps the
//! signature valid: that is CloudStack's behaviour, and so this crate's.
//!
//! Pure (no I/O, no clock): callers pass the time. Builds for `wasm32-wasip2`.

mod encode;
mod expires;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha1::Sha1;

pub use encode::{form_decode, java_url_encode, parse_query};
pub use expires::{format_expires, parse_expires};

/// The `signature` parameter.
pub const SIGNATURE: &str = "signature";
/// The `apiKey` parameter (matched case-insensitively, as the server does).
pub const API_KEY: &str = "apiKey";
/// The `signatureVersion` parameter.
pub const SIGNATURE_VERSION: &str = "signatureVersion";
/// The `expires` parameter.
pub const EXPIRES: &str = "expires";
/// The signature version that makes the server check `expires`.
pub const VERSION_3: &str = "3";

/// Why a request does not verify (CloudStack answers each with HTTP 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No `signature` parameter.
    #[error("the request has no signature")]
    MissingSignature,
    /// No `apiKey` parameter.
    #[error("the request has no apiKey")]
    MissingApiKey,
    /// `signatureVersion=3` without `expires`.
    #[error("signature version 3 without an expires parameter")]
    MissingExpires,
    /// `expires` is not a date CloudStack parses.
    #[error("expires {0:?} is not a date CloudStack accepts (e.g. 2026-01-02T03:04:05+0000)")]
    BadExpires(String),
    /// `expires` is in the past.
    #[error("the request expired at {expires}")]
    Expired {
        /// The request's `expires`.
        expires: String,
    },
    /// No account has this API key.
    #[error("the apiKey does not map to a user")]
    UnknownApiKey,
    /// The signature does not match the one computed with the account's secret key.
    #[error("the signature does not match")]
    SignatureMismatch,
}

/// An account's API key and secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The API key, sent as `apiKey`.
    pub api_key: String,
    /// The secret key; never sent.
    pub secret_key: String,
}

impl Credentials {
    /// Credentials from the two keys.
    pub fn new(api_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Self {
            api_key: api_key.into(),
            secret_key: secret_key.into(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("api_key", &self.api_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// What a verified request said about its signing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The API key that signed it.
    pub api_key: String,
    /// `signatureVersion`, if sent.
    pub signature_version: Option<String>,
    /// `expires` in milliseconds since the epoch, when signature version 3 was used.
    pub expires_millis: Option<i64>,
}

/// Java's `String.compareTo`: by UTF-16 code units.
fn java_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The parameters the server signs: the first value of each name, `signature` (any case)
/// left out, sorted by name in Java's order.
fn signed_params(params: &[(String, String)]) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::with_capacity(params.len());
    for (name, value) in params {
        if name.eq_ignore_ascii_case(SIGNATURE) || out.iter().any(|(n, _)| *n == name.as_str()) {
            continue;
        }
        out.push((name, value));
    }
    out.sort_by(|a, b| java_order(a.0, b.0));
    out
}

/// The string the server computes the HMAC of, from decoded `(name, value)` pairs.
pub fn string_to_sign(params: &[(String, String)]) -> String {
    signed_params(params)
        .iter()
        .map(|(name, value)| format!("{name}={}", java_url_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
        .to_lowercase()
}

/// The Base64 HMAC-SHA1 of [`string_to_sign`] under `secret_key` (not yet URL-encoded).
pub fn compute_signature(secret_key: &str, params: &[(String, String)]) -> String {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha1>::new_from_slice(secret_key.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(string_to_sign(params).as_bytes());
    BASE64.encode(mac.finalize().into_bytes())
}

/// The full parameter list of a signed request: `params`, then `apiKey`, `signatureVersion=3`
/// and `expires` (`expires_unix_seconds` formatted by [`format_expires`]), then `signature`.
/// Any `signature`, `apiKey`, `signatureVersion` or `expires` already in `params` is replaced.
pub fn sign_params(
    params: &[(&str, &str)],
    credentials: &Credentials,
    expires_unix_seconds: i64,
) -> Vec<(String, String)> {
    let replaced = [SIGNATURE, API_KEY, SIGNATURE_VERSION, EXPIRES];
    let mut out: Vec<(String, String)> = params
        .iter()
        .filter(|(name, _)| !replaced.iter().any(|r| name.eq_ignore_ascii_case(r)))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    out.push((API_KEY.to_string(), credentials.api_key.clone()));
    out.push((SIGNATURE_VERSION.to_string(), VERSION_3.to_string()));
    out.push((EXPIRES.to_string(), format_expires(expires_unix_seconds)));
    let signature = compute_signature(&credentials.secret_key, &out);
    out.push((SIGNATURE.to_string(), signature));
    out
}

/// A query string (or form body) of `params`, names and values encoded with
/// [`java_url_encode`], so the server decodes exactly these values.
pub fn to_query(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(name, value)| format!("{}={}", java_url_encode(name), java_url_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Signs `params` (the command and its parameters) into a query string ready to append to
/// `/client/api?`: [`sign_params`] then [`to_query`].
pub fn sign(
    params: &[(&str, &str)],
    credentials: &Credentials,
    expires_unix_seconds: i64,
) -> String {
    to_query(&sign_params(params, credentials, expires_unix_seconds))
}

fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Verifies decoded request parameters as CloudStack's API server does, at `now_millis`
/// (milliseconds since the epoch). `secret_for` gives the secret key of an API key, or `None`
/// if no account has it. The checks run in the server's order: signature and API key present,
/// then (for `signatureVersion=3`) `expires` present, parseable and not before now, then the
/// account, then the signature.
pub fn verify(
    params: &[(String, String)],
    now_millis: i64,
    secret_for: impl FnOnce(&str) -> Option<String>,
) -> Result<Verified, Error> {
    let mut signature = None;
    let mut api_key = None;
    let mut version = None;
    let mut expires = None;
    for (name, value) in params {
        if name.eq_ignore_ascii_case(SIGNATURE) {
            signature.get_or_insert(value.as_str());
        }
    }
    // As the server does: the sorted names, the last of those matching each key in any case.
    for (name, value) in signed_params(params) {
        if name.eq_ignore_ascii_case(API_KEY) {
            api_key = Some(value);
        } else if name.eq_ignore_ascii_case(SIGNATURE_VERSION) {
            version = Some(value);
        } else if name.eq_ignore_ascii_case(EXPIRES) {
            expires = Some(value);
        }
    }
    let signature = signature.ok_or(Error::MissingSignature)?;
    let api_key = api_key.ok_or(Error::MissingApiKey)?;
    let mut expires_millis = None;
    if version == Some(VERSION_3) {
        let expires = expires.ok_or(Error::MissingExpires)?;
        let at = parse_expires(expires)?;
        if at < now_millis {
            return Err(Error::Expired {
                expires: expires.to_string(),
            });
        }
        expires_millis = Some(at);
    }
    let secret = secret_for(api_key).ok_or(Error::UnknownApiKey)?;
    if !constant_time_eq(signature, &compute_signature(&secret, params)) {
        return Err(Error::SignatureMismatch);
    }
    Ok(Verified {
        api_key: api_key.to_string(),
        signature_version: version.map(str::to_string),
        expires_millis,
    })
}

/// [`verify`] of a received query string or form body (decoded with [`parse_query`]).
pub fn verify_query(
    query: &str,
    now_millis: i64,
    secret_for: impl FnOnce(&str) -> Option<String>,
) -> Result<Verified, Error> {
    verify(&parse_query(query), now_millis, secret_for)
}

#[cfg(test)]
mod tests;
