//! Multi-document YAML manifests and unique names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kube::api::DynamicObject;

use crate::{Error, Result};

/// Parses a multi-document YAML manifest into objects, skipping empty documents.
///
/// `source_name` names the manifest in errors. Every document must have `apiVersion` and `kind`.
pub fn parse_yaml(source_name: &str, text: &str) -> Result<Vec<DynamicObject>> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| Error::Manifest {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
    let mut objects = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() || doc.as_object().is_some_and(|m| m.is_empty()) {
            continue;
        }
        let obj: DynamicObject = serde_json::from_value(doc).map_err(|e| Error::Manifest {
            source_name: source_name.to_string(),
            message: format!("document {i}: {e}"),
        })?;
        if obj.types.is_none() {
            return Err(Error::Manifest {
                source_name: source_name.to_string(),
                message: format!("document {i} has no apiVersion/kind"),
            });
        }
        objects.push(obj);
    }
    Ok(objects)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name that is unique across tests, test binaries and runs: `<prefix>-<8 base-36 chars>`,
/// at most 63 characters, lower case (valid as a namespace or object name).
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Mix time, pid and counter (splitmix64) so parallel tests and processes differ.
    let mut x =
        nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let mut suffix = String::with_capacity(8);
    for _ in 0..8 {
        let d = (x % 36) as u32;
        x /= 36;
        suffix.push(char::from_digit(d, 36).unwrap_or('0'));
    }
    let prefix: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63 - 9)
        .collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("t-{suffix}")
    } else {
        format!("{prefix}-{suffix}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_yaml() {
        let objs = parse_yaml(
            "inline",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n name: a\ndata:\n k: v\n---\n\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n",
        )
        .unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].types.as_ref().unwrap().kind, "ConfigMap");
        assert_eq!(objs[0].data["data"]["k"], "v");
        assert_eq!(objs[1].metadata.name.as_deref(), Some("b"));
    }

    #[test]
    fn rejects_objects_without_kind() {
        assert!(parse_yaml("x", "metadata: {name: a}\n").is_err());
        assert!(parse_yaml("x", "a: [unclosed\n").is_err());
    }

    #[test]
    fn unique_names_are_valid_and_distinct() {
        let a = unique_name("Test_NS");
        let b = unique_name("Test_NS");
        assert_ne!(a, b);
        assert!(a.starts_with("test-ns-"), "{a}");
        assert!(a.len() <= 63);
        let long = unique_name(&"x".repeat(100));
        assert!(long.len() <= 63, "{long}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
}
