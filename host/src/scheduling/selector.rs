//! Label selectors (`matchLabels` + `matchExpressions`), as pod affinity and topology spread use
//! them.

use std::collections::BTreeMap;

/// A `matchExpressions` operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

/// A label selector. The empty selector matches every set of labels; where Kubernetes allows a
/// null selector, the scheduling types use `Option<LabelSelector>` and `None` matches nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<SelectorRequirement>,
}

impl LabelSelector {
    /// Selects labels carrying every `key=value` given.
    pub fn labels<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            match_labels: pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Adds a `matchExpressions` entry.
    pub fn with_expression(
        mut self,
        key: impl Into<String>,
        operator: SelectorOperator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.match_expressions.push(SelectorRequirement {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator {
                    SelectorOperator::In => value.is_some_and(|v| e.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !e.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn matching() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::default().matches(&l));
        assert!(LabelSelector::labels([("app", "web")]).matches(&l));
        assert!(!LabelSelector::labels([("app", "db")]).matches(&l));
        let s =
            LabelSelector::default().with_expression("tier", SelectorOperator::In, ["front", "x"]);
        assert!(s.matches(&l));
        let s =
            LabelSelector::default().with_expression("tier", SelectorOperator::NotIn, ["front"]);
        assert!(!s.matches(&l));
        let s = LabelSelector::default().with_expression(
            "zzz",
            SelectorOperator::DoesNotExist,
            [""; 0],
        );
        assert!(s.matches(&l));
        let s = LabelSelector::default().with_expression("zzz", SelectorOperator::Exists, [""; 0]);
        assert!(!s.matches(&l));
    }
}
