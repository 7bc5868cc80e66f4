//! Equality-based label selectors (`a=b,c!=d,e,!f`), to match provider instances by their labels
//! the way the API server matches objects.

use std::collections::BTreeMap;

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A term is malformed.
    #[error("bad label selector term {0:?}")]
    Term(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Term>);

impl Selector {
    /// Parses `a=b,c==d,e!=f,g,!h`.
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let bad = || SelectorError::Term(raw.to_owned());
            let term = if let Some((k, v)) = raw.split_once("!=") {
                Term::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = raw.split_once("==").or_else(|| raw.split_once('=')) {
                Term::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = raw.strip_prefix('!') {
                Term::NotExists(k.trim().to_owned())
            } else {
                Term::Exists(raw.to_owned())
            };
            let key = match &term {
                Term::Equals(k, _)
                | Term::NotEquals(k, _)
                | Term::Exists(k)
                | Term::NotExists(k) => k,
            };
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(bad());
            }
            terms.push(term);
        }
        Ok(Self(terms))
    }

    /// The `key=value` terms, as labels: what an object must carry to be selected.
    pub fn equality_labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter_map(|term| match term {
                Term::Equals(k, v) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// Whether `labels` match.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|term| match term {
            Term::Equals(k, v) => labels.get(k) == Some(v),
            Term::NotEquals(k, v) => labels.get(k) != Some(v),
            Term::Exists(k) => labels.contains_key(k),
            Term::NotExists(k) => !labels.contains_key(k),
        })
    }
}

impl std::fmt::Display for Selector {
    /// The selector as [`Selector::parse`] reads it (`a=b,c!=d,e,!f`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, term) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match term {
                Term::Equals(k, v) => write!(f, "{k}={v}")?,
                Term::NotEquals(k, v) => write!(f, "{k}!={v}")?,
                Term::Exists(k) => write!(f, "{k}")?,
                Term::NotExists(k) => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let labels: BTreeMap<String, String> =
            [("a".into(), "1".into()), ("b".into(), "2".into())].into();
        assert!(Selector::parse("").unwrap().matches(&labels));
        assert!(Selector::parse("a=1").unwrap().matches(&labels));
        assert!(Selector::parse("a==1, b").unwrap().matches(&labels));
        assert!(!Selector::parse("a!=1").unwrap().matches(&labels));
        assert!(Selector::parse("!c").unwrap().matches(&labels));
        assert!(!Selector::parse("c").unwrap().matches(&labels));
        assert!(Selector::parse("=x").is_err());
    }

    #[test]
    fn displays_as_it_parses() {
        let text = "a=1,b!=2,c,!d";
        assert_eq!(Selector::parse(text).unwrap().to_string(), text);
        assert_eq!(Selector::parse(" a == 1 ").unwrap().to_string(), "a=1");
        assert_eq!(Selector::default().to_string(), "");
    }
}
