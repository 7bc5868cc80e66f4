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

/// An [`Invalid`](ProviderError::Invalid) error about one parameter field.
pub fn invalid(field: &str, problem: impl std::fmt::Display) -> ProviderError {
    ProviderError::Invalid(format!("parameters.{field}: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
