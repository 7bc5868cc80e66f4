//! Taints and tolerations, with Kubernetes' matching rules.

use std::fmt;

/// What a taint does to pods that do not tolerate it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// Every effect.
    pub const ALL: [TaintEffect; 3] = [
        TaintEffect::NoSchedule,
        TaintEffect::PreferNoSchedule,
        TaintEffect::NoExecute,
    ];

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    /// Parses the Kubernetes spelling.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == text)
    }
}

/// A node taint. An empty `value` means none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    /// `dedicated=gpu:NoSchedule`, or `dedicated:NoSchedule` without a value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

/// How a toleration matches a taint's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TolerationOperator {
    /// The values must be equal.
    #[default]
    Equal,
    /// Any value.
    Exists,
}

/// A pod toleration. An empty `key` with `Exists` tolerates every taint; `effect: None` matches
/// every effect.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Toleration {
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Tolerates taints with `key` and `value`, any effect.
    pub fn equal(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            operator: TolerationOperator::Equal,
            value: value.into(),
            effect: None,
        }
    }

    /// Tolerates taints with `key` (every key when empty), any value and effect.
    pub fn exists(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }
    }

    /// Restricts the toleration to one effect.
    pub fn with_effect(mut self, effect: TaintEffect) -> Self {
        self.effect = Some(effect);
        self
    }

    /// Kubernetes' `ToleratesTaint`.
    #[inline]
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.operator == TolerationOperator::Exists;
        }
        if self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// The first taint (of any effect, as Karpenter checks them) that no toleration tolerates.
#[inline]
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_rules() {
        let gpu = Taint::new("dedicated", "gpu", TaintEffect::NoSchedule);
        assert!(Toleration::equal("dedicated", "gpu").tolerates(&gpu));
        assert!(!Toleration::equal("dedicated", "cpu").tolerates(&gpu));
        assert!(Toleration::exists("dedicated").tolerates(&gpu));
        assert!(Toleration::exists("").tolerates(&gpu));
        assert!(
            !Toleration::equal("", "").tolerates(&gpu),
            "empty key needs Exists"
        );
        assert!(
            !Toleration::exists("dedicated")
                .with_effect(TaintEffect::NoExecute)
                .tolerates(&gpu)
        );
        assert!(
            Toleration::exists("dedicated")
                .with_effect(TaintEffect::NoSchedule)
                .tolerates(&gpu)
        );
        assert_eq!(gpu.to_string(), "dedicated=gpu:NoSchedule");
        assert_eq!(
            Taint::new("a", "", TaintEffect::NoExecute).to_string(),
            "a:NoExecute"
        );
    }

    #[test]
    fn effects_round_trip() {
        for effect in TaintEffect::ALL {
            assert_eq!(TaintEffect::parse(effect.as_str()), Some(effect));
        }
        assert_eq!(TaintEffect::parse("Nope"), None);
    }

    #[test]
    fn first_untolerated_checks_every_effect() {
        let taints = [
            Taint::new("a", "", TaintEffect::NoSchedule),
            Taint::new("b", "", TaintEffect::PreferNoSchedule),
        ];
        assert_eq!(
            first_untolerated(&taints, &[Toleration::exists("a")]),
            Some(&taints[1])
        );
        assert_eq!(first_untolerated(&taints, &[Toleration::exists("")]), None);
    }
}
