//! CEL validation rules (`x-kubernetes-validations`) that several fields of the NodePool and
//! NodeClaim CRDs share: the label keys Karpenter reserves. Fields name them in
//! `#[x_kube(validation = ...)]`.

use kube::core::{Message, Rule};

use super::labels::{CAPACITY_TYPE, NODEPOOL};

/// The label key `key` (a CEL expression) is outside the `karpenter.sh` domain and its
/// subdomains, but for the two labels of that domain users may set, `karpenter.sh/capacity-type`
/// and `karpenter.sh/nodepool`.
pub fn outside_karpenter_domain(key: &str) -> Rule {
    Rule::new(format!(
        r"{key} in ['{CAPACITY_TYPE}', '{NODEPOOL}'] || !{key}.matches('^([^/]*\\.)?karpenter\\.sh/')"
    ))
    .message(r#"label domain "karpenter.sh" is restricted"#)
}

/// The label key `key` (a CEL expression) is not `label`.
pub fn not_label(key: &str, label: &str) -> Rule {
    Rule::new(format!("{key} != '{label}'")).message(Message::Message(format!(
        r#"label "{label}" is restricted"#
    )))
}

/// `rule` for every element of `self` (a list's items, a map's keys), which `rule` calls `x`.
pub fn for_all(rule: Rule) -> Rule {
    Rule {
        rule: format!("self.all(x, {})", rule.rule),
        ..rule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_as_karpenters() {
        assert_eq!(
            outside_karpenter_domain("self").rule,
            r"self in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.matches('^([^/]*\\.)?karpenter\\.sh/')"
        );
        let rule = for_all(not_label("x.key", NODEPOOL));
        assert_eq!(rule.rule, "self.all(x, x.key != 'karpenter.sh/nodepool')");
        assert_eq!(
            rule.message,
            Some(r#"label "karpenter.sh/nodepool" is restricted"#.into())
        );
    }
}
