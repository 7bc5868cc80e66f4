//! The node class kinds a component declares: the CustomResourceDefinitions in its
//! `capstan:node-class-crds` custom section.
//!
//! A provider may serve node class kinds of its own (Karpenter's `KWOKNodeClass`, a cloud's
//! `CloudStackNodeClass`) besides `capstan.dev/v1alpha1 NodeClass`. It declares them by embedding
//! their CRDs in the component, in a custom section named [`SECTION`] (top level or in any nested
//! core module; the Rust SDK's `declare_node_class_crds!` writes it): a YAML (or JSON) list of
//! `apiextensions.k8s.io/v1` CustomResourceDefinitions, cluster-scoped. Each CRD declares one kind;
//! the host serves the version that is the CRD's storage version. Components without the section
//! (every 0.1 and 0.2 component built before) declare nothing and keep working as they did.

use serde::Serialize;

/// The custom section's name.
pub const SECTION: &str = "capstan:node-class-crds";

/// Why a declaration is refused (the component is then refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    /// The section is not a YAML or JSON list.
    #[error("the {SECTION} section is not a YAML list of CustomResourceDefinitions: {0}")]
    NotAList(String),
    /// An item is not a usable CRD.
    #[error("the {SECTION} section's item {index}: {message}")]
    BadCrd {
        /// Its position in the list.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// Two CRDs of one kind.
    #[error("the {SECTION} section declares {0} twice")]
    Duplicate(String),
}

/// One node class kind a component declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeclaredKind {
    /// API group (`karpenter.kwok.sh`).
    pub group: String,
    /// The version the host watches (the CRD's storage version).
    pub version: String,
    /// Kind (`KWOKNodeClass`).
    pub kind: String,
    /// Resource plural (`kwoknodeclasses`).
    pub plural: String,
    /// Whether the CRD has a status subresource (the host then keeps `Ready` there).
    pub status: bool,
    /// The CRD itself, for `capstan provider package`.
    #[serde(skip)]
    pub crd: serde_json::Value,
}

impl DeclaredKind {
    /// `Kind.group`, as people write it.
    pub fn group_kind(&self) -> String {
        format!("{}.{}", self.kind, self.group)
    }
}

/// The raw text of the section in `bytes`, if there is one (walking the component and its
/// nested modules in order, every section, so that a truncated or corrupt file fails here with the
/// parser's message). Two such sections are refused.
pub fn section(bytes: &[u8]) -> Result<Option<String>, String> {
    let mut found = None;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|err| err.to_string())?;
        if let wasmparser::Payload::CustomSection(reader) = payload
            && reader.name() == SECTION
        {
            if found.is_some() {
                return Err(format!("the component has more than one {SECTION} section"));
            }
            found = Some(
                String::from_utf8(reader.data().to_vec())
                    .map_err(|_| format!("the {SECTION} section is not UTF-8"))?,
            );
        }
    }
    Ok(found)
}

/// Parses the section's text into the kinds it declares.
pub fn parse(text: &str) -> Result<Vec<DeclaredKind>, DeclarationError> {
    let items: Vec<serde_json::Value> = if text.trim().is_empty() {
        Vec::new()
    } else {
        serde_saphyr::from_str(text).map_err(|err| DeclarationError::NotAList(err.to_string()))?
    };
    let mut kinds: Vec<DeclaredKind> = Vec::with_capacity(items.len());
    for (index, crd) in items.into_iter().enumerate() {
        let kind = declared(&crd).map_err(|message| DeclarationError::BadCrd { index, message })?;
        if kinds
            .iter()
            .any(|k| k.group == kind.group && k.kind == kind.kind)
        {
            return Err(DeclarationError::Duplicate(kind.group_kind()));
        }
        kinds.push(DeclaredKind { crd, ..kind });
    }
    Ok(kinds)
}

fn declared(crd: &serde_json::Value) -> Result<DeclaredKind, String> {
    let text = |path: &[&str]| -> Option<String> {
        let mut value = crd;
        for key in path {
            value = value.get(key)?;
        }
        value.as_str().map(str::to_owned)
    };
    if text(&["apiVersion"]).as_deref() != Some("apiextensions.k8s.io/v1")
        || text(&["kind"]).as_deref() != Some("CustomResourceDefinition")
    {
        return Err("not an apiextensions.k8s.io/v1 CustomResourceDefinition".to_owned());
    }
    let group = text(&["spec", "group"]).ok_or("spec.group is missing")?;
    let kind = text(&["spec", "names", "kind"]).ok_or("spec.names.kind is missing")?;
    let plural = text(&["spec", "names", "plural"]).ok_or("spec.names.plural is missing")?;
    if text(&["spec", "scope"]).as_deref() != Some("Cluster") {
        return Err(format!(
            "{kind}.{group} is not cluster-scoped (spec.scope: Cluster)"
        ));
    }
    if group == crate::api::nodeclass::GROUP {
        return Err(format!(
            "group {group} belongs to Capstan; a provider declares kinds of its own groups"
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(serde_json::Value::as_array)
        .ok_or("spec.versions is missing")?;
    let storage = versions
        .iter()
        .find(|v| v.get("storage").and_then(serde_json::Value::as_bool) == Some(true))
        .ok_or_else(|| format!("{kind}.{group} has no storage version"))?;
    let version = storage
        .get("name")
        .and_then(serde_json::Value::as_str)
        .ok_or("the storage version has no name")?
        .to_owned();
    let status = storage.pointer("/subresources/status").is_some();
    Ok(DeclaredKind {
        group,
        version,
        kind,
        plural,
        status,
        crd: serde_json::Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = r#"
- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata:
    name: kwoknodeclasses.karpenter.kwok.sh
  spec:
    group: karpenter.kwok.sh
    scope: Cluster
    names:
      kind: KWOKNodeClass
      plural: kwoknodeclasses
    versions:
      - name: v1alpha1
        served: true
        storage: true
        subresources:
          status: {}
        schema:
          openAPIV3Schema:
            type: object
"#;

    #[test]
    fn reads_the_kinds_of_the_crds() {
        let kinds = parse(CRD).unwrap();
        assert_eq!(kinds.len(), 1);
        let kind = &kinds[0];
        assert_eq!(
            (
                kind.group.as_str(),
                kind.version.as_str(),
                kind.kind.as_str()
            ),
            ("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass")
        );
        assert_eq!(kind.plural, "kwoknodeclasses");
        assert!(kind.status);
        assert_eq!(
            kind.crd["metadata"]["name"],
            "kwoknodeclasses.karpenter.kwok.sh"
        );
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_is_not_a_cluster_scoped_crd_of_its_own_group() {
        assert!(matches!(
            parse("{a: 1}"),
            Err(DeclarationError::NotAList(_))
        ));
        let namespaced = CRD.replace("scope: Cluster", "scope: Namespaced");
        assert!(
            matches!(parse(&namespaced), Err(DeclarationError::BadCrd { index: 0, ref message }) if message.contains("cluster-scoped"))
        );
        let capstan = CRD.replace("group: karpenter.kwok.sh", "group: capstan.dev");
        assert!(matches!(
            parse(&capstan),
            Err(DeclarationError::BadCrd { .. })
        ));
        let twice = format!("{CRD}{}", CRD.trim_start());
        assert_eq!(
            parse(&twice),
            Err(DeclarationError::Duplicate(
                "KWOKNodeClass.karpenter.kwok.sh".into()
            ))
        );
        let no_storage = CRD.replace("storage: true", "storage: false");
        assert!(parse(&no_storage).is_err());
    }
}
