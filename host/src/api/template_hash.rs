//! The NodePool template hash behind static drift (`karpenter.sh/nodepool-hash`), the same number
//! Karpenter writes, so a claim Karpenter stamped keeps its hash when Capstan takes over, and back.
//!
//! Karpenter hashes the NodePool's `spec.template` Go struct with
//! `github.com/mitchellh/hashstructure/v2` (`FormatV2`, FNV-1 64, lists as sets, zero values and nil
//! pointers skipped), honouring its `hash:"ignore"` tags: `requirements` do not count (they drift by
//! their own rule: a node whose labels still satisfy new requirements is not replaced), nor does the
//! raw spelling of `expireAfter` (its value does: `90m` and `1h30m` hash alike). What counts: the
//! template's labels and annotations, taints, startup taints, the node class reference,
//! `terminationGracePeriod` and `expireAfter` (`Never` counts as absent). [`template_hash`] walks the
//! same fields in the Go structs' order with the library's rules ([`hashstructure`]); the golden
//! vectors in `template_hash/vectors.json` come from Karpenter's own `NodePool.Hash()` at the pinned
//! version (`tests/conformance-karpenter/nodepool-hash`).
//!
//! One difference Capstan's types cannot see: a manifest that spells an empty list or map
//! (`taints: []`, `labels: {}`) is hashed by Karpenter as present and empty, by Capstan as absent
//! (Go clients, Karpenter's own among them, never send those: they omit empty fields).

use super::NodePool;
use super::duration;
use super::shared::Taint;

/// Karpenter's `NodePoolHashVersion`, written to `karpenter.sh/nodepool-hash-version`: the same
/// hash, so the same version. A claim stamped with another version (an older Capstan's
/// `capstan-v1`) is re-stamped with the current hash instead of being called drifted.
pub const HASH_VERSION: &str = "v3";

/// The template hash of `pool`, as a decimal number (the form Karpenter writes).
pub fn template_hash(pool: &NodePool) -> String {
    let template = &pool.spec.template;
    let spec = &template.spec;
    let mut meta = hashstructure::Struct::new("ObjectMeta");
    if let Some(m) = &template.metadata {
        meta.field("Labels", hashstructure::string_map(&m.labels));
        meta.field("Annotations", hashstructure::string_map(&m.annotations));
    }
    let mut s = hashstructure::Struct::new("NodeClaimTemplateSpec");
    s.field("Taints", taints(&spec.taints));
    s.field("StartupTaints", taints(&spec.startup_taints));
    // Requirements: `hash:"ignore"`.
    let r = &spec.node_class_ref;
    let mut class = hashstructure::Struct::new("NodeClassReference");
    class.field("Kind", hashstructure::string(&r.kind));
    class.field("Name", hashstructure::string(&r.name));
    class.field("Group", hashstructure::string(&r.group));
    s.field("NodeClassRef", Some(class.finish()));
    // `*metav1.Duration`: present (even `0s`) unless absent.
    s.field(
        "TerminationGracePeriod",
        spec.termination_grace_period.as_deref().map(|text| {
            let mut d = hashstructure::Struct::new("Duration");
            d.field("Duration", hashstructure::int64(nanos(text)));
            d.finish()
        }),
    );
    // `NillableDuration{*time.Duration, Raw}`: `Never` leaves both nil (a zero value, skipped); a
    // duration sets the pointer (hashed even when it is 0) and Raw (`hash:"ignore"`).
    s.field(
        "ExpireAfter",
        match duration::parse_nillable(&spec.expire_after) {
            Ok(Some(d)) => {
                let mut n = hashstructure::Struct::new("NillableDuration");
                n.field(
                    "Duration",
                    Some(hashstructure::int64_value(duration_nanos(d))),
                );
                Some(n.finish())
            }
            // `Never`, or a spelling the CRD's pattern refuses (Karpenter could not decode the pool).
            Ok(None) | Err(_) => None,
        },
    );
    let mut t = hashstructure::Struct::new("NodeClaimTemplate");
    t.field("ObjectMeta", meta.finish_if_any());
    t.field("Spec", Some(s.finish()));
    t.finish().to_string()
}

/// A `[]corev1.Taint` as a set (nil when empty).
fn taints(taints: &[Taint]) -> Option<u64> {
    hashstructure::set(taints.iter().map(|taint| {
        let mut s = hashstructure::Struct::new("Taint");
        s.field("Key", hashstructure::string(&taint.key));
        s.field(
            "Value",
            taint.value.as_deref().and_then(hashstructure::string),
        );
        s.field("Effect", hashstructure::string(taint.effect.as_str()));
        s.field(
            "TimeAdded",
            taint.time_added.as_ref().map(|t| {
                // `metav1.Time{time.Time}`, decoded in the controller's local zone (UTC in
                // Karpenter's image).
                let mut s = hashstructure::Struct::new("Time");
                s.field(
                    "Time",
                    Some(hashstructure::time_utc(
                        t.0.as_second(),
                        t.0.subsec_nanosecond(),
                    )),
                );
                s.finish()
            }),
        );
        s.finish()
    }))
}

/// A `time.Duration` in nanoseconds, saturating as Go's parser refuses to go past (the CRD's
/// pattern and the pool's validation keep real values far below).
fn duration_nanos(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// `metav1.Duration`'s nanoseconds for `text` (0 for a spelling the CRD refuses).
fn nanos(text: &str) -> i64 {
    duration::parse(text).map(duration_nanos).unwrap_or(0)
}

/// The part of `github.com/mitchellh/hashstructure/v2` Karpenter's NodePool hash uses: `FormatV2`
/// with FNV-1 64, `SlicesAsSets`, `IgnoreZeroValue` and `ZeroNil`. Each function returns the hash
/// of one Go value, or `None` for a zero value (a skipped field).
mod hashstructure {
    use std::collections::BTreeMap;

    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// FNV-1 (multiply, then xor), 64 bits: Go's `hash/fnv.New64`.
    fn fnv1(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .fold(OFFSET, |h, b| h.wrapping_mul(PRIME) ^ u64::from(*b))
    }

    fn fnv1_pair(a: u64, b: u64) -> u64 {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
        fnv1(&bytes)
    }

    /// `hashUpdateOrdered`.
    fn ordered(a: u64, b: u64) -> u64 {
        fnv1_pair(a, b)
    }

    /// `hashFinishUnordered`.
    fn harden(a: u64) -> u64 {
        fnv1(&a.to_le_bytes())
    }

    fn string_value(s: &str) -> u64 {
        fnv1(s.as_bytes())
    }

    /// A string field: skipped when empty.
    pub fn string(s: &str) -> Option<u64> {
        (!s.is_empty()).then(|| string_value(s))
    }

    /// An `int64` (or `time.Duration`) value, written little-endian.
    pub fn int64_value(v: i64) -> u64 {
        fnv1(&v.to_le_bytes())
    }

    /// An `int64` field: skipped when 0.
    pub fn int64(v: i64) -> Option<u64> {
        (v != 0).then(|| int64_value(v))
    }

    /// A `time.Time` in a zone at offset 0 that is not `time.UTC` itself (a `Local` of UTC): its
    /// `MarshalBinary` (version 1, seconds since year 1, nanoseconds, offset in minutes), hashed as
    /// bytes.
    pub fn time_utc(unix_seconds: i64, nanos: i32) -> u64 {
        const UNIX_TO_INTERNAL: i64 = 62_135_596_800;
        let mut b = Vec::with_capacity(15);
        b.push(1u8);
        b.extend_from_slice(&(unix_seconds + UNIX_TO_INTERNAL).to_be_bytes());
        b.extend_from_slice(&nanos.to_be_bytes());
        b.extend_from_slice(&0i16.to_be_bytes());
        fnv1(&b)
    }

    /// A `map[string]string` field: skipped when nil (empty here).
    pub fn string_map(map: &BTreeMap<String, String>) -> Option<u64> {
        if map.is_empty() {
            return None;
        }
        let h = map
            .iter()
            .map(|(k, v)| ordered(string_value(k), string_value(v)))
            .fold(0, |h, f| h ^ f);
        Some(harden(h))
    }

    /// A slice field hashed as a set (`SlicesAsSets`, no `set` tag: no hardening): skipped when
    /// nil (empty here).
    pub fn set(items: impl Iterator<Item = u64>) -> Option<u64> {
        let mut any = false;
        let h = items.fold(0, |h, item| {
            any = true;
            h ^ item
        });
        any.then_some(h)
    }

    /// A struct: its type name's hash, then, per field present, the field's name and value mixed
    /// in and hardened.
    pub struct Struct {
        h: u64,
        any: bool,
    }

    impl Struct {
        pub fn new(type_name: &str) -> Self {
            Self {
                h: string_value(type_name),
                any: false,
            }
        }

        pub fn field(&mut self, name: &str, value: Option<u64>) {
            if let Some(v) = value {
                self.h = harden(self.h ^ ordered(string_value(name), v));
                self.any = true;
            }
        }

        pub fn finish(self) -> u64 {
            self.h
        }

        /// The struct as a field: skipped when all its fields are zero.
        pub fn finish_if_any(self) -> Option<u64> {
            self.any.then_some(self.h)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pool(template: Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": template}
        }))
        .unwrap()
    }

    fn base() -> Value {
        json!({
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "capstan.dev", "kind": "NodeClass", "name": "c"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                "taints": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "b", "value": "1", "effect": "NoExecute"}
                ]
            }
        })
    }

    fn with(mut template: Value, path: &[&str], v: Value) -> Value {
        let mut at = &mut template;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = v;
        template
    }

    /// Karpenter's own `NodePool.Hash()` of each template (generated by
    /// `tests/conformance-karpenter/nodepool-hash/gen-vectors.sh` at the pinned version).
    #[test]
    fn karpenters_own_hashes() {
        let doc: Value = serde_json::from_str(include_str!("template_hash/vectors.json")).unwrap();
        assert_eq!(
            doc["hashVersion"], HASH_VERSION,
            "Karpenter's NodePoolHashVersion"
        );
        let cases = doc["cases"].as_array().unwrap();
        assert!(cases.len() >= 20, "{} cases", cases.len());
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let want = case["hash"].as_str().unwrap();
            assert!(!want.is_empty(), "{name}: no hash generated");
            assert_eq!(
                template_hash(&pool(case["template"].clone())),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn hashed_fields_change_the_hash_and_the_others_do_not() {
        let h = template_hash(&pool(base()));
        assert_eq!(h, template_hash(&pool(base())), "deterministic");
        assert!(h.parse::<u64>().is_ok(), "{h}");
        let same = [
            (
                "requirements",
                with(base(), &["spec", "requirements"], json!([])),
            ),
            (
                "taint order",
                with(
                    base(),
                    &["spec", "taints"],
                    json!([{"key": "b", "value": "1", "effect": "NoExecute"},
                           {"key": "a", "effect": "NoSchedule"}]),
                ),
            ),
            (
                "empty startup taints",
                with(base(), &["spec", "startupTaints"], json!([])),
            ),
            (
                "expireAfter spelled as the default",
                with(base(), &["spec", "expireAfter"], json!("720h")),
            ),
        ];
        for (what, template) in same {
            assert_eq!(
                template_hash(&pool(template)),
                h,
                "{what} must not change the hash"
            );
        }
        let different = [
            (
                "label",
                with(base(), &["metadata", "labels", "team"], json!("b")),
            ),
            (
                "annotation",
                with(base(), &["metadata", "annotations"], json!({"x": "y"})),
            ),
            (
                "taint value",
                with(
                    base(),
                    &["spec", "taints"],
                    json!([{"key": "a", "effect": "NoSchedule"},
                           {"key": "b", "value": "2", "effect": "NoExecute"}]),
                ),
            ),
            (
                "startup taint",
                with(
                    base(),
                    &["spec", "startupTaints"],
                    json!([{"key": "s", "effect": "NoSchedule"}]),
                ),
            ),
            (
                "node class",
                with(base(), &["spec", "nodeClassRef", "name"], json!("d")),
            ),
            (
                "expireAfter",
                with(base(), &["spec", "expireAfter"], json!("24h")),
            ),
            (
                "terminationGracePeriod",
                with(base(), &["spec", "terminationGracePeriod"], json!("1h")),
            ),
        ];
        for (what, template) in different {
            assert_ne!(
                template_hash(&pool(template)),
                h,
                "{what} must change the hash"
            );
        }
    }
}
