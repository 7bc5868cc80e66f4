//! Fixed-point resource vectors: what pods request and what nodes offer.

use std::collections::BTreeMap;
use std::fmt;

use super::quantity::{self, QuantityError};

/// Resource name of CPU (held in millicores).
pub const CPU: &str = "cpu";
/// Resource name of memory (bytes).
pub const MEMORY: &str = "memory";
/// Resource name of local ephemeral storage (bytes).
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name of the pod count a node admits.
pub const PODS: &str = "pods";
/// Pseudo-resource of NodePool limits: the number of nodes.
pub const NODES: &str = "nodes";
/// Pseudo-resource of NodePool limits: what the pool's nodes cost per hour, in the providers'
/// price unit, held in thousandths (as `cpu` in millicores). Karpenter ignores a limit it has no
/// usage for, so a pool with this limit stays valid for it (docs/multi-provider.md).
pub const PRICE: &str = "capstan.dev/price-per-hour";
/// The limit a Provider's `spendLimitPerHour` sets over all its NodePools, shared by them: a
/// node counts its price in it as in [`PRICE`].
pub const PROVIDER_PRICE: &str = "capstan.dev/provider-price-per-hour";

/// Whether `name` is held in thousandths (`cpu`, [`PRICE`], [`PROVIDER_PRICE`]) rather than
/// whole units.
fn in_millis(name: &str) -> bool {
    name == CPU || name == PRICE || name == PROVIDER_PRICE
}

/// A resource vector in fixed point: CPU in millicores, memory and storage in bytes, pods as a
/// count, extended resources (`nvidia.com/gpu`, `hugepages-2Mi`, ...) in whole units.
///
/// A resource that is not mentioned is zero. Extended resources are kept sorted by name and never
/// hold zero, so two equal vectors compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
    extended: Vec<(String, i64)>,
}

impl Resources {
    /// CPU (millicores), memory (bytes) and pods.
    pub fn new(cpu_millis: i64, memory: i64, pods: i64) -> Self {
        Self {
            cpu_millis,
            memory,
            pods,
            ..Self::default()
        }
    }

    /// Parses a Kubernetes resource list (`{"cpu": "500m", "memory": "1Gi"}`).
    pub fn parse<'a, I>(list: I) -> Result<Self, QuantityError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut out = Self::default();
        for (name, text) in list {
            let value = if in_millis(name) {
                quantity::parse_millis(text)?
            } else {
                quantity::parse_units(text)?
            };
            out.set(name, value);
        }
        Ok(out)
    }

    /// Sets one resource in base units (millicores for `cpu`).
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.cpu_millis = value,
            MEMORY => self.memory = value,
            EPHEMERAL_STORAGE => self.ephemeral_storage = value,
            PODS => self.pods = value,
            _ => match self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
            {
                Ok(i) if value == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = value,
                Err(_) if value == 0 => {}
                Err(i) => self.extended.insert(i, (name.to_owned(), value)),
            },
        }
    }

    /// Builder form of [`Resources::set`].
    pub fn with(mut self, name: &str, value: i64) -> Self {
        self.set(name, value);
        self
    }

    /// One resource in base units; zero when absent.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_millis,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            _ => self
                .extended
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .map_or(0, |i| self.extended[i].1),
        }
    }

    /// The extended resources, sorted by name.
    pub fn extended(&self) -> &[(String, i64)] {
        &self.extended
    }

    /// Whether any extended resource is set.
    pub fn has_extended(&self) -> bool {
        !self.extended.is_empty()
    }

    /// Every non-zero resource, standard ones first, as `(name, base units)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        [
            (CPU, self.cpu_millis),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
        ]
        .into_iter()
        .chain(self.extended.iter().map(|(n, v)| (n.as_str(), *v)))
        .filter(|(_, v)| *v != 0)
    }

    /// Adds `other` in place (saturating).
    pub fn add(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.pods = self.pods.saturating_add(other.pods);
        for (name, value) in &other.extended {
            let sum = self.get(name).saturating_add(*value);
            self.set(name, sum);
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.add(other);
        out
    }

    /// Subtracts `other` in place (saturating; results may go negative).
    pub fn sub(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.saturating_sub(other.cpu_millis);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.pods = self.pods.saturating_sub(other.pods);
        for (name, value) in &other.extended {
            let diff = self.get(name).saturating_sub(*value);
            self.set(name, diff);
        }
    }

    /// `self - other`.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.sub(other);
        out
    }

    /// The per-resource maximum of `self` and `other`, in place.
    pub fn max_assign(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.pods = self.pods.max(other.pods);
        for (name, value) in &other.extended {
            if *value > self.get(name) {
                self.set(name, *value);
            }
        }
    }

    /// The per-resource minimum of `self` and `other`, in place (an extended resource one side
    /// lacks is zero).
    pub fn min_assign(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.min(other.cpu_millis);
        self.memory = self.memory.min(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.min(other.ephemeral_storage);
        self.pods = self.pods.min(other.pods);
        self.extended = self
            .extended
            .iter()
            .map(|(name, value)| (name.clone(), (*value).min(other.get(name))))
            .filter(|(_, value)| *value != 0)
            .collect();
    }

    /// Whether every resource of `self` is at most the same resource of `available` (a request
    /// for an extended resource the other side lacks does not fit).
    #[inline]
    pub fn fits_in(&self, available: &Resources) -> bool {
        self.cpu_millis <= available.cpu_millis
            && self.memory <= available.memory
            && self.ephemeral_storage <= available.ephemeral_storage
            && self.pods <= available.pods
            && (self.extended.is_empty()
                || self.extended.iter().all(|(n, v)| *v <= available.get(n)))
    }

    /// Whether `self + other` fits in `available`, without building the sum.
    #[inline]
    pub fn fits_with(&self, other: &Resources, available: &Resources) -> bool {
        self.cpu_millis.saturating_add(other.cpu_millis) <= available.cpu_millis
            && self.memory.saturating_add(other.memory) <= available.memory
            && self
                .ephemeral_storage
                .saturating_add(other.ephemeral_storage)
                <= available.ephemeral_storage
            && self.pods.saturating_add(other.pods) <= available.pods
            && self
                .extended
                .iter()
                .chain(&other.extended)
                .all(|(n, _)| self.get(n).saturating_add(other.get(n)) <= available.get(n))
    }

    /// The names of the resources of `self` that exceed `available`.
    pub fn exceeding<'a>(&'a self, available: &'a Resources) -> impl Iterator<Item = &'a str> {
        self.iter()
            .filter(move |(name, value)| *value > available.get(name))
            .map(|(name, _)| name)
    }
}

/// Formats one resource value for people: `cpu=1500m`, `memory=1Ti`, `pods=3`.
pub fn format_resource(name: &str, value: i64) -> String {
    match name {
        CPU => format!("{name}={}", quantity::format_millis(value)),
        PRICE | PROVIDER_PRICE => format!("{name}={}", format_price(value)),
        MEMORY | EPHEMERAL_STORAGE => format!("{name}={}", quantity::format_bytes(value)),
        _ if name.starts_with("hugepages-") => format!("{name}={}", quantity::format_bytes(value)),
        _ => format!("{name}={value}"),
    }
}

/// Thousandths of a price as a decimal (`2500` → `2.5`, `-1` → `-0.001`).
fn format_price(millis: i64) -> String {
    let sign = if millis < 0 { "-" } else { "" };
    let (whole, frac) = (millis.unsigned_abs() / 1000, millis.unsigned_abs() % 1000);
    if frac == 0 {
        format!("{sign}{whole}")
    } else {
        let digits = format!("{frac:03}");
        format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// A price per hour in [`PRICE`]'s thousandths, rounded up so that a sum of them never
/// undercounts.
pub fn price_millis(price: f64) -> i64 {
    if price.is_finite() && price > 0.0 {
        (price * 1000.0).ceil().min(i64::MAX as f64) as i64
    } else {
        0
    }
}

impl fmt::Display for Resources {
    /// `cpu=64, memory=1Ti, pods=1`; `{}` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, value) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            f.write_str(&format_resource(name, value))?;
        }
        if first {
            f.write_str("{}")?;
        }
        Ok(())
    }
}

/// NodePool limits or what remains of them: only the named resources are bounded, in base units
/// (millicores for `cpu`); `nodes` bounds the node count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceLimits(pub BTreeMap<String, i64>);

impl ResourceLimits {
    /// Parses a Kubernetes resource list (`{"cpu": "1000", "memory": "1000Gi"}`).
    pub fn parse<'a, I>(list: I) -> Result<Self, QuantityError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut out = BTreeMap::new();
        for (name, text) in list {
            let value = if in_millis(name) {
                quantity::parse_millis(text)?
            } else {
                quantity::parse_units(text)?
            };
            out.insert(name.to_owned(), value);
        }
        Ok(Self(out))
    }

    /// Builder: bounds `name` at `value` base units.
    pub fn with(mut self, name: &str, value: i64) -> Self {
        self.0.insert(name.to_owned(), value);
        self
    }

    /// The first bounded resource a node of `capacity` would exceed, if any.
    pub fn exceeded_by(&self, capacity: &Resources) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, remaining)| limit_amount(capacity, name) > **remaining)
            .map(|(name, _)| name.as_str())
    }

    /// Subtracts what a node of `capacity` uses from every bounded resource.
    pub fn consume(&mut self, capacity: &Resources) {
        for (name, remaining) in &mut self.0 {
            *remaining = remaining.saturating_sub(limit_amount(capacity, name));
        }
    }

    /// Gives back what a node of `capacity` used ([`ResourceLimits::consume`] undone).
    pub fn release(&mut self, capacity: &Resources) {
        for (name, remaining) in &mut self.0 {
            *remaining = remaining.saturating_add(limit_amount(capacity, name));
        }
    }

    /// Whether a node of capacity `a` uses no more of any bounded resource than one of `b`.
    pub fn no_larger(&self, a: &Resources, b: &Resources) -> bool {
        self.0
            .keys()
            .all(|name| limit_amount(a, name) <= limit_amount(b, name))
    }

    /// How much of these limits a node of `capacity` takes: the fractions of every bounded
    /// resource but `nodes` (the same for every node), summed. Smaller is a smaller node.
    pub fn share(&self, capacity: &Resources) -> f64 {
        self.0
            .iter()
            .filter(|(name, _)| name.as_str() != NODES)
            .map(|(name, limit)| limit_amount(capacity, name) as f64 / (*limit).max(1) as f64)
            .sum()
    }

    /// Each bounded resource's amount, `name=value` for people (`cpu=4, nodes=2`).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(name, value)| format_resource(name, *value))
            .collect();
        parts.join(", ")
    }
}

/// How much of limit `name` a node of `capacity` uses (`nodes` counts one per node).
fn limit_amount(capacity: &Resources, name: &str) -> i64 {
    match name {
        NODES => 1,
        // A node's price counts in its provider's spend limit as in its pool's.
        PROVIDER_PRICE => capacity.get(PRICE),
        _ => capacity.get(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        let r = Resources::parse([("cpu", "1500m"), ("memory", "1Gi"), ("nvidia.com/gpu", "2")])
            .unwrap();
        assert_eq!(r.cpu_millis, 1500);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.get("nvidia.com/gpu"), 2);
        assert_eq!(r.to_string(), "cpu=1500m, memory=1Gi, nvidia.com/gpu=2");
        assert_eq!(Resources::default().to_string(), "{}");
    }

    #[test]
    fn arithmetic_and_fit() {
        let a = Resources::new(1000, 100, 1).with("x", 1);
        let b = Resources::new(500, 50, 1);
        assert_eq!(a.plus(&b), Resources::new(1500, 150, 2).with("x", 1));
        assert_eq!(a.minus(&b).minus(&a), Resources::new(-500, -50, -1));
        assert!(b.fits_in(&a));
        assert!(b.fits_with(&b, &a.plus(&a)));
        assert!(!a.fits_with(&b, &a), "sum exceeds");
        assert!(
            !b.fits_with(&Resources::default().with("x", 2), &a),
            "extended sum exceeds"
        );
        assert!(b.fits_with(&Resources::default().with("x", 1), &a));
        assert!(
            !a.fits_in(&b),
            "extended resource missing on the other side"
        );
        assert_eq!(
            a.exceeding(&b).collect::<Vec<_>>(),
            vec!["cpu", "memory", "x"]
        );
        let mut m = b.clone();
        m.max_assign(&Resources::new(100, 1000, 0).with("y", 3));
        assert_eq!(m, Resources::new(500, 1000, 1).with("y", 3));
        // Setting zero removes an extended resource so equality stays structural.
        assert_eq!(a.clone().with("x", 0), Resources::new(1000, 100, 1));
    }

    #[test]
    fn limits() {
        let mut limits = ResourceLimits::default().with("cpu", 4000).with("nodes", 2);
        let node = Resources::new(2000, 1 << 30, 10);
        assert_eq!(limits.exceeded_by(&node), None);
        limits.consume(&node);
        limits.consume(&node);
        assert_eq!(limits.exceeded_by(&node), Some("cpu"));
        assert_eq!(limits.0["nodes"], 0);
        limits.release(&node);
        assert_eq!(limits.exceeded_by(&node), None);
        assert_eq!(limits.describe(), "cpu=2, nodes=1");
        let big = Resources::new(4000, 1 << 30, 10);
        assert!(limits.no_larger(&node, &big) && !limits.no_larger(&big, &node));
        assert!(limits.no_larger(&node, &node));
        // Memory is not bounded: a node with more of it is no larger.
        assert!(limits.no_larger(&Resources::new(2000, 1 << 40, 10), &node));
        assert!(limits.share(&node) < limits.share(&big));
    }

    #[test]
    fn prices_are_held_in_thousandths() {
        let limits = ResourceLimits::parse([(PRICE, "12.5"), ("cpu", "8")]).unwrap();
        assert_eq!(limits.0[PRICE], 12_500);
        assert_eq!(format_resource(PRICE, 12_500), format!("{PRICE}=12.5"));
        assert_eq!(format_resource(PRICE, 3), format!("{PRICE}=0.003"));
        assert_eq!(format_resource(PRICE, 7_000), format!("{PRICE}=7"));
        assert_eq!(format_resource(PRICE, -1_250), format!("{PRICE}=-1.25"));
        // Rounded up, so that sums never undercount.
        assert_eq!(price_millis(0.0336), 34);
        assert_eq!(price_millis(1.0), 1_000);
        assert_eq!(price_millis(f64::NAN), 0);
        assert_eq!(price_millis(-2.0), 0);
        let node = Resources::default().with(PRICE, price_millis(6.0));
        let mut left = limits.clone();
        left.consume(&node);
        left.consume(&node);
        assert_eq!(left.exceeded_by(&node), Some(PRICE));
        assert_eq!(left.0[PRICE], 500);
    }
}
