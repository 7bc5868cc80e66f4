//! Selector terms (`serviceOfferingSelectorTerms`, `templateSelectorTerms`,
//! `networkSelectorTerms`), as the seed provider's CRD defines them: terms are ORed, the fields
//! of one term ANDed; `tags` needs every listed tag (`*` matches any value), `id` and `name`
//! match exactly, a template's `osType` matches its OS type name case-insensitively as a
//! substring (`Ubuntu 24.04` matches `Ubuntu 24.04 LTS`).
//!
//! CloudStack cannot tag service offerings; an offering term's `tags` match the offering's
//! details (`serviceofferingdetails`), and the keys `hosttags` and `storagetags` match one of
//! its host or storage tags.

use std::collections::BTreeMap;

use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::params::invalid;
use serde::{Deserialize, Serialize};

use crate::api::model::{Network, ServiceOffering, Tag, Template};

/// The most tags one term may list.
pub const MAX_TAGS: usize = 20;

/// A term selecting service offerings or networks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SelectorTerm {
    /// Every tag must be present (`*`: any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A term selecting templates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TemplateSelectorTerm {
    /// Every tag must be present (`*`: any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A substring of the OS type name, any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_type: Option<String>,
}

fn validate_common(
    at: &str,
    tags: &BTreeMap<String, String>,
    id: &Option<String>,
    name: &Option<String>,
    others: bool,
    fields: &str,
) -> Result<(), ProviderError> {
    if tags.is_empty() && id.is_none() && name.is_none() && !others {
        return Err(invalid(at, format!("expected at least one of {fields}")));
    }
    if tags.len() > MAX_TAGS {
        return Err(invalid(
            &format!("{at}.tags"),
            format!("at most {MAX_TAGS} tags, got {}", tags.len()),
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            return Err(invalid(
                &format!("{at}.tags"),
                "empty tag keys or values are not supported",
            ));
        }
    }
    for (field, value) in [("id", id), ("name", name)] {
        if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
            return Err(invalid(&format!("{at}.{field}"), "must not be empty"));
        }
    }
    Ok(())
}

impl SelectorTerm {
    /// Checks the term (`at` is its path, `serviceOfferingSelectorTerms[0]`).
    pub fn validate(&self, at: &str) -> Result<(), ProviderError> {
        validate_common(
            at,
            &self.tags,
            &self.id,
            &self.name,
            false,
            "tags, id, name",
        )
    }

    fn matches(&self, id: &str, name: &str, tags: &[Tag]) -> bool {
        self.id.as_deref().is_none_or(|want| want == id)
            && self.name.as_deref().is_none_or(|want| want == name)
            && has_tags(tags, &self.tags)
    }
}

impl TemplateSelectorTerm {
    /// Checks the term.
    pub fn validate(&self, at: &str) -> Result<(), ProviderError> {
        if self.os_type.as_ref().is_some_and(|v| v.trim().is_empty()) {
            return Err(invalid(&format!("{at}.osType"), "must not be empty"));
        }
        validate_common(
            at,
            &self.tags,
            &self.id,
            &self.name,
            self.os_type.is_some(),
            "tags, id, name, osType",
        )
    }

    fn matches(&self, t: &Template) -> bool {
        self.id.as_deref().is_none_or(|want| want == t.id)
            && self.name.as_deref().is_none_or(|want| want == t.name)
            && self
                .os_type
                .as_deref()
                .is_none_or(|want| t.os_type_name.to_lowercase().contains(&want.to_lowercase()))
            && has_tags(&t.tags, &self.tags)
    }
}

/// Whether `tags` has every wanted tag: keys and values compared ignoring ASCII case (as
/// CloudStack's database does), `*` matching any value.
pub fn has_tags(tags: &[Tag], wanted: &BTreeMap<String, String>) -> bool {
    wanted.iter().all(|(key, value)| {
        tags.iter().any(|t| {
            t.key.eq_ignore_ascii_case(key) && (value == "*" || t.value.eq_ignore_ascii_case(value))
        })
    })
}

/// The tags an offering term matches against: its details, and `hosttags` / `storagetags`
/// once per listed tag.
pub fn offering_tags(o: &ServiceOffering) -> Vec<Tag> {
    let mut out: Vec<Tag> = o
        .details
        .iter()
        .map(|(k, v)| Tag {
            key: k.clone(),
            value: v.as_str().map_or_else(|| v.to_string(), str::to_string),
        })
        .collect();
    for (key, list) in [("hosttags", &o.host_tags), ("storagetags", &o.storage_tags)] {
        for value in list.iter().flat_map(|l| l.split(',')).map(str::trim) {
            if !value.is_empty() {
                out.push(Tag {
                    key: key.to_string(),
                    value: value.to_string(),
                });
            }
        }
    }
    out
}

/// Whether any term selects the offering.
pub fn offering_selected(terms: &[SelectorTerm], o: &ServiceOffering) -> bool {
    let tags = offering_tags(o);
    terms.iter().any(|t| t.matches(&o.id, &o.name, &tags))
}

/// The index of the first term that selects the network.
pub fn network_term(terms: &[SelectorTerm], n: &Network) -> Option<usize> {
    terms
        .iter()
        .position(|t| t.matches(&n.id, &n.name, &n.tags))
}

/// Whether any term selects the template.
pub fn template_selected(terms: &[TemplateSelectorTerm], t: &Template) -> bool {
    terms.iter().any(|term| term.matches(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(k: &str, v: &str) -> Tag {
        Tag {
            key: k.into(),
            value: v.into(),
        }
    }

    fn term(json: &str) -> SelectorTerm {
        serde_json::from_str(json).unwrap()
    }

    fn network(id: &str, name: &str, tags: Vec<Tag>) -> Network {
        Network {
            id: id.into(),
            name: name.into(),
            zone_id: "z".into(),
            tags,
        }
    }

    #[test]
    fn tags_really_filter() {
        let tagged = network("n1", "a", vec![tag("env", "prod"), tag("team", "x")]);
        let other = network("n2", "b", vec![tag("env", "dev")]);
        let t = vec![term(r#"{"tags":{"env":"prod"}}"#)];
        assert_eq!(network_term(&t, &tagged), Some(0));
        assert_eq!(network_term(&t, &other), None);
        let any = vec![term(r#"{"tags":{"env":"*"}}"#)];
        assert!(network_term(&any, &other).is_some());
        let both = vec![term(r#"{"tags":{"env":"prod","team":"y"}}"#)];
        assert_eq!(network_term(&both, &tagged), None, "tags are ANDed");
        let case = vec![term(r#"{"tags":{"ENV":"Prod"}}"#)];
        assert!(network_term(&case, &tagged).is_some());
        let anded = vec![term(r#"{"tags":{"env":"prod"},"name":"b"}"#)];
        assert_eq!(network_term(&anded, &tagged), None, "fields are ANDed");
        let ored = vec![term(r#"{"name":"b"}"#), term(r#"{"id":"n1"}"#)];
        assert_eq!(network_term(&ored, &tagged), Some(1));
        assert_eq!(network_term(&ored, &other), Some(0));
    }

    #[test]
    fn templates_by_os_type() {
        let t = Template {
            id: "t".into(),
            name: "ubuntu".into(),
            os_type_name: "Ubuntu 24.04 LTS".into(),
            zone_id: "z".into(),
            arch: None,
            ready: true,
            created: String::new(),
            tags: vec![],
        };
        let term =
            |j: &str| -> Vec<TemplateSelectorTerm> { vec![serde_json::from_str(j).unwrap()] };
        assert!(template_selected(&term(r#"{"osType":"ubuntu 24.04"}"#), &t));
        assert!(!template_selected(&term(r#"{"osType":"Debian"}"#), &t));
        assert!(!template_selected(
            &term(r#"{"osType":"Ubuntu","tags":{"a":"b"}}"#),
            &t
        ));
        assert!(template_selected(
            &term(r#"{"id":"t","name":"ubuntu"}"#),
            &t
        ));
    }

    #[test]
    fn offerings_by_details_and_host_tags() {
        let o: ServiceOffering = serde_json::from_value(serde_json::json!({
            "id": "o", "name": "large", "hosttags": "compute, fast", "tags": "ssd",
            "serviceofferingdetails": {"tier": "gold"}
        }))
        .unwrap();
        let t = |j: &str| vec![term(j)];
        assert!(offering_selected(&t(r#"{"tags":{"hosttags":"fast"}}"#), &o));
        assert!(offering_selected(
            &t(r#"{"tags":{"storagetags":"ssd","tier":"gold"}}"#),
            &o
        ));
        assert!(!offering_selected(&t(r#"{"tags":{"hosttags":"gpu"}}"#), &o));
        assert!(!offering_selected(&t(r#"{"tags":{"tier":"silver"}}"#), &o));
        assert!(offering_selected(&t(r#"{"name":"large"}"#), &o));
    }

    #[test]
    fn validation() {
        assert!(SelectorTerm::default().validate("x").is_err());
        assert!(term(r#"{"tags":{"a":""}}"#).validate("x").is_err());
        assert!(term(r#"{"id":" "}"#).validate("x").is_err());
        assert!(term(r#"{"id":"a"}"#).validate("x").is_ok());
        let os: TemplateSelectorTerm = serde_json::from_str(r#"{"osType":"x"}"#).unwrap();
        assert!(os.validate("x").is_ok());
    }
}
