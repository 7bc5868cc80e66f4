//! NodeClass parameters: the provider-owned JSON object in `node-class.parameters`.
//!
//! [`parse`] deserializes it into the provider's own type and turns every failure into
//! [`ProviderError::Invalid`] with a message that names the field
//! (`parameters.instanceTypes[2].price: invalid type: string "x", expected f64 at line 1 column 40`).
//! Use `#[serde(deny_unknown_fields)]` on the type so typos are reported too.

use serde::de::DeserializeOwned;

use crate::ProviderError;

/// Parses NodeClass parameters (`""` counts as `{}`); anything but a JSON object is invalid.
pub fn parse<T: DeserializeOwned>(parameters: &str) -> Result<T, ProviderError> {
    let text = if parameters.trim().is_empty() {
        "{}"
    } else {
        parameters
    };
    if !text.trim_start().starts_with('{') {
        return Err(ProviderError::Invalid(
            "parameters: must be a JSON object".to_string(),
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            "parameters".to_string()
        } else {
            format!("parameters.{path}")
        };
        ProviderError::Invalid(format!("{at}: {}", e.into_inner()))
    })
}

/// A node class of a kind the provider serves (its component declares the kind's CRD with
/// [`declare_node_class_crds!`](crate::declare_node_class_crds)), as the host hands it over in
/// `node-class.parameters`: `{"apiVersion": "group/version", "kind": "Kind", "spec": {...}}`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedObject {
    /// `group/version` of the kind.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The object's `spec` (`{}` when it has none).
    #[serde(default)]
    pub spec: serde_json::Value,
}

impl ServedObject {
    /// The object's `spec` as the provider's own type; failures name the field
    /// (`spec.zone: ...`).
    pub fn spec<T: DeserializeOwned>(&self) -> Result<T, ProviderError> {
        serde_path_to_error::deserialize(&self.spec).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                "spec".to_string()
            } else {
                format!("spec.{path}")
            };
            ProviderError::Invalid(format!("{} {at}: {}", self.kind, e.into_inner()))
        })
    }
}

/// The served object in `parameters`, if they hold one: an object with exactly `apiVersion`,
/// `kind` and `spec`. (A `capstan.dev` NodeClass's parameters are the provider's own object; a
/// provider whose own schema has those three fields must tell them apart itself.)
pub fn served_object(parameters: &str) -> Option<ServedObject> {
    let value: serde_json::Value = serde_json::from_str(parameters).ok()?;
    let object = value.as_object()?;
    let shaped = object.len() == 3
        && object
            .get("apiVersion")
            .is_some_and(serde_json::Value::is_string)
        && object.get("kind").is_some_and(serde_json::Value::is_string)
        && object.get("spec").is_some_and(serde_json::Value::is_object);
    if !shaped {
        return None;
    }
    serde_json::from_value(value).ok()
}

/// An [`Invalid`](ProviderError::Invalid) error about one parameter field.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> ProviderError {
    ProviderError::Invalid(format!("parameters.{field}: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_objects_are_told_from_parameters() {
        let served = served_object(
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","spec":{"maxCpu":2}}"#,
        )
        .unwrap();
        assert_eq!(served.kind, "KWOKNodeClass");
        let params: Params = served.spec().unwrap();
        assert_eq!(params.max_cpu, Some(2));
        assert!(served_object(r#"{"maxCpu":2}"#).is_none());
        assert!(served_object(r#"{"apiVersion":"a/v1","kind":"K","spec":{},"x":1}"#).is_none());
        assert!(served_object("").is_none());
        let bad = served_object(r#"{"apiVersion":"a/v1","kind":"K","spec":{"maxCpu":"x"}}"#)
            .unwrap()
            .spec::<Params>()
            .unwrap_err();
        assert!(
            matches!(&bad, ProviderError::Invalid(m) if m.starts_with("K spec.maxCpu:")),
            "{bad:?}"
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Params {
        #[serde(default)]
        max_cpu: Option<u32>,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        #[allow(dead_code)]
        price: f64,
    }

    fn message(e: ProviderError) -> String {
        match e {
            ProviderError::Invalid(m) => m,
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn empty_means_defaults() {
        let p: Params = parse("").unwrap();
        assert!(p.max_cpu.is_none() && p.items.is_empty());
        let p: Params = parse("{\"maxCpu\": 4}").unwrap();
        assert_eq!(p.max_cpu, Some(4));
    }

    #[test]
    fn errors_name_the_field() {
        let m = message(parse::<Params>("[1]").unwrap_err());
        assert_eq!(m, "parameters: must be a JSON object");
        let m = message(parse::<Params>("{\"maxCpu\": -1}").unwrap_err());
        assert!(m.starts_with("parameters.maxCpu: "), "{m}");
        let m = message(parse::<Params>("{\"items\": [{\"price\": \"x\"}]}").unwrap_err());
        assert!(m.starts_with("parameters.items[0].price: "), "{m}");
        let m = message(parse::<Params>("{\"maxCPU\": 1}").unwrap_err());
        assert!(m.contains("unknown field `maxCPU`"), "{m}");
        let m = message(parse::<Params>("{").unwrap_err());
        assert!(m.starts_with("parameters"), "{m}");
        assert_eq!(
            message(invalid("zones", "empty")),
            "parameters.zones: empty"
        );
    }
}
