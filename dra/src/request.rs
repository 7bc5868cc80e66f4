//! A ResourceClaim's device requests, normalised for the allocator: DeviceClass selectors joined to
//! the request's, `exactly` and `firstAvailable` as ordered alternatives, constraints by name.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1 as resource;
use serde::{Deserialize, Serialize};

use crate::selector::{CompiledSelector, SelectorCache};
use crate::unsatisfiable::Unsatisfiable;

/// A claim's identity: its namespace and name. Pods sharing a claim share its allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClaimKey {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name (for a claim not yet created from a template, any name unique to it).
    pub name: String,
}

impl ClaimKey {
    /// The key of `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ClaimKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The selector expressions of the cluster's DeviceClasses, by class name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceClasses {
    classes: BTreeMap<String, Vec<String>>,
}

impl DeviceClasses {
    /// No classes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) class `name` with its CEL selector expressions.
    pub fn insert(&mut self, name: impl Into<String>, selectors: Vec<String>) {
        self.classes.insert(name.into(), selectors);
    }

    /// The classes of DeviceClass objects (objects without a name are skipped).
    pub fn from_objects<'a>(classes: impl IntoIterator<Item = &'a resource::DeviceClass>) -> Self {
        let classes = classes
            .into_iter()
            .filter_map(|class| {
                let name = class.metadata.name.clone()?;
                Some((name, cel_expressions(class.spec.selectors.as_deref())))
            })
            .collect();
        DeviceClasses { classes }
    }

    /// The selector expressions of class `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<&[String]> {
        self.classes.get(name).map(Vec::as_slice)
    }
}

fn cel_expressions(selectors: Option<&[resource::DeviceSelector]>) -> Vec<String> {
    selectors
        .into_iter()
        .flatten()
        .filter_map(|selector| selector.cel.as_ref().map(|cel| cel.expression.clone()))
        .collect()
}

/// How many matching devices an alternative takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocationMode {
    /// Exactly this many (at least 1).
    ExactCount(usize),
    /// Every matching device of the node, at least one, none allocated elsewhere.
    All,
}

/// One way to satisfy a request: an `exactly` request, or one `firstAvailable` subrequest.
#[derive(Debug, Clone)]
pub struct Alternative {
    /// The name allocation results carry: `request`, or `request/subrequest`.
    pub name: String,
    /// The DeviceClass.
    pub class: String,
    /// The class's selectors, then the request's: a device must match all of them.
    pub selectors: Vec<CompiledSelector>,
    /// How many devices.
    pub mode: AllocationMode,
}

/// A request of a claim: alternatives in order of preference (one for `exactly`).
#[derive(Debug, Clone)]
pub struct Request {
    /// The request's name.
    pub name: String,
    /// The alternatives, the first satisfiable one wins.
    pub alternatives: Vec<Alternative>,
}

/// Which kind of claim-level constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConstraintKind {
    /// `matchAttribute`: all devices share the attribute's value.
    MatchAttribute,
    /// `distinctAttribute`: all devices have different values of the attribute.
    DistinctAttribute,
}

/// A claim-level constraint over some (or all) of its requests' devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraint {
    /// Match or distinct.
    pub kind: ConstraintKind,
    /// The fully qualified attribute (`domain/name`).
    pub attribute: String,
    /// Request (or `request/subrequest`) names it applies to; empty means all.
    pub requests: Vec<String>,
}

impl Constraint {
    /// Whether the constraint covers `alternative` of `request`.
    pub fn applies_to(&self, request: &str, alternative: &str) -> bool {
        self.requests.is_empty()
            || self
                .requests
                .iter()
                .any(|name| name == request || name == alternative)
    }
}

/// Whether a claim already has an allocation, as the caller judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExistingAllocation {
    /// Allocated to devices of this node (already counted as used by the inventory).
    ThisNode,
    /// Allocated on another node: a pod using it cannot run here.
    OtherNode,
}

/// One claim's requests and constraints, ready for [`crate::Inventory::allocate`].
#[derive(Debug, Clone)]
pub struct ClaimRequests {
    /// The claim.
    pub key: ClaimKey,
    /// Its requests.
    pub requests: Vec<Request>,
    /// Its `matchAttribute`/`distinctAttribute` constraints.
    pub constraints: Vec<Constraint>,
    /// Set when the claim is allocated already: it is then not allocated again.
    pub existing: Option<ExistingAllocation>,
}

impl ClaimRequests {
    /// The fewest devices allocating the claim takes: per request its smallest alternative
    /// (`All` takes at least one); none when it is allocated already.
    pub fn min_devices(&self) -> usize {
        if self.existing.is_some() {
            return 0;
        }
        self.requests
            .iter()
            .map(|r| {
                r.alternatives
                    .iter()
                    .map(|a| match a.mode {
                        AllocationMode::ExactCount(n) => n,
                        AllocationMode::All => 1,
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum()
    }
}

struct Builder<'a> {
    claim: String,
    classes: &'a DeviceClasses,
    cache: &'a mut SelectorCache,
}

impl Builder<'_> {
    fn invalid(&self, request: &str, reason: impl Into<String>) -> Unsatisfiable {
        Unsatisfiable::InvalidRequest {
            claim: self.claim.clone(),
            request: request.to_owned(),
            reason: reason.into(),
        }
    }

    fn alternative(
        &mut self,
        name: String,
        class: &str,
        selectors: Option<&[resource::DeviceSelector]>,
        mode: Option<&str>,
        count: Option<i64>,
    ) -> Result<Alternative, Unsatisfiable> {
        let class_selectors =
            self.classes
                .get(class)
                .ok_or_else(|| Unsatisfiable::UnknownDeviceClass {
                    claim: self.claim.clone(),
                    request: name.clone(),
                    class: class.to_owned(),
                })?;
        let expressions = class_selectors
            .iter()
            .cloned()
            .chain(cel_expressions(selectors));
        let mut compiled = Vec::new();
        for expression in expressions {
            let selector = self.cache.compile(&expression).map_err(|error| {
                Unsatisfiable::SelectorCompile {
                    claim: self.claim.clone(),
                    request: name.clone(),
                    error: Box::new(error),
                }
            })?;
            compiled.push(selector);
        }
        let mode = match mode.unwrap_or("ExactCount") {
            "ExactCount" => {
                let count = count.unwrap_or(1);
                let count = usize::try_from(count)
                    .ok()
                    .filter(|count| *count >= 1)
                    .ok_or_else(|| self.invalid(&name, format!("count {count} is below 1")))?;
                AllocationMode::ExactCount(count)
            }
            "All" => AllocationMode::All,
            other => {
                return Err(self.invalid(&name, format!("unknown allocationMode {other:?}")));
            }
        };
        Ok(Alternative {
            name,
            class: class.to_owned(),
            selectors: compiled,
            mode,
        })
    }

    fn request(&mut self, request: &resource::DeviceRequest) -> Result<Request, Unsatisfiable> {
        let alternatives = match (&request.exactly, &request.first_available) {
            (Some(exact), None) => vec![self.alternative(
                request.name.clone(),
                &exact.device_class_name,
                exact.selectors.as_deref(),
                exact.allocation_mode.as_deref(),
                exact.count,
            )?],
            (None, Some(subrequests)) if !subrequests.is_empty() => subrequests
                .iter()
                .map(|sub| {
                    self.alternative(
                        format!("{}/{}", request.name, sub.name),
                        &sub.device_class_name,
                        sub.selectors.as_deref(),
                        sub.allocation_mode.as_deref(),
                        sub.count,
                    )
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(self.invalid(
                    &request.name,
                    "exactly one of exactly and firstAvailable (non-empty) must be set",
                ));
            }
        };
        Ok(Request {
            name: request.name.clone(),
            alternatives,
        })
    }

    fn constraint(
        &self,
        constraint: &resource::DeviceConstraint,
        requests: &[Request],
    ) -> Result<Constraint, Unsatisfiable> {
        let (kind, attribute) = match (&constraint.match_attribute, &constraint.distinct_attribute)
        {
            (Some(attribute), None) => (ConstraintKind::MatchAttribute, attribute),
            (None, Some(attribute)) => (ConstraintKind::DistinctAttribute, attribute),
            _ => {
                return Err(self.invalid(
                    "",
                    "a constraint must set exactly one of matchAttribute and distinctAttribute",
                ));
            }
        };
        let names = constraint.requests.clone().unwrap_or_default();
        for name in &names {
            let known = requests.iter().any(|request| {
                request.name == *name || request.alternatives.iter().any(|alt| alt.name == *name)
            });
            if !known {
                return Err(self.invalid(name, "constraint names an unknown request"));
            }
        }
        Ok(Constraint {
            kind,
            attribute: attribute.clone(),
            requests: names,
        })
    }
}

impl ClaimRequests {
    /// The requests of a claim spec (a ResourceClaim's or a ResourceClaimTemplate's `spec.spec`).
    /// Fails for an unknown DeviceClass, a selector that does not compile, or a malformed request.
    pub fn from_spec(
        key: ClaimKey,
        spec: &resource::ResourceClaimSpec,
        classes: &DeviceClasses,
        cache: &mut SelectorCache,
    ) -> Result<Self, Unsatisfiable> {
        let mut builder = Builder {
            claim: key.to_string(),
            classes,
            cache,
        };
        let devices = spec.devices.as_ref();
        let requests = devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
            .map(|request| builder.request(request))
            .collect::<Result<Vec<_>, _>>()?;
        let constraints = devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
            .map(|constraint| builder.constraint(constraint, &requests))
            .collect::<Result<_, _>>()?;
        Ok(ClaimRequests {
            key,
            requests,
            constraints,
            existing: None,
        })
    }

    /// The requests of a ResourceClaim. If its `status.allocation` is set it is not allocated
    /// again: `allocated_here` says whether that allocation is on the node being considered.
    pub fn from_claim(
        claim: &resource::ResourceClaim,
        classes: &DeviceClasses,
        cache: &mut SelectorCache,
        allocated_here: bool,
    ) -> Result<Self, Unsatisfiable> {
        let key = ClaimKey::new(
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        let allocated = claim
            .status
            .as_ref()
            .is_some_and(|status| status.allocation.is_some());
        if allocated {
            return Ok(Self::allocated(key, allocated_here));
        }
        Self::from_spec(key, &claim.spec, classes, cache)
    }

    /// The requests of the claim a pod will get from `template`, under the key `key`.
    pub fn from_template(
        key: ClaimKey,
        template: &resource::ResourceClaimTemplate,
        classes: &DeviceClasses,
        cache: &mut SelectorCache,
    ) -> Result<Self, Unsatisfiable> {
        Self::from_spec(key, &template.spec.spec, classes, cache)
    }

    /// An already allocated claim, on this node or not.
    pub fn allocated(key: ClaimKey, here: bool) -> Self {
        ClaimRequests {
            key,
            requests: Vec::new(),
            constraints: Vec::new(),
            existing: Some(if here {
                ExistingAllocation::ThisNode
            } else {
                ExistingAllocation::OtherNode
            }),
        }
    }
}

#[cfg(test)]
mod tests;
