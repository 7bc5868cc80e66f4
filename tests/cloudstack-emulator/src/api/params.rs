//! A request's parameters: looked up by name in any case (the first value of a repeated name),
//! CloudStack's map parameters (`tags[0].key=k&tags[0].value=v`), booleans, UUID lists and
//! paging.

use std::collections::BTreeMap;

use serde_json::Value;

use super::error::ApiError;
use crate::catalog::Tag;

/// The decoded parameters of one request.
#[derive(Debug, Clone)]
pub struct Params {
    command: String,
    pairs: Vec<(String, String)>,
}

impl Params {
    /// Parameters of `command`.
    pub fn new(command: &str, pairs: Vec<(String, String)>) -> Self {
        Self {
            command: command.to_string(),
            pairs,
        }
    }

    /// The command.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The first value of `name` (any case), empty values as absent (CloudStack ignores them).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// `name`, or CloudStack's missing-parameter error.
    pub fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .ok_or_else(|| ApiError::missing(&self.command, name))
    }

    /// A boolean parameter (`true`, any case; anything else is false, as Java's
    /// `Boolean.valueOf`).
    pub fn flag(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// A non-negative integer parameter.
    pub fn number(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse::<u64>().map_err(|_| {
                    ApiError::param(format!(
                        "Unable to execute API command {} due to invalid value {v} for parameter {name}",
                        self.command.to_lowercase()
                    ))
                })
            })
            .transpose()
    }

    /// A comma-separated list.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.get(name)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The map parameter `name` (`name[i].key`, `name[i].value`), in index order. Entries
    /// without a key are skipped; a missing value is empty.
    pub fn map(&self, name: &str) -> Vec<Tag> {
        let prefix = format!("{}[", name.to_ascii_lowercase());
        let mut entries: BTreeMap<u32, (Option<String>, Option<String>)> = BTreeMap::new();
        for (n, v) in &self.pairs {
            let lower = n.to_ascii_lowercase();
            let Some(rest) = lower.strip_prefix(&prefix) else {
                continue;
            };
            let Some((index, field)) = rest.split_once("].") else {
                continue;
            };
            let Ok(index) = index.parse::<u32>() else {
                continue;
            };
            let entry = entries.entry(index).or_default();
            match field {
                "key" => {
                    entry.0.get_or_insert_with(|| v.clone());
                }
                "value" => {
                    entry.1.get_or_insert_with(|| v.clone());
                }
                _ => {}
            }
        }
        entries
            .into_values()
            .filter_map(|(key, value)| Some(Tag::new(key?, value.unwrap_or_default())))
            .collect()
    }

    /// Pages `items` by `page` and `pagesize` (1-based pages, as CloudStack does); all of them
    /// when `pagesize` is absent.
    pub fn page(&self, items: Vec<Value>) -> Result<Vec<Value>, ApiError> {
        let Some(size) = self.number("pagesize")? else {
            return Ok(items);
        };
        let page = self.number("page")?.unwrap_or(1).max(1);
        let size = usize::try_from(size).unwrap_or(usize::MAX).max(1);
        let start = usize::try_from(page - 1)
            .unwrap_or(usize::MAX)
            .saturating_mul(size);
        Ok(items.into_iter().skip(start).take(size).collect())
    }
}

/// Whether `tags` has every tag of `wanted` (keys and values compared ignoring case, as
/// CloudStack's database collation does).
pub fn has_tags(tags: &[Tag], wanted: &[Tag]) -> bool {
    wanted.iter().all(|w| {
        tags.iter()
            .any(|t| t.key.eq_ignore_ascii_case(&w.key) && t.value.eq_ignore_ascii_case(&w.value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::new(
            "listVirtualMachines",
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn names_match_in_any_case_and_first_value_wins() {
        let p = params(&[("zoneId", "a"), ("zoneid", "b"), ("empty", "")]);
        assert_eq!(p.get("zoneid"), Some("a"));
        assert_eq!(p.get("empty"), None);
        assert_eq!(
            p.required("id").unwrap_err().text,
            "Unable to execute API command listvirtualmachines due to missing parameter id"
        );
    }

    #[test]
    fn map_parameters_collect_by_index() {
        let p = params(&[
            ("tags[1].value", "v1"),
            ("tags[0].key", "k0"),
            ("tags[1].key", "k1"),
            ("tags[0].value", "v0"),
            ("tags[2].value", "orphan"),
            ("Tags[3].Key", "k3"),
        ]);
        assert_eq!(
            p.map("tags"),
            vec![
                Tag::new("k0", "v0"),
                Tag::new("k1", "v1"),
                Tag::new("k3", "")
            ]
        );
    }

    #[test]
    fn pages_are_one_based() {
        let items: Vec<Value> = (0..5).map(Value::from).collect();
        let p = params(&[("page", "2"), ("pagesize", "2")]);
        assert_eq!(
            p.page(items.clone()).unwrap(),
            vec![Value::from(2), Value::from(3)]
        );
        assert_eq!(params(&[]).page(items.clone()).unwrap().len(), 5);
        assert!(params(&[("pagesize", "x")]).page(items).is_err());
    }

    #[test]
    fn tag_matching_needs_every_tag() {
        let tags = vec![Tag::new("a", "1"), Tag::new("b", "2")];
        assert!(has_tags(&tags, &[Tag::new("A", "1")]));
        assert!(has_tags(&tags, &[Tag::new("a", "1"), Tag::new("b", "2")]));
        assert!(!has_tags(&tags, &[Tag::new("a", "2")]));
        assert!(has_tags(&tags, &[]));
    }
}
