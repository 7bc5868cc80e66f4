//! Ownership: what an `owned` grant lets a provider reach, and the mark that says so.
//!
//! Kubernetes scopes a kubelet with the NodeRestriction admission plugin: it may modify only its
//! own Node and the pods bound to it. Capstan scopes a provider the same way, by a mark the host
//! alone writes: the label [`OWNER_LABEL`] (`capstan.dev/provider: <provider>`).
//!
//! - **Create**: the host stamps the mark on every object a provider creates ([`stamp`]),
//!   replacing whatever the body says there (a provider cannot plant an object under another's
//!   name).
//! - **Get, patch, delete** under an `owned` grant: the host reads the object first and refuses
//!   one without the provider's mark ([`Owner::check`]). A merge or apply patch then carries the
//!   object's `metadata.uid` (the API server refuses a patch whose uid is not the object's, so a
//!   deleted and recreated namesake is never reached) and a JSON patch opens with `test`
//!   operations on the uid and the mark ([`guard_patch`]); a delete carries a uid precondition.
//! - **List** under an `owned` grant: filtered by the mark ([`owned_selector`]), not refused.
//! - **Every patch**, whatever the scope: it may not set, change or remove the mark
//!   ([`guard_patch`]); a body that repeats the provider's own mark is allowed only on an object
//!   that already carries it.
//!
//! These are pure functions over request and response bodies; the `kube` proxy calls them. The
//! bodies are never parsed whole into documents: only `metadata` is, the rest of the top level
//! stays raw text, and a JSON patch's operations are read one at a time.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub use crate::api::labels::OWNER_LABEL;

/// The mark's JSON pointer (RFC 6901: `/` in the key is `~1`).
const MARK_POINTER: &str = "/metadata/labels/capstan.dev~1provider";

/// Why a body or an object is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    /// The body would set, change or remove the ownership mark.
    #[error("{0}")]
    Mark(String),
    /// The body is not what the call takes (not a JSON object, a JSON patch that is not an
    /// array of operations, labels that are not a map).
    #[error("{0}")]
    Invalid(String),
}

/// Who owns an object, and its uid, as read from the object's JSON.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owner {
    /// The value of the mark, if any.
    pub mark: Option<String>,
    /// The object's `metadata.uid`.
    pub uid: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ObjectHead {
    metadata: MetaHead,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaHead {
    uid: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

impl Owner {
    /// Reads the mark and uid of `object` (its JSON; everything but the metadata's uid and labels
    /// is skipped unread).
    pub fn of(object: &str) -> Result<Self, OwnershipError> {
        let head: ObjectHead = serde_json::from_str(object).map_err(|err| {
            OwnershipError::Invalid(format!("the object's metadata cannot be read: {err}"))
        })?;
        Ok(Self {
            mark: head
                .metadata
                .labels
                .and_then(|mut labels| labels.remove(OWNER_LABEL)),
            uid: head.metadata.uid,
        })
    }

    /// Whether `provider` owns the object.
    pub fn is(&self, provider: &str) -> bool {
        self.mark.as_deref() == Some(provider)
    }
}

/// The label selector a list of `provider`'s own objects uses: its mark, and the guest's
/// selector if it gave one (a comma is an AND).
pub fn owned_selector(guest: Option<&str>, provider: &str) -> String {
    match guest.map(str::trim).filter(|s| !s.is_empty()) {
        Some(guest) => format!("{OWNER_LABEL}={provider},{guest}"),
        None => format!("{OWNER_LABEL}={provider}"),
    }
}

/// A body's top level: `metadata` as a document, every other field as its raw text.
struct TopLevel<'a> {
    metadata: Option<Value>,
    rest: Vec<(String, &'a RawValue)>,
}

impl<'a> TopLevel<'a> {
    fn parse(body: &'a str, what: &str) -> Result<Self, OwnershipError> {
        let mut fields: BTreeMap<String, &'a RawValue> =
            serde_json::from_str(body).map_err(|err| {
                OwnershipError::Invalid(format!("{what} is not a JSON object: {err}"))
            })?;
        let metadata = match fields.remove("metadata") {
            Some(raw) => Some(serde_json::from_str(raw.get()).map_err(|err| {
                OwnershipError::Invalid(format!("{what}: metadata cannot be read: {err}"))
            })?),
            None => None,
        };
        Ok(Self {
            metadata,
            rest: fields.into_iter().collect(),
        })
    }

    /// The body again, with `metadata` as it is now.
    fn write(&self) -> Result<String, OwnershipError> {
        let mut out = String::from("{");
        let mut first = true;
        let mut push = |key: &str, raw: &str| -> Result<(), OwnershipError> {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&serde_json::to_string(key).map_err(internal)?);
            out.push(':');
            out.push_str(raw);
            Ok(())
        };
        if let Some(metadata) = &self.metadata {
            push(
                "metadata",
                &serde_json::to_string(metadata).map_err(internal)?,
            )?;
        }
        for (key, raw) in &self.rest {
            push(key, raw.get())?;
        }
        out.push('}');
        Ok(out)
    }

    /// The raw text of top-level field `key`.
    fn field(&self, key: &str) -> Option<&'a RawValue> {
        self.rest
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, raw)| *raw)
    }
}

fn internal(err: serde_json::Error) -> OwnershipError {
    OwnershipError::Invalid(format!("cannot write the body: {err}"))
}

/// `metadata` as a map (created if absent; `null` is refused: it would drop the mark).
fn metadata_map<'m>(
    metadata: &'m mut Option<Value>,
    what: &str,
) -> Result<&'m mut Map<String, Value>, OwnershipError> {
    match metadata.get_or_insert_with(|| Value::Object(Map::new())) {
        Value::Object(map) => Ok(map),
        Value::Null => Err(OwnershipError::Mark(format!(
            "{what} sets metadata to null, which would remove the ownership mark"
        ))),
        _ => Err(OwnershipError::Invalid(format!(
            "{what}: metadata is not an object"
        ))),
    }
}

/// What `labels` says about the mark: absent, or its value (`null` for a removal).
fn mark_in(labels: Option<&Value>, what: &str) -> Result<Option<Value>, OwnershipError> {
    match labels {
        None => Ok(None),
        Some(Value::Null) => Err(OwnershipError::Mark(format!(
            "{what} sets metadata.labels to null, which would remove the ownership mark"
        ))),
        Some(Value::Object(labels)) => Ok(labels.get(OWNER_LABEL).cloned()),
        Some(_) => Err(OwnershipError::Invalid(format!(
            "{what}: metadata.labels is not a map"
        ))),
    }
}

fn refuse_other_mark(mark: &Value, provider: &str, what: &str) -> Result<(), OwnershipError> {
    match mark {
        Value::String(value) if value == provider => Ok(()),
        Value::Null => Err(OwnershipError::Mark(format!(
            "{what} removes the label {OWNER_LABEL}, the ownership mark only the host writes"
        ))),
        other => Err(OwnershipError::Mark(format!(
            "{what} sets the label {OWNER_LABEL} to {other}, not to provider {provider:?}: the ownership mark only the host writes"
        ))),
    }
}

/// A body to create, stamped with `provider`'s mark: whatever the body says there is replaced
/// (a provider that writes its own name, or another's, gets the Provider's).
pub fn stamp(body: &str, provider: &str) -> Result<String, OwnershipError> {
    let what = "the object to create";
    let mut top = TopLevel::parse(body, what)?;
    let metadata = metadata_map(&mut top.metadata, what)?;
    if matches!(metadata.get("labels"), Some(Value::Null)) {
        metadata.remove("labels");
    }
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(labels) = labels else {
        return Err(OwnershipError::Invalid(format!(
            "{what}: metadata.labels is not a map"
        )));
    };
    labels.insert(OWNER_LABEL.to_owned(), Value::String(provider.to_owned()));
    top.write()
}

/// `spec.providerID` of a Node body, if it has one.
pub fn node_provider_id(body: &str) -> Result<Option<String>, OwnershipError> {
    #[derive(Deserialize, Default)]
    #[serde(default, rename_all = "camelCase")]
    struct Spec {
        #[serde(rename = "providerID")]
        provider_id: Option<String>,
    }
    let top = TopLevel::parse(body, "the Node to create")?;
    let Some(spec) = top.field("spec") else {
        return Ok(None);
    };
    let spec: Spec = serde_json::from_str(spec.get()).map_err(|err| {
        OwnershipError::Invalid(format!("the Node to create: spec cannot be read: {err}"))
    })?;
    Ok(spec.provider_id.filter(|id| !id.is_empty()))
}

/// The kind of patch, as [`guard_patch`] treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchShape {
    /// A JSON merge patch (RFC 7386).
    Merge,
    /// A JSON patch (RFC 6902).
    Json,
    /// A server-side apply configuration (a whole object).
    Apply,
}

/// A patch body checked and made safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardedPatch {
    /// The body to send.
    pub body: String,
    /// Whether the body names the mark (with the provider's own value): allowed only on an object
    /// that already carries it, so the caller must check ownership even under an `any` grant.
    pub names_mark: bool,
}

/// Checks a patch body of `provider` and returns the one to send: a body that would set, change
/// or remove the mark is refused; with `uid` (the object read under an `owned` grant), a merge or
/// apply patch carries `metadata.uid` and a JSON patch opens with `test`s of the uid and the mark,
/// so the API server applies it only to that object, still owned.
pub fn guard_patch(
    shape: PatchShape,
    body: &str,
    provider: &str,
    uid: Option<&str>,
) -> Result<GuardedPatch, OwnershipError> {
    match shape {
        PatchShape::Merge | PatchShape::Apply => guard_object_patch(shape, body, provider, uid),
        PatchShape::Json => guard_json_patch(body, provider, uid),
    }
}

fn guard_object_patch(
    shape: PatchShape,
    body: &str,
    provider: &str,
    uid: Option<&str>,
) -> Result<GuardedPatch, OwnershipError> {
    let what = match shape {
        PatchShape::Apply => "the apply patch",
        _ => "the merge patch",
    };
    let mut top = TopLevel::parse(body, what)?;
    if top.metadata.is_none() && uid.is_none() && shape == PatchShape::Merge {
        // Nothing about metadata, nothing to add: the guest's bytes go out as they are.
        return Ok(GuardedPatch {
            body: body.to_owned(),
            names_mark: false,
        });
    }
    let metadata = metadata_map(&mut top.metadata, what)?;
    let mark = mark_in(metadata.get("labels"), what)?;
    if let Some(mark) = &mark {
        refuse_other_mark(mark, provider, what)?;
    }
    let mut names_mark = mark.is_some();
    if shape == PatchShape::Apply {
        // An apply configuration that leaves the mark out would let the field manager drop it
        // once it owned the field: the mark is always part of it.
        let labels = metadata
            .entry("labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(labels) = labels {
            labels.insert(OWNER_LABEL.to_owned(), Value::String(provider.to_owned()));
        }
        names_mark = true;
    }
    if let Some(uid) = uid {
        metadata.insert("uid".to_owned(), Value::String(uid.to_owned()));
    }
    Ok(GuardedPatch {
        body: top.write()?,
        names_mark,
    })
}

/// The head of one JSON patch operation (its `value` is skipped unread).
#[derive(Deserialize)]
struct OpHead {
    op: String,
    path: String,
    #[serde(default)]
    from: Option<String>,
}

/// Whether a JSON pointer reaches the mark: the mark itself, the labels, the metadata or the
/// whole object.
fn reaches_mark(pointer: &str) -> bool {
    matches!(
        pointer,
        "" | "/" | "/metadata" | "/metadata/labels" | MARK_POINTER
    )
}

/// Reads a JSON patch one operation at a time, holding none.
struct OpsVisitor<'p> {
    provider: &'p str,
}

/// What a JSON patch's operations are.
#[derive(Default)]
struct OpsSummary {
    count: usize,
    names_mark: bool,
}

impl<'de> Visitor<'de> for OpsVisitor<'_> {
    type Value = Result<OpsSummary, OwnershipError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of JSON patch operations")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut summary = OpsSummary::default();
        while let Some(op) = seq.next_element::<OpHead>()? {
            summary.count += 1;
            let touches = reaches_mark(&op.path)
                || (op.op == "move" && op.from.as_deref().is_some_and(reaches_mark));
            if !touches {
                continue;
            }
            if op.op == "test" {
                summary.names_mark = summary.names_mark || op.path == MARK_POINTER;
                continue;
            }
            // Drain the rest so the error is ours, not a trailing-data one.
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Err(OwnershipError::Mark(format!(
                "the JSON patch's {} of {:?} reaches the label {OWNER_LABEL}, the ownership mark of provider {:?} that only the host writes",
                op.op,
                if reaches_mark(&op.path) {
                    &op.path
                } else {
                    op.from.as_deref().unwrap_or_default()
                },
                self.provider
            ))));
        }
        Ok(Ok(summary))
    }
}

fn guard_json_patch(
    body: &str,
    provider: &str,
    uid: Option<&str>,
) -> Result<GuardedPatch, OwnershipError> {
    let mut de = serde_json::Deserializer::from_str(body);
    let summary = serde::Deserializer::deserialize_seq(&mut de, OpsVisitor { provider })
        .and_then(|summary| de.end().map(|()| summary))
        .map_err(|err| {
            OwnershipError::Invalid(format!(
                "a JSON patch (RFC 6902) must be an array of operations: {err}"
            ))
        })??;
    let Some(uid) = uid else {
        return Ok(GuardedPatch {
            body: body.to_owned(),
            names_mark: summary.names_mark,
        });
    };
    let tests = serde_json::to_string(&[
        serde_json::json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        serde_json::json!({"op": "test", "path": MARK_POINTER, "value": provider}),
    ])
    .map_err(internal)?;
    // The body is a valid array: its first byte past whitespace is `[`.
    let inner = body.trim_start().strip_prefix('[').unwrap_or_default();
    let tests = tests.strip_suffix(']').unwrap_or(&tests);
    let body = if summary.count == 0 {
        format!("{tests}]")
    } else {
        format!("{tests},{inner}")
    };
    Ok(GuardedPatch {
        body,
        names_mark: summary.names_mark,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parsed(body: &str) -> Value {
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn reads_the_owner_and_uid() {
        let owner = Owner::of(
            r#"{"kind":"Node","metadata":{"name":"n","uid":"u1","labels":{"capstan.dev/provider":"kwok","a":"b"}},"status":{"x":[1,2,3]}}"#,
        )
        .unwrap();
        assert_eq!(owner.mark.as_deref(), Some("kwok"));
        assert_eq!(owner.uid.as_deref(), Some("u1"));
        assert!(owner.is("kwok"));
        assert!(!owner.is("other"));
        let unmarked = Owner::of(r#"{"metadata":{"name":"n"}}"#).unwrap();
        assert!(!unmarked.is("kwok"));
        assert!(Owner::of("3").is_err());
    }

    #[test]
    fn lists_are_filtered_by_the_mark() {
        assert_eq!(owned_selector(None, "kwok"), "capstan.dev/provider=kwok");
        assert_eq!(
            owned_selector(Some("  "), "kwok"),
            "capstan.dev/provider=kwok"
        );
        assert_eq!(
            owned_selector(Some("a=b,c in (d,e)"), "kwok"),
            "capstan.dev/provider=kwok,a=b,c in (d,e)"
        );
    }

    #[test]
    fn created_objects_are_stamped() {
        let body = stamp(
            r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","labels":{"a":"b"}},"spec":{"providerID":"kwok://n"}}"#,
            "kwok",
        )
        .unwrap();
        let v = parsed(&body);
        assert_eq!(v["metadata"]["labels"]["capstan.dev/provider"], "kwok");
        assert_eq!(v["metadata"]["labels"]["a"], "b");
        assert_eq!(v["spec"]["providerID"], "kwok://n");
        assert_eq!(v["kind"], "Node");
        // No metadata or no labels: created.
        let v = parsed(&stamp(r#"{"kind":"ConfigMap"}"#, "kwok").unwrap());
        assert_eq!(v["metadata"]["labels"]["capstan.dev/provider"], "kwok");
        // Whatever the body says in the mark, the Provider's name is written.
        for body in [
            r#"{"metadata":{"labels":{"capstan.dev/provider":"kwok"}}}"#,
            r#"{"metadata":{"labels":{"capstan.dev/provider":"clusterapi"}}}"#,
            r#"{"metadata":{"labels":{"capstan.dev/provider":null}}}"#,
            r#"{"metadata":{"labels":null}}"#,
        ] {
            let v = parsed(&stamp(body, "kwok-py").unwrap());
            assert_eq!(
                v["metadata"]["labels"]["capstan.dev/provider"], "kwok-py",
                "{body}"
            );
        }
        assert!(matches!(
            stamp(r#"{"metadata":null}"#, "kwok"),
            Err(OwnershipError::Mark(_))
        ));
        assert!(matches!(
            stamp("[0,0]", "kwok"),
            Err(OwnershipError::Invalid(_))
        ));
        assert!(matches!(
            stamp(r#"{"metadata":{"labels":[1]}}"#, "kwok"),
            Err(OwnershipError::Invalid(_))
        ));
    }

    #[test]
    fn a_node_body_names_its_provider_id() {
        assert_eq!(
            node_provider_id(r#"{"spec":{"providerID":"kwok://a","taints":[]}}"#).unwrap(),
            Some("kwok://a".into())
        );
        assert_eq!(
            node_provider_id(r#"{"spec":{"providerID":""}}"#).unwrap(),
            None
        );
        assert_eq!(node_provider_id(r#"{"metadata":{}}"#).unwrap(), None);
    }

    #[test]
    fn merge_patches_may_not_touch_the_mark() {
        for body in [
            r#"{"metadata":{"labels":{"capstan.dev/provider":null}}}"#,
            r#"{"metadata":{"labels":{"capstan.dev/provider":"other"}}}"#,
            r#"{"metadata":{"labels":null}}"#,
            r#"{"metadata":null}"#,
        ] {
            let err = guard_patch(PatchShape::Merge, body, "kwok", None).unwrap_err();
            assert!(matches!(err, OwnershipError::Mark(_)), "{body}: {err}");
        }
        // Other labels, the status, the spec: as the guest wrote them.
        let body = r#"{"status":{"conditions":[]}}"#;
        let guarded = guard_patch(PatchShape::Merge, body, "kwok", None).unwrap();
        assert_eq!(guarded.body, body);
        assert!(!guarded.names_mark);
        let guarded = guard_patch(
            PatchShape::Merge,
            r#"{"metadata":{"labels":{"a":null,"capstan.dev/provider":"kwok"}}}"#,
            "kwok",
            None,
        )
        .unwrap();
        assert!(guarded.names_mark);
    }

    #[test]
    fn owned_merge_patches_carry_the_uid() {
        let guarded = guard_patch(
            PatchShape::Merge,
            r#"{"spec":{"unschedulable":true},"metadata":{"labels":{"a":"b"}}}"#,
            "kwok",
            Some("u1"),
        )
        .unwrap();
        let v = parsed(&guarded.body);
        assert_eq!(v["metadata"]["uid"], "u1");
        assert_eq!(v["metadata"]["labels"]["a"], "b");
        assert_eq!(v["spec"]["unschedulable"], true);
        let v = parsed(
            &guard_patch(PatchShape::Merge, "{}", "kwok", Some("u1"))
                .unwrap()
                .body,
        );
        assert_eq!(v, json!({"metadata": {"uid": "u1"}}));
    }

    #[test]
    fn apply_patches_always_carry_the_mark() {
        let guarded = guard_patch(
            PatchShape::Apply,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"1"}}"#,
            "kwok",
            Some("u1"),
        )
        .unwrap();
        let v = parsed(&guarded.body);
        assert_eq!(v["metadata"]["labels"]["capstan.dev/provider"], "kwok");
        assert_eq!(v["metadata"]["uid"], "u1");
        assert_eq!(v["data"]["a"], "1");
        assert!(guarded.names_mark);
    }

    #[test]
    fn json_patches_may_not_reach_the_mark() {
        for body in [
            r#"[{"op":"remove","path":"/metadata/labels/capstan.dev~1provider"}]"#,
            r#"[{"op":"replace","path":"/metadata/labels","value":{}}]"#,
            r#"[{"op":"add","path":"/metadata","value":{}}]"#,
            r#"[{"op":"replace","path":"","value":{}}]"#,
            r#"[{"op":"add","path":"/spec/x","value":1},{"op":"move","from":"/metadata/labels","path":"/spec/y"}]"#,
            r#"[{"op":"copy","from":"/spec","path":"/metadata/labels/capstan.dev~1provider"}]"#,
        ] {
            let err = guard_patch(PatchShape::Json, body, "kwok", None).unwrap_err();
            assert!(matches!(err, OwnershipError::Mark(_)), "{body}: {err}");
        }
        // Copying the mark elsewhere reads it, nothing more.
        assert!(
            guard_patch(
                PatchShape::Json,
                r#"[{"op":"copy","from":"/metadata/labels/capstan.dev~1provider","path":"/metadata/annotations/x"}]"#,
                "kwok",
                None
            )
            .is_ok()
        );
        for body in ["{}", "[1]", r#"[{"path":"/a"}]"#, "[] []"] {
            assert!(
                matches!(
                    guard_patch(PatchShape::Json, body, "kwok", None),
                    Err(OwnershipError::Invalid(_))
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn owned_json_patches_open_with_tests() {
        let guarded = guard_patch(
            PatchShape::Json,
            r#" [{"op":"add","path":"/spec/unschedulable","value":true}]"#,
            "kwok",
            Some("u1"),
        )
        .unwrap();
        let ops = parsed(&guarded.body);
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/labels/capstan.dev~1provider", "value": "kwok"},
                {"op": "add", "path": "/spec/unschedulable", "value": true},
            ])
        );
        let empty = guard_patch(PatchShape::Json, "[]", "kwok", Some("u1")).unwrap();
        assert_eq!(parsed(&empty.body).as_array().map(Vec::len), Some(2));
    }

    fn arb_label_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(json!("kwok")),
            Just(json!("other")),
            Just(json!(7)),
            "[a-z]{0,5}".prop_map(Value::String),
        ]
    }

    proptest! {
        /// Whatever a merge patch says, what goes out leaves the mark as it was or as the
        /// provider's own.
        #[test]
        fn a_guarded_merge_patch_never_changes_the_mark(
            mark in prop::option::of(arb_label_value()),
            other in prop::option::of(arb_label_value()),
            uid in prop::option::of("[a-z0-9]{1,8}"),
        ) {
            let mut labels = Map::new();
            if let Some(mark) = mark.clone() { labels.insert(OWNER_LABEL.into(), mark); }
            if let Some(other) = other { labels.insert("x".into(), other); }
            let body = json!({"metadata": {"labels": labels}}).to_string();
            match guard_patch(PatchShape::Merge, &body, "kwok", uid.as_deref()) {
                Ok(guarded) => {
                    let out = parsed(&guarded.body);
                    let sent = out.pointer(MARK_POINTER);
                    prop_assert!(sent.is_none() || sent == Some(&json!("kwok")));
                    prop_assert_eq!(guarded.names_mark, sent.is_some());
                    if let Some(uid) = uid { prop_assert_eq!(&out["metadata"]["uid"], &json!(uid)); }
                }
                Err(_) => prop_assert!(mark.is_some() && mark != Some(json!("kwok"))),
            }
        }

        /// Stamping keeps every other field and always leaves the provider's mark.
        #[test]
        fn stamping_keeps_the_rest(
            keys in prop::collection::btree_map("[a-z]{1,6}", "[a-z0-9]{0,6}", 0..5),
        ) {
            let body = json!({"metadata": {"name": "n", "labels": keys.clone()}, "data": keys.clone()}).to_string();
            let out = parsed(&stamp(&body, "kwok").unwrap());
            prop_assert_eq!(&out["metadata"]["labels"][OWNER_LABEL], &json!("kwok"));
            for (k, v) in &keys {
                prop_assert_eq!(&out["metadata"]["labels"][k], &json!(v));
                prop_assert_eq!(&out["data"][k], &json!(v));
            }
        }
    }
}
