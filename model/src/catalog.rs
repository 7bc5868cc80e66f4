//! The flat instance-type catalog a provider's `get-instance-types` returns, and
//! [`CatalogBuilder`], which fills it, interning every string, requirement and list so each is
//! stored once.
//!
//! The types mirror the WIT `catalog` record (`wit/provider.wit`) field for field; the guest SDK
//! and the host convert them to and from their generated bindings by moving the lists. Building
//! here, outside either binding, lets the host's benchmarks and tests run the very builder the
//! guests use.

use crate::quantity::Quantity;
use crate::requirements::{Operator, Selector};

/// A range of one of the catalog's lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First index.
    pub start: u32,
    /// Number of entries.
    pub len: u32,
}

/// The operators the contract carries: Kubernetes' six. Karpenter v1's `Gte`/`Lte` travel as
/// `Gt`/`Lt` one further out ([`InstanceTypeBuilder::requirement_of`] converts them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CatalogOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl From<CatalogOperator> for Operator {
    fn from(operator: CatalogOperator) -> Self {
        match operator {
            CatalogOperator::In => Operator::In,
            CatalogOperator::NotIn => Operator::NotIn,
            CatalogOperator::Exists => Operator::Exists,
            CatalogOperator::DoesNotExist => Operator::DoesNotExist,
            CatalogOperator::Gt => Operator::Gt,
            CatalogOperator::Lt => Operator::Lt,
        }
    }
}

/// A requirement: `key`, `values` (a span of [`Catalog::values`]) and `min_values`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogRequirement {
    /// The key, an index into [`Catalog::strings`].
    pub key: u32,
    /// The operator.
    pub operator: CatalogOperator,
    /// The values, a span of [`Catalog::values`] (string indices).
    pub values: Span,
    /// `minValues`.
    pub min_values: Option<u32>,
}

/// A resource amount in thousandths of its unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount {
    /// The resource name, an index into [`Catalog::strings`].
    pub name: u32,
    /// Thousandths of the unit (`MilliValue()`).
    pub milli_value: u64,
}

/// An offering: where and how an instance type can be bought, at what price.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogOffering {
    /// The zone, a string index.
    pub zone: u32,
    /// The capacity type, a string index.
    pub capacity_type: u32,
    /// Price per hour.
    pub price: f64,
    /// Whether it can be launched now.
    pub available: bool,
    /// Further requirements, a span of [`Catalog::requirement_lists`].
    pub requirements: Span,
}

/// What a node of the type reserves (spans of [`Catalog::amounts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogOverhead {
    pub kube_reserved: Span,
    pub system_reserved: Span,
    pub eviction_threshold: Span,
}

/// An instance type.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogInstanceType {
    /// The name, a string index.
    pub name: u32,
    /// Requirements every node of the type meets, a span of [`Catalog::requirement_lists`].
    pub requirements: Span,
    /// Offerings, a span of [`Catalog::offerings`].
    pub offerings: Span,
    /// Capacity, a span of [`Catalog::amounts`].
    pub capacity: Span,
    /// Overhead.
    pub overhead: CatalogOverhead,
}

/// Instance types as flat tables: every string, requirement and list stored once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    pub strings: Vec<String>,
    /// String indices, spanned by requirements.
    pub values: Vec<u32>,
    pub requirements: Vec<CatalogRequirement>,
    /// Requirement indices, spanned by instance types and offerings.
    pub requirement_lists: Vec<u32>,
    pub amounts: Vec<Amount>,
    pub offerings: Vec<CatalogOffering>,
    pub instance_types: Vec<CatalogInstanceType>,
}

/// Implements the conversions between this flat catalog and a binding generator's types of the
/// WIT `catalog` record, given the module that holds them under their WIT names (`Catalog`,
/// `CatalogRequirement`, `CatalogOffering`, `CatalogInstanceType`, `CatalogOverhead`, `Amount`,
/// `Span`, `Operator`): `From<catalog::Catalog>` for the binding's `Catalog` (the lists move, the
/// small records are rebuilt) and `From` both ways between [`CatalogOperator`] and `Operator`.
/// The guest SDK invokes it for wit-bindgen's types, the host for wasmtime's.
///
/// ```ignore
/// capstan_model::catalog_conversions!(crate::runtime::types);
/// ```
#[macro_export]
macro_rules! catalog_conversions {
    ($($types:ident)::+) => {
        impl ::core::convert::From<$crate::catalog::Catalog> for $($types)::+::Catalog {
            fn from(c: $crate::catalog::Catalog) -> Self {
                use $($types)::+ as wit;
                let span = |s: $crate::catalog::Span| wit::Span {
                    start: s.start,
                    len: s.len,
                };
                wit::Catalog {
                    strings: c.strings,
                    values: c.values,
                    requirements: c
                        .requirements
                        .into_iter()
                        .map(|r| wit::CatalogRequirement {
                            key: r.key,
                            operator: r.operator.into(),
                            values: span(r.values),
                            min_values: r.min_values,
                        })
                        .collect(),
                    requirement_lists: c.requirement_lists,
                    amounts: c
                        .amounts
                        .into_iter()
                        .map(|a| wit::Amount {
                            name: a.name,
                            milli_value: a.milli_value,
                        })
                        .collect(),
                    offerings: c
                        .offerings
                        .into_iter()
                        .map(|o| wit::CatalogOffering {
                            zone: o.zone,
                            capacity_type: o.capacity_type,
                            price: o.price,
                            available: o.available,
                            requirements: span(o.requirements),
                        })
                        .collect(),
                    instance_types: c
                        .instance_types
                        .into_iter()
                        .map(|it| wit::CatalogInstanceType {
                            name: it.name,
                            requirements: span(it.requirements),
                            offerings: span(it.offerings),
                            capacity: span(it.capacity),
                            overhead: wit::CatalogOverhead {
                                kube_reserved: span(it.overhead.kube_reserved),
                                system_reserved: span(it.overhead.system_reserved),
                                eviction_threshold: span(it.overhead.eviction_threshold),
                            },
                        })
                        .collect(),
                }
            }
        }

        impl ::core::convert::From<$crate::catalog::CatalogOperator> for $($types)::+::Operator {
            fn from(operator: $crate::catalog::CatalogOperator) -> Self {
                use $crate::catalog::CatalogOperator as C;
                use $($types)::+::Operator as W;
                match operator {
                    C::In => W::In,
                    C::NotIn => W::NotIn,
                    C::Exists => W::Exists,
                    C::DoesNotExist => W::DoesNotExist,
                    C::Gt => W::Gt,
                    C::Lt => W::Lt,
                }
            }
        }

        impl ::core::convert::From<$($types)::+::Operator> for $crate::catalog::CatalogOperator {
            fn from(operator: $($types)::+::Operator) -> Self {
                use $crate::catalog::CatalogOperator as C;
                use $($types)::+::Operator as W;
                match operator {
                    W::In => C::In,
                    W::NotIn => C::NotIn,
                    W::Exists => C::Exists,
                    W::DoesNotExist => C::DoesNotExist,
                    W::Gt => C::Gt,
                    W::Lt => C::Lt,
                }
            }
        }
    };
}

/// One resource of a resource list: its name and quantity.
pub type Entry<'q> = (&'q str, &'q Quantity);

/// A quantity in thousandths of its unit, as a catalog [`Amount`] holds it (negative quantities
/// are 0, larger than `u64::MAX` saturates).
pub fn milli_value(quantity: &Quantity) -> u64 {
    u64::try_from(quantity.millis().max(0)).unwrap_or(u64::MAX)
}

/// A 64-bit multiplicative hash over words (FxHash's step), finished with a mixer so the high bits
/// the table uses are well spread. Collisions are resolved by comparing entries.
#[derive(Clone, Copy)]
struct Hash(u64);

impl Hash {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    fn new() -> Self {
        Hash(0)
    }

    fn word(self, word: u64) -> Self {
        Hash((self.0.rotate_left(5) ^ word).wrapping_mul(Self::K))
    }

    fn bytes(mut self, bytes: &[u8]) -> Self {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self = self.word(u64::from_le_bytes(word));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        for (t, b) in tail.iter_mut().zip(rest) {
            *t = *b;
        }
        self.word(u64::from_le_bytes(tail)).word(bytes.len() as u64)
    }

    fn finish(self) -> u32 {
        let h = (self.0 ^ (self.0 >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        (h >> 32) as u32
    }
}

/// An open-addressing table of entry ids (dense, from 0): `slots` holds `id + 1` (0 is empty), a
/// power of two in size and at most half full; `hashes[id]` is each entry's hash.
#[derive(Default)]
struct Dedup {
    slots: Vec<u32>,
    hashes: Vec<u32>,
}

impl Dedup {
    fn with_capacity(entries: usize) -> Self {
        let mut d = Dedup {
            slots: Vec::new(),
            hashes: Vec::with_capacity(entries),
        };
        d.resize((entries * 2).next_power_of_two().max(16));
        d
    }

    fn resize(&mut self, size: usize) {
        self.slots.clear();
        self.slots.resize(size, 0);
        let mask = size - 1;
        for (id, hash) in self.hashes.iter().enumerate() {
            let mut i = *hash as usize & mask;
            while let Some(slot) = self.slots.get_mut(i) {
                if *slot == 0 {
                    *slot = id as u32 + 1;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
    }

    /// The id of an existing entry with this hash that `same` accepts, or `None` after registering
    /// `new_id` (which must be the next dense id) under the hash.
    fn find_or_add(
        &mut self,
        hash: Hash,
        new_id: u32,
        mut same: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        if (self.hashes.len() + 1) * 2 > self.slots.len() {
            self.resize((self.slots.len() * 2).max(16));
        }
        let hash = hash.finish();
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            match self.slots.get(i) {
                Some(&0) | None => break,
                Some(&slot) => {
                    let id = slot - 1;
                    if self.hashes.get(id as usize) == Some(&hash) && same(id) {
                        return Some(id);
                    }
                }
            }
            i = (i + 1) & mask;
        }
        if let Some(slot) = self.slots.get_mut(i) {
            *slot = new_id + 1;
        }
        self.hashes.push(hash);
        None
    }
}

fn span(start: usize, len: usize) -> Span {
    Span {
        start: start as u32,
        len: len as u32,
    }
}

fn slice_of<'a, T>(list: &'a [T], s: &Span) -> &'a [T] {
    let start = s.start as usize;
    list.get(start..start + s.len as usize).unwrap_or(&[])
}

fn same_amounts(a: &[Amount], b: &[Amount]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.name == y.name && x.milli_value == y.milli_value)
}

fn operator_code(operator: &CatalogOperator) -> u64 {
    match operator {
        CatalogOperator::In => 0,
        CatalogOperator::NotIn => 1,
        CatalogOperator::Exists => 2,
        CatalogOperator::DoesNotExist => 3,
        CatalogOperator::Gt => 4,
        CatalogOperator::Lt => 5,
    }
}

/// Builds a `Catalog`: add instance types with [`CatalogBuilder::instance_type`], then call
/// [`CatalogBuilder::finish`]. Every distinct string, requirement, requirement list and resource
/// list is stored once, however often it is used.
pub struct CatalogBuilder {
    catalog: Catalog,
    strings: Dedup,
    requirements: Dedup,
    requirement_lists: Dedup,
    requirement_list_spans: Vec<Span>,
    amount_lists: Dedup,
    amount_list_spans: Vec<Span>,
    scratch_values: Vec<u32>,
    scratch_requirements: Vec<u32>,
    scratch_offering_requirements: Vec<u32>,
    scratch_amounts: [Vec<Amount>; 4],
}

impl Default for CatalogBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl CatalogBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty builder with room for about `instance_types` types (a few offerings, requirements
    /// and amounts each) before it reallocates.
    pub fn with_capacity(instance_types: usize) -> Self {
        let n = instance_types;
        CatalogBuilder {
            catalog: Catalog {
                strings: Vec::with_capacity(n + 16),
                values: Vec::with_capacity(n + 16),
                requirements: Vec::with_capacity(n + 16),
                requirement_lists: Vec::with_capacity(4 * n),
                amounts: Vec::with_capacity(4 * n),
                offerings: Vec::with_capacity(8 * n),
                instance_types: Vec::with_capacity(n),
            },
            strings: Dedup::with_capacity(n + 16),
            requirements: Dedup::with_capacity(n + 16),
            requirement_lists: Dedup::with_capacity(n),
            requirement_list_spans: Vec::with_capacity(n),
            amount_lists: Dedup::with_capacity(n),
            amount_list_spans: Vec::with_capacity(n),
            scratch_values: Vec::new(),
            scratch_requirements: Vec::new(),
            scratch_offering_requirements: Vec::new(),
            scratch_amounts: [Vec::new(), Vec::new(), Vec::new(), Vec::new()],
        }
    }

    /// The index of `text` in the string table, adding it if new.
    pub fn string(&mut self, text: &str) -> u32 {
        let hash = Hash::new().bytes(text.as_bytes());
        let strings = &self.catalog.strings;
        let id = strings.len() as u32;
        match self.strings.find_or_add(hash, id, |i| {
            strings.get(i as usize).is_some_and(|s| s == text)
        }) {
            Some(existing) => existing,
            None => {
                self.catalog.strings.push(String::from(text));
                id
            }
        }
    }

    /// The index of a requirement in the requirement table, adding it if new. `values` are
    /// strings; `Gt`/`Lt` take one integer, `Exists`/`DoesNotExist` none.
    pub fn requirement(
        &mut self,
        key: &str,
        operator: impl Into<CatalogOperator>,
        values: &[&str],
        min_values: Option<u32>,
    ) -> u32 {
        let operator = operator.into();
        let key = self.string(key);
        let mut scratch = std::mem::take(&mut self.scratch_values);
        scratch.clear();
        for v in values {
            let v = self.string(v);
            scratch.push(v);
        }
        let id = self.requirement_of_indices(key, operator, &scratch, min_values);
        self.scratch_values = scratch;
        id
    }

    /// [`CatalogBuilder::requirement`] with string indices.
    pub fn requirement_of_indices(
        &mut self,
        key: u32,
        operator: impl Into<CatalogOperator>,
        values: &[u32],
        min_values: Option<u32>,
    ) -> u32 {
        let operator = operator.into();
        let mut hash = Hash::new()
            .word(u64::from(key))
            .word(operator_code(&operator))
            .word(min_values.map_or(0, |m| u64::from(m) + 1));
        for v in values {
            hash = hash.word(u64::from(*v));
        }
        let catalog = &self.catalog;
        let id = catalog.requirements.len() as u32;
        let found = self.requirements.find_or_add(hash, id, |i| {
            catalog.requirements.get(i as usize).is_some_and(|r| {
                r.key == key
                    && operator_code(&r.operator) == operator_code(&operator)
                    && r.min_values == min_values
                    && slice_of(&catalog.values, &r.values) == values
            })
        });
        if let Some(existing) = found {
            return existing;
        }
        let start = self.catalog.values.len();
        self.catalog.values.extend_from_slice(values);
        self.catalog.requirements.push(CatalogRequirement {
            key,
            operator,
            values: span(start, values.len()),
            min_values,
        });
        id
    }

    /// A span of `requirement-lists` holding `list`, shared with an identical earlier list.
    fn requirement_list(&mut self, list: &[u32]) -> Span {
        if list.is_empty() {
            return span(0, 0);
        }
        let mut hash = Hash::new();
        for r in list {
            hash = hash.word(u64::from(*r));
        }
        let lists = &self.catalog.requirement_lists;
        let spans = &self.requirement_list_spans;
        let id = spans.len() as u32;
        let found = self.requirement_lists.find_or_add(hash, id, |i| {
            spans
                .get(i as usize)
                .is_some_and(|s| slice_of(lists, s) == list)
        });
        let s = match found.and_then(|i| self.requirement_list_spans.get(i as usize)) {
            Some(s) => s,
            None => {
                let start = self.catalog.requirement_lists.len();
                self.catalog.requirement_lists.extend_from_slice(list);
                self.requirement_list_spans.push(span(start, list.len()));
                return span(start, list.len());
            }
        };
        span(s.start as usize, s.len as usize)
    }

    /// A span of `amounts` holding `list`, shared with an identical earlier list.
    fn amount_list(&mut self, list: &[Amount]) -> Span {
        if list.is_empty() {
            return span(0, 0);
        }
        let mut hash = Hash::new();
        for a in list {
            hash = hash.word(u64::from(a.name)).word(a.milli_value);
        }
        let amounts = &self.catalog.amounts;
        let spans = &self.amount_list_spans;
        let id = spans.len() as u32;
        let found = self.amount_lists.find_or_add(hash, id, |i| {
            spans
                .get(i as usize)
                .is_some_and(|s| same_amounts(slice_of(amounts, s), list))
        });
        let s = match found.and_then(|i| self.amount_list_spans.get(i as usize)) {
            Some(s) => s,
            None => {
                let start = self.catalog.amounts.len();
                for a in list {
                    self.catalog.amounts.push(Amount {
                        name: a.name,
                        milli_value: a.milli_value,
                    });
                }
                self.amount_list_spans.push(span(start, list.len()));
                return span(start, list.len());
            }
        };
        span(s.start as usize, s.len as usize)
    }

    /// Starts an instance type named `name`; it is added to the catalog when the returned builder
    /// is dropped.
    pub fn instance_type(&mut self, name: &str) -> InstanceTypeBuilder<'_> {
        let name = self.string(name);
        self.scratch_requirements.clear();
        self.scratch_offering_requirements.clear();
        for list in &mut self.scratch_amounts {
            list.clear();
        }
        let first_offering = self.catalog.offerings.len();
        InstanceTypeBuilder {
            catalog: self,
            name,
            first_offering,
        }
    }

    /// How many instance types have been added.
    pub fn len(&self) -> usize {
        self.catalog.instance_types.len()
    }

    /// Whether no instance type has been added.
    pub fn is_empty(&self) -> bool {
        self.catalog.instance_types.is_empty()
    }

    /// The catalog.
    pub fn finish(self) -> Catalog {
        self.catalog
    }
}

/// Which of an instance type's resource lists an amount goes to.
const CAPACITY: usize = 0;
const KUBE_RESERVED: usize = 1;
const SYSTEM_RESERVED: usize = 2;
const EVICTION_THRESHOLD: usize = 3;

/// One instance type being built (see [`CatalogBuilder::instance_type`]); added to the catalog
/// when dropped. Requirements, offerings and amounts keep the order they are added in.
pub struct InstanceTypeBuilder<'a> {
    catalog: &'a mut CatalogBuilder,
    name: u32,
    first_offering: usize,
}

impl InstanceTypeBuilder<'_> {
    /// The catalog being built (to intern strings or requirements by hand).
    pub fn catalog(&mut self) -> &mut CatalogBuilder {
        self.catalog
    }

    /// Adds a requirement every node of this type meets.
    pub fn requirement(
        &mut self,
        key: &str,
        operator: impl Into<CatalogOperator>,
        values: &[&str],
        min_values: Option<u32>,
    ) -> &mut Self {
        let r = self.catalog.requirement(key, operator, values, min_values);
        self.catalog.scratch_requirements.push(r);
        self
    }

    /// Adds `key In [values]`.
    pub fn requirement_in(&mut self, key: &str, values: &[&str]) -> &mut Self {
        self.requirement(key, CatalogOperator::In, values, None)
    }

    /// Adds a requirement from the catalog's table (an index [`CatalogBuilder::requirement`]
    /// returned).
    pub fn requirement_index(&mut self, requirement: u32) -> &mut Self {
        self.catalog.scratch_requirements.push(requirement);
        self
    }

    /// Closes the previous offering's extra requirements.
    fn close_offering(&mut self) {
        if self.catalog.scratch_offering_requirements.is_empty() {
            return;
        }
        let list = std::mem::take(&mut self.catalog.scratch_offering_requirements);
        let s = self.catalog.requirement_list(&list);
        if let Some(last) = self.catalog.catalog.offerings.last_mut() {
            last.requirements = s;
        }
        self.catalog.scratch_offering_requirements = list;
        self.catalog.scratch_offering_requirements.clear();
    }

    /// Adds an offering: `zone`, `capacity_type`, hourly `price` and whether it can be launched
    /// now.
    pub fn offering(
        &mut self,
        zone: &str,
        capacity_type: &str,
        price: f64,
        available: bool,
    ) -> &mut Self {
        self.close_offering();
        let zone = self.catalog.string(zone);
        let capacity_type = self.catalog.string(capacity_type);
        self.catalog.catalog.offerings.push(CatalogOffering {
            zone,
            capacity_type,
            price,
            available,
            requirements: span(0, 0),
        });
        self
    }

    /// [`InstanceTypeBuilder::offering`] with the zone and capacity type as string indices
    /// ([`CatalogBuilder::string`]): for large catalogs, intern them once instead of per offering.
    pub fn offering_at(
        &mut self,
        zone: u32,
        capacity_type: u32,
        price: f64,
        available: bool,
    ) -> &mut Self {
        self.close_offering();
        self.catalog.catalog.offerings.push(CatalogOffering {
            zone,
            capacity_type,
            price,
            available,
            requirements: span(0, 0),
        });
        self
    }

    /// Adds a requirement to the offering added last (ignored before the first offering).
    pub fn offering_requirement(
        &mut self,
        key: &str,
        operator: impl Into<CatalogOperator>,
        values: &[&str],
        min_values: Option<u32>,
    ) -> &mut Self {
        if self.catalog.catalog.offerings.len() > self.first_offering {
            let r = self.catalog.requirement(key, operator, values, min_values);
            self.catalog.scratch_offering_requirements.push(r);
        }
        self
    }

    fn amount(&mut self, list: usize, name: &str, milli_value: u64) -> &mut Self {
        let name = self.catalog.string(name);
        self.amount_at(list, name, milli_value)
    }

    fn amount_at(&mut self, list: usize, name: u32, milli_value: u64) -> &mut Self {
        if let Some(list) = self.catalog.scratch_amounts.get_mut(list) {
            list.push(Amount { name, milli_value });
        }
        self
    }

    /// [`InstanceTypeBuilder::capacity`] with the resource name as a string index.
    pub fn capacity_at(&mut self, name: u32, milli_value: u64) -> &mut Self {
        self.amount_at(CAPACITY, name, milli_value)
    }

    /// Adds a capacity amount in thousandths of the resource's unit (`("cpu", 4000)` is 4 cores,
    /// `("memory", 1024 * 1000)` is 1Ki).
    pub fn capacity(&mut self, name: &str, milli_value: u64) -> &mut Self {
        self.amount(CAPACITY, name, milli_value)
    }

    /// Adds a kube-reserved amount (thousandths of the unit).
    pub fn kube_reserved(&mut self, name: &str, milli_value: u64) -> &mut Self {
        self.amount(KUBE_RESERVED, name, milli_value)
    }

    /// Adds a system-reserved amount (thousandths of the unit).
    pub fn system_reserved(&mut self, name: &str, milli_value: u64) -> &mut Self {
        self.amount(SYSTEM_RESERVED, name, milli_value)
    }

    /// Adds an eviction-threshold amount (thousandths of the unit).
    pub fn eviction_threshold(&mut self, name: &str, milli_value: u64) -> &mut Self {
        self.amount(EVICTION_THRESHOLD, name, milli_value)
    }

    /// Adds a requirement given in its Kubernetes form (the WIT `requirement` in the guest SDK).
    /// `Gte n`/`Lte n` become `Gt n-1`/`Lt n+1`, the form the contract carries (a bound that is
    /// not one integer stays as written, under `Gt`/`Lt`, for the host to refuse).
    pub fn requirement_of(&mut self, r: &impl Selector) -> &mut Self {
        let (operator, shifted) = match r.operator() {
            Operator::In => (CatalogOperator::In, None),
            Operator::NotIn => (CatalogOperator::NotIn, None),
            Operator::Exists => (CatalogOperator::Exists, None),
            Operator::DoesNotExist => (CatalogOperator::DoesNotExist, None),
            Operator::Gt => (CatalogOperator::Gt, None),
            Operator::Lt => (CatalogOperator::Lt, None),
            Operator::Gte => (CatalogOperator::Gt, Some(-1)),
            Operator::Lte => (CatalogOperator::Lt, Some(1)),
        };
        let bound = match (shifted, r.values()) {
            (Some(delta), [one]) => one
                .parse::<i64>()
                .ok()
                .map(|n| n.saturating_add(delta).to_string()),
            _ => None,
        };
        let values: Vec<&str> = match &bound {
            Some(b) => vec![b.as_str()],
            None => r.values().iter().map(String::as_str).collect(),
        };
        self.requirement(r.key(), operator, &values, r.min_values())
    }

    /// Adds every resource of `list` to the capacity.
    pub fn capacity_list<'q>(&mut self, list: impl IntoIterator<Item = Entry<'q>>) -> &mut Self {
        self.amount_list(CAPACITY, list)
    }

    /// Adds every resource of `list` to kube-reserved.
    pub fn kube_reserved_list<'q>(
        &mut self,
        list: impl IntoIterator<Item = Entry<'q>>,
    ) -> &mut Self {
        self.amount_list(KUBE_RESERVED, list)
    }

    /// Adds every resource of `list` to system-reserved.
    pub fn system_reserved_list<'q>(
        &mut self,
        list: impl IntoIterator<Item = Entry<'q>>,
    ) -> &mut Self {
        self.amount_list(SYSTEM_RESERVED, list)
    }

    /// Adds every resource of `list` to the eviction threshold.
    pub fn eviction_threshold_list<'q>(
        &mut self,
        list: impl IntoIterator<Item = Entry<'q>>,
    ) -> &mut Self {
        self.amount_list(EVICTION_THRESHOLD, list)
    }

    fn amount_list<'q>(
        &mut self,
        which: usize,
        list: impl IntoIterator<Item = Entry<'q>>,
    ) -> &mut Self {
        for (name, q) in list {
            self.amount(which, name, milli_value(q));
        }
        self
    }
}

impl Drop for InstanceTypeBuilder<'_> {
    fn drop(&mut self) {
        self.close_offering();
        let b = &mut *self.catalog;
        let requirements = std::mem::take(&mut b.scratch_requirements);
        let requirements_span = b.requirement_list(&requirements);
        b.scratch_requirements = requirements;
        let mut lists: [Span; 4] = [span(0, 0), span(0, 0), span(0, 0), span(0, 0)];
        let mut scratch = std::mem::take(&mut b.scratch_amounts);
        for (out, list) in lists.iter_mut().zip(&scratch) {
            *out = b.amount_list(list);
        }
        std::mem::swap(&mut b.scratch_amounts, &mut scratch);
        let [capacity, kube_reserved, system_reserved, eviction_threshold] = lists;
        let offerings = span(
            self.first_offering,
            b.catalog.offerings.len() - self.first_offering,
        );
        b.catalog.instance_types.push(CatalogInstanceType {
            name: self.name,
            requirements: requirements_span,
            offerings,
            capacity,
            overhead: CatalogOverhead {
                kube_reserved,
                system_reserved,
                eviction_threshold,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_hashes_are_probed() {
        let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let mut dedup = Dedup::default();
        let same = Hash::new().word(42);
        for (id, word) in words.iter().enumerate() {
            let found = dedup.find_or_add(same, id as u32, |i| words[..id][i as usize] == *word);
            assert_eq!(found, None);
        }
        for (id, word) in words.iter().enumerate() {
            let found = dedup.find_or_add(same, 100, |i| words[i as usize] == *word);
            assert_eq!(found, Some(id as u32));
        }
    }

    /// What a guest writes as a WIT requirement, for [`InstanceTypeBuilder::requirement_of`].
    struct Raw(Operator, Vec<String>);

    impl Selector for Raw {
        fn key(&self) -> &str {
            "k"
        }
        fn operator(&self) -> Operator {
            self.0
        }
        fn values(&self) -> &[String] {
            &self.1
        }
        fn min_values(&self) -> Option<u32> {
            None
        }
    }

    #[test]
    fn inclusive_bounds_are_stored_as_the_contract_carries_them() {
        let mut b = CatalogBuilder::new();
        b.instance_type("t")
            .requirement_of(&Raw(Operator::Gte, vec!["4".into()]))
            .requirement_of(&Raw(Operator::Lte, vec!["8".into()]))
            .requirement_of(&Raw(Operator::In, vec!["a".into(), "b".into()]));
        let c = b.finish();
        let stored: Vec<(CatalogOperator, Vec<&str>)> = c
            .requirements
            .iter()
            .map(|r| {
                let start = r.values.start as usize;
                let values = c.values[start..start + r.values.len as usize]
                    .iter()
                    .map(|&v| c.strings[v as usize].as_str())
                    .collect();
                (r.operator, values)
            })
            .collect();
        assert_eq!(
            stored,
            vec![
                (CatalogOperator::Gt, vec!["3"]),
                (CatalogOperator::Lt, vec!["9"]),
                (CatalogOperator::In, vec!["a", "b"]),
            ]
        );
    }

    #[test]
    fn milli_values_saturate() {
        assert_eq!(milli_value(&Quantity::from_millis(-5)), 0);
        assert_eq!(milli_value(&Quantity::from_units(2)), 2000);
        assert_eq!(milli_value(&Quantity::from_millis(i128::MAX)), u64::MAX);
    }
}
