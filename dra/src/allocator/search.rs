//! The depth-first search behind [`Inventory::allocate`]: requests one after the other (the most
//! constrained first), for each its alternatives in order, for each the device combinations in
//! a packing-friendly order, skipping devices interchangeable with one already tried.

use std::collections::HashSet;

use crate::allocator::{AllocatedDevice, Allocation, ClaimAllocation, Inventory};
use crate::request::{
    AllocationMode, Alternative, ClaimRequests, Constraint, ConstraintKind, ExistingAllocation,
    Request,
};
use crate::selector::DeviceValue;
use crate::template::AttributeValue;
use crate::unsatisfiable::Unsatisfiable;

struct AltState<'a> {
    alt: &'a Alternative,
    /// Devices matching class and selectors, in the order to try them.
    candidates: Vec<usize>,
    /// Indices into `Search::constraints` that cover this alternative.
    constraints: Vec<usize>,
    /// The first selector error on a device, for messages.
    note: Option<String>,
    /// Why it cannot be satisfied even alone, if so: skipped by the search.
    alone: Option<Unsatisfiable>,
}

struct Slot<'a> {
    claim: usize,
    request: &'a Request,
    alts: Vec<AltState<'a>>,
}

struct ConstraintState<'a> {
    claim: usize,
    constraint: &'a Constraint,
    /// The values of the devices taken so far under the constraint, in order taken.
    values: Vec<&'a AttributeValue>,
}

/// Why a device cannot be taken right now.
#[derive(Clone, Copy)]
enum Block {
    InUse,
    Counters(usize),
    Constraint(usize),
}

struct BudgetExceeded;

struct Search<'a> {
    inventory: &'a Inventory,
    claims: Vec<&'a ClaimRequests>,
    uses: Vec<u32>,
    remaining: Vec<i128>,
    slots: Vec<Slot<'a>>,
    constraints: Vec<ConstraintState<'a>>,
    /// Per slot, the chosen alternative and devices.
    picks: Vec<(usize, Vec<usize>)>,
    steps: u64,
    budget: u64,
    /// The deepest failure seen: slot, specificity, reason.
    failure: Option<(usize, u8, Unsatisfiable)>,
}

pub(super) fn allocate(
    inventory: &Inventory,
    claims: &[ClaimRequests],
    budget: u64,
) -> Result<Allocation, Unsatisfiable> {
    let mut seen = HashSet::new();
    let mut active = Vec::new();
    for claim in claims {
        if !seen.insert(&claim.key) || inventory.is_committed(&claim.key) {
            continue;
        }
        match claim.existing {
            Some(ExistingAllocation::ThisNode) => continue,
            Some(ExistingAllocation::OtherNode) => {
                return Err(Unsatisfiable::AllocatedElsewhere {
                    claim: claim.key.to_string(),
                });
            }
            None => active.push(claim),
        }
    }
    let mut search = Search::new(inventory, active, budget);
    search.check_alone()?;
    match search.solve(0) {
        Ok(true) => Ok(search.allocation()),
        Ok(false) => Err(search.explain()),
        Err(BudgetExceeded) => Err(Unsatisfiable::StepBudgetExceeded { budget }),
    }
}

impl<'a> Search<'a> {
    fn new(inventory: &'a Inventory, claims: Vec<&'a ClaimRequests>, budget: u64) -> Self {
        let mut constraints = Vec::new();
        let mut slots = Vec::new();
        let mut values: Vec<Option<DeviceValue>> = vec![None; inventory.entries.len()];
        for (claim_index, claim) in claims.iter().enumerate() {
            let first_constraint = constraints.len();
            constraints.extend(claim.constraints.iter().map(|constraint| ConstraintState {
                claim: claim_index,
                constraint,
                values: Vec::new(),
            }));
            for request in &claim.requests {
                let alts = request
                    .alternatives
                    .iter()
                    .map(|alt| {
                        let covering = claim
                            .constraints
                            .iter()
                            .enumerate()
                            .filter(|(_, c)| c.applies_to(&request.name, &alt.name))
                            .map(|(i, _)| first_constraint + i)
                            .collect();
                        let (candidates, note) = candidates(inventory, alt, &mut values);
                        AltState {
                            alt,
                            candidates,
                            constraints: covering,
                            note,
                            alone: None,
                        }
                    })
                    .collect();
                slots.push(Slot {
                    claim: claim_index,
                    request,
                    alts,
                });
            }
        }
        Search {
            inventory,
            claims,
            uses: inventory.uses.to_vec(),
            remaining: inventory.remaining.to_vec(),
            slots,
            constraints,
            picks: Vec::new(),
            steps: 0,
            budget,
            failure: None,
        }
    }

    fn claim_name(&self, slot: usize) -> String {
        self.claims[self.slots[slot].claim].key.to_string()
    }

    /// Checks each alternative alone against the node; fails fast if some request has none
    /// left, then orders the requests most constrained first.
    fn check_alone(&mut self) -> Result<(), Unsatisfiable> {
        for slot in 0..self.slots.len() {
            for alt in 0..self.slots[slot].alts.len() {
                let reason = self.alone(slot, alt);
                self.slots[slot].alts[alt].alone = reason;
            }
            let all_fail = self.slots[slot].alts.iter().all(|a| a.alone.is_some());
            if all_fail {
                let mut reasons: Vec<_> = self.slots[slot]
                    .alts
                    .iter()
                    .filter_map(|a| a.alone.clone())
                    .collect();
                return Err(if reasons.len() == 1 {
                    reasons.remove(0)
                } else {
                    Unsatisfiable::NoAlternative {
                        claim: self.claim_name(slot),
                        request: self.slots[slot].request.name.clone(),
                        reasons,
                    }
                });
            }
        }
        let slack = |slot: &Slot<'_>| {
            let first = slot.alts.iter().find(|a| a.alone.is_none());
            let slack = first.map_or(0, |a| match a.alt.mode {
                AllocationMode::All => 0,
                AllocationMode::ExactCount(n) => a.candidates.len().saturating_sub(n),
            });
            (slot.alts.len() > 1, slack)
        };
        self.slots.sort_by_key(slack);
        Ok(())
    }

    fn free(&self, device: usize) -> bool {
        self.uses[device] == 0
            || self.inventory.entries[device]
                .device
                .allow_multiple_allocations
    }

    fn counters_block(&self, device: usize) -> Option<usize> {
        if self.uses[device] > 0 {
            return None;
        }
        self.inventory.entries[device]
            .consumes
            .iter()
            .find(|(counter, amount)| self.remaining[*counter] < *amount)
            .map(|(counter, _)| *counter)
    }

    fn alone(&self, slot: usize, alt: usize) -> Option<Unsatisfiable> {
        let state = &self.slots[slot].alts[alt];
        let claim = self.claim_name(slot);
        let request = state.alt.name.clone();
        let class = state.alt.class.clone();
        if state.candidates.is_empty() {
            return Some(Unsatisfiable::NoMatchingDevice {
                claim,
                request,
                class,
                selectors: state
                    .alt
                    .selectors
                    .iter()
                    .map(|s| s.expression().to_owned())
                    .collect(),
                note: state.note.clone(),
            });
        }
        let matching = state.candidates.len();
        let in_use = state.candidates.iter().filter(|&&d| !self.free(d)).count();
        let counter_blocked = state
            .candidates
            .iter()
            .filter(|&&d| self.free(d))
            .find_map(|&d| self.counters_block(d));
        let available = state
            .candidates
            .iter()
            .filter(|&&d| self.free(d) && self.counters_block(d).is_none())
            .count();
        match state.alt.mode {
            AllocationMode::All if in_use > 0 => Some(Unsatisfiable::AllModeDevicesInUse {
                claim,
                request,
                class,
                matching,
                in_use,
            }),
            AllocationMode::All => {
                counter_blocked.map(|counter| self.counters_exhausted(slot, alt, counter))
            }
            AllocationMode::ExactCount(wanted) if available < wanted => match counter_blocked {
                Some(counter) if matching - in_use >= wanted => {
                    Some(self.counters_exhausted(slot, alt, counter))
                }
                _ => Some(Unsatisfiable::NotEnoughDevices {
                    claim,
                    request,
                    class,
                    wanted,
                    matching,
                    available,
                }),
            },
            AllocationMode::ExactCount(_) => None,
        }
    }

    fn counters_exhausted(&self, slot: usize, alt: usize, counter: usize) -> Unsatisfiable {
        Unsatisfiable::CountersExhausted {
            claim: self.claim_name(slot),
            request: self.slots[slot].alts[alt].alt.name.clone(),
            counter_set: self.inventory.counters[counter].set.clone(),
        }
    }

    fn check(&self, device: usize, constraints: &[usize]) -> Result<(), Block> {
        if !self.free(device) {
            return Err(Block::InUse);
        }
        if let Some(counter) = self.counters_block(device) {
            return Err(Block::Counters(counter));
        }
        let entry = &self.inventory.entries[device];
        for &index in constraints {
            let state = &self.constraints[index];
            let Some(value) = entry.attribute(&state.constraint.attribute) else {
                return Err(Block::Constraint(index));
            };
            let ok = match state.constraint.kind {
                ConstraintKind::MatchAttribute => state.values.first().is_none_or(|v| *v == value),
                ConstraintKind::DistinctAttribute => !state.values.contains(&value),
            };
            if !ok {
                return Err(Block::Constraint(index));
            }
        }
        Ok(())
    }

    fn take(&mut self, device: usize, constraints: &[usize]) {
        let entry = &self.inventory.entries[device];
        if self.uses[device] == 0 {
            for (counter, amount) in &entry.consumes {
                self.remaining[*counter] -= amount;
            }
        }
        self.uses[device] += 1;
        for &index in constraints {
            if let Some(value) = entry.attribute(&self.constraints[index].constraint.attribute) {
                self.constraints[index].values.push(value);
            }
        }
    }

    fn untake(&mut self, device: usize, constraints: &[usize]) {
        let entry = &self.inventory.entries[device];
        for &index in constraints {
            self.constraints[index].values.pop();
        }
        self.uses[device] -= 1;
        if self.uses[device] == 0 {
            for (counter, amount) in &entry.consumes {
                self.remaining[*counter] += amount;
            }
        }
    }

    fn step(&mut self) -> Result<(), BudgetExceeded> {
        self.steps += 1;
        if self.steps > self.budget {
            Err(BudgetExceeded)
        } else {
            Ok(())
        }
    }

    fn record(&mut self, slot: usize, alt: usize, block: Option<Block>) {
        let claim = self.claim_name(slot);
        let state = &self.slots[slot].alts[alt];
        let (specificity, reason) = match block {
            Some(Block::Constraint(index)) => {
                let constraint = self.constraints[index].constraint;
                let requests = if constraint.requests.is_empty() {
                    self.claims[self.constraints[index].claim]
                        .requests
                        .iter()
                        .map(|r| r.name.clone())
                        .collect()
                } else {
                    constraint.requests.clone()
                };
                let attribute = constraint.attribute.clone();
                let reason = match constraint.kind {
                    ConstraintKind::MatchAttribute => Unsatisfiable::MatchAttribute {
                        claim,
                        attribute,
                        requests,
                    },
                    ConstraintKind::DistinctAttribute => Unsatisfiable::DistinctAttribute {
                        claim,
                        attribute,
                        requests,
                    },
                };
                (2, reason)
            }
            Some(Block::Counters(counter)) => (1, self.counters_exhausted(slot, alt, counter)),
            Some(Block::InUse) | None => (
                0,
                Unsatisfiable::Contention {
                    claim,
                    request: state.alt.name.clone(),
                    wanted: match state.alt.mode {
                        AllocationMode::ExactCount(n) => n,
                        AllocationMode::All => state.candidates.len(),
                    },
                },
            ),
        };
        let deeper = self
            .failure
            .as_ref()
            .is_none_or(|(s, p, _)| (slot, specificity) > (*s, *p));
        if deeper {
            self.failure = Some((slot, specificity, reason));
        }
    }

    /// Satisfies slots `slot..`, leaving the choices in `picks` on success.
    fn solve(&mut self, slot: usize) -> Result<bool, BudgetExceeded> {
        if slot == self.slots.len() {
            return Ok(true);
        }
        for alt in 0..self.slots[slot].alts.len() {
            if self.slots[slot].alts[alt].alone.is_some() {
                continue;
            }
            let constraints = self.slots[slot].alts[alt].constraints.clone();
            let found = match self.slots[slot].alts[alt].alt.mode {
                AllocationMode::All => self.take_all(slot, alt, &constraints)?,
                AllocationMode::ExactCount(count) => {
                    let mut picked = Vec::with_capacity(count);
                    self.pick(slot, alt, &constraints, count, 0, &mut picked)?
                }
            };
            if found {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn take_all(
        &mut self,
        slot: usize,
        alt: usize,
        constraints: &[usize],
    ) -> Result<bool, BudgetExceeded> {
        let candidates = self.slots[slot].alts[alt].candidates.clone();
        let mut taken = Vec::new();
        let mut blocked = None;
        for &device in &candidates {
            self.step()?;
            if let Err(block) = self.check(device, constraints) {
                blocked = Some(block);
                break;
            }
            self.take(device, constraints);
            taken.push(device);
        }
        if blocked.is_none() {
            self.picks.push((alt, taken.clone()));
            if self.solve(slot + 1)? {
                return Ok(true);
            }
            self.picks.pop();
        } else {
            self.record(slot, alt, blocked);
        }
        for &device in taken.iter().rev() {
            self.untake(device, constraints);
        }
        Ok(false)
    }

    fn pick(
        &mut self,
        slot: usize,
        alt: usize,
        constraints: &[usize],
        remaining: usize,
        start: usize,
        picked: &mut Vec<usize>,
    ) -> Result<bool, BudgetExceeded> {
        if remaining == 0 {
            self.picks.push((alt, picked.clone()));
            if self.solve(slot + 1)? {
                return Ok(true);
            }
            self.picks.pop();
            return Ok(false);
        }
        let count = self.slots[slot].alts[alt].candidates.len();
        let mut tried: Vec<(usize, u32)> = Vec::new();
        let mut blocked = None;
        for position in start..count {
            if count - position < remaining {
                break;
            }
            let device = self.slots[slot].alts[alt].candidates[position];
            let symmetry = (self.inventory.entries[device].symmetry, self.uses[device]);
            // A device interchangeable with one tried at this position leads to the same outcome.
            if tried.contains(&symmetry) {
                continue;
            }
            tried.push(symmetry);
            self.step()?;
            if let Err(block) = self.check(device, constraints) {
                if !matches!(block, Block::InUse) || blocked.is_none() {
                    blocked = Some(block);
                }
                continue;
            }
            self.take(device, constraints);
            picked.push(device);
            if self.pick(slot, alt, constraints, remaining - 1, position + 1, picked)? {
                return Ok(true);
            }
            picked.pop();
            self.untake(device, constraints);
        }
        self.record(slot, alt, blocked);
        Ok(false)
    }

    fn explain(&mut self) -> Unsatisfiable {
        if let Some((_, _, reason)) = self.failure.take() {
            return reason;
        }
        // Every failing pick records a reason; this is only a fallback naming the last request.
        let slot = self.slots.len().saturating_sub(1);
        Unsatisfiable::Contention {
            claim: self
                .claims
                .first()
                .map(|c| c.key.to_string())
                .unwrap_or_default(),
            request: self
                .slots
                .get(slot)
                .map(|s| s.request.name.clone())
                .unwrap_or_default(),
            wanted: 0,
        }
    }

    fn allocation(&self) -> Allocation {
        let mut claims: Vec<ClaimAllocation> = self
            .claims
            .iter()
            .map(|claim| ClaimAllocation {
                claim: claim.key.clone(),
                devices: Vec::new(),
            })
            .collect();
        for (slot, (alt, devices)) in self.picks.iter().enumerate() {
            let state = &self.slots[slot];
            let name = &state.alts[*alt].alt.name;
            claims[state.claim]
                .devices
                .extend(devices.iter().map(|&d| AllocatedDevice {
                    request: name.clone(),
                    device: self.inventory.entries[d].id.clone(),
                }));
        }
        Allocation { claims }
    }
}

/// The devices matching `alt`, in the order to try them: partitions of counter sets already in
/// use first (packing), then the node's order. Also the first selector error, if any.
fn candidates(
    inventory: &Inventory,
    alt: &Alternative,
    values: &mut [Option<DeviceValue>],
) -> (Vec<usize>, Option<String>) {
    let matched = inventory.matching(&alt.selectors, |index, entry| {
        values[index]
            .get_or_insert_with(|| DeviceValue::new(&entry.id.driver, &entry.device))
            .clone()
    });
    let mut matching = matched.devices.clone();
    let untouched = |device: &usize| {
        inventory.entries[*device]
            .consumes
            .iter()
            .filter(|(counter, _)| {
                inventory.remaining[*counter] == inventory.counters[*counter].capacity
            })
            .count()
    };
    matching.sort_by_key(untouched);
    (matching, matched.note.clone())
}
