//! Which fixed bins (existing nodes, in-flight claims) could still hold a pod's requests, so that a
//! pod no existing capacity can take does not try every node in the cluster one by one.
//!
//! A consolidation simulation re-places the pods of the nodes it removes against every other node;
//! in a packed cluster of thousands of nodes each of those pods used to walk all of them, each
//! refused on resources. Here each fixed bin is filed, for CPU, memory and pods, by the bit length
//! of what it had free when the solve began (`2^(c-1) <= free < 2^c` is class `c`, nothing free is
//! class 0), and [`FixedRoom::word`] keeps, for a pod, only the bins whose class in each resource
//! is at least the class of the pod's request. A bin left out had less free than the pod asks
//! for; placing pods only ever shrinks what a fixed bin has free, so the classes of the start stay
//! upper bounds and the filter never drops a bin the solver's own fit check would pass.

use super::bin_index::BinSet;
use crate::scheduling::resources::Resources;

/// Classes of a 64-bit amount: 0 (nothing) to 64.
const CLASSES: usize = 65;

/// One resource: per class, the fixed bins with at least that class.
#[derive(Debug, Default)]
struct Column {
    at_least: Vec<BinSet>,
}

/// The class of `amount`: its bit length, 0 for nothing or less.
fn class(amount: i64) -> usize {
    u64::try_from(amount).map_or(0, |a| (u64::BITS - a.leading_zeros()) as usize)
}

impl Column {
    fn new(free: impl Iterator<Item = i64>) -> Self {
        let mut at_least: Vec<BinSet> = (0..CLASSES).map(|_| BinSet::default()).collect();
        for (b, amount) in free.enumerate() {
            at_least[class(amount)].insert(b);
        }
        // Suffix union: class c holds every bin of class c or more.
        for c in (0..CLASSES - 1).rev() {
            let (low, high) = at_least.split_at_mut(c + 1);
            low[c].union_with(&high[0]);
        }
        Self { at_least }
    }

    fn word(&self, class: usize, w: usize) -> u64 {
        self.at_least[class].word(w)
    }
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct FixedRoom {
    cpu: Column,
    memory: Column,
    pods: Column,
}

impl FixedRoom {
    /// Files the fixed bins `0..`, each given as (requested so far, allocatable), or `None` for
    /// a bin of unknown room (kept for every pod).
    pub(super) fn new<'r>(
        bins: impl Iterator<Item = Option<(&'r Resources, &'r Resources)>> + Clone,
    ) -> Self {
        let free = |amount: fn(&Resources) -> i64| {
            bins.clone()
                .map(move |bin| bin.map_or(i64::MAX, |(used, alloc)| amount(alloc) - amount(used)))
        };
        Self {
            cpu: Column::new(free(|r| r.cpu_millis)),
            memory: Column::new(free(|r| r.memory)),
            pods: Column::new(free(|r| r.pods)),
        }
    }

    /// What [`FixedRoom::word`] compares bins against: the classes of `requests`.
    pub(super) fn classes(requests: &Resources) -> [usize; 3] {
        [
            class(requests.cpu_millis),
            class(requests.memory),
            class(requests.pods),
        ]
    }

    /// Word `w` of the fixed bins that may have room for requests of `classes`.
    #[inline]
    pub(super) fn word(&self, [cpu, memory, pods]: [usize; 3], w: usize) -> u64 {
        self.cpu.word(cpu, w) & self.memory.word(memory, w) & self.pods.word(pods, w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_bit_lengths() {
        assert_eq!(class(-5), 0);
        assert_eq!(class(0), 0);
        assert_eq!(class(1), 1);
        assert_eq!(class(255), 8);
        assert_eq!(class(256), 9);
        assert_eq!(class(i64::MAX), 63);
    }

    /// Every bin with room for a request is kept; bins kept without room are only those whose
    /// free amount shares the request's class.
    #[test]
    fn a_bin_with_room_is_never_left_out() {
        let alloc = Resources::new(4000, 8 << 30, 110);
        let used: Vec<Resources> = (0..200)
            .map(|i| Resources::new(i * 23 % 4200, (i * 97 % 9) << 30, i % 111))
            .collect();
        let room = FixedRoom::new(used.iter().map(|u| Some((u, &alloc))));
        for cpu in [0, 1, 100, 380, 1000, 3999, 4000, 5000] {
            for memory in [0, 1 << 20, 3 << 30, 9 << 30] {
                let request = Resources::new(cpu, memory, 1);
                for (b, u) in used.iter().enumerate() {
                    let kept =
                        room.word(FixedRoom::classes(&request), b / 64) & (1 << (b % 64)) != 0;
                    if u.fits_with(&request, &alloc) {
                        assert!(kept, "bin {b} ({u:?}) has room for {request:?}");
                    }
                    if !kept {
                        assert!(!u.fits_with(&request, &alloc));
                    }
                }
            }
        }
        // A packed cluster: 200m free everywhere, a 380m pod is offered no bin at all.
        let packed = vec![Resources::new(3800, 1 << 30, 10); 100];
        let room = FixedRoom::new(packed.iter().map(|u| Some((u, &alloc))));
        let request = Resources::new(380, 1 << 20, 1);
        assert!((0..2).all(|w| room.word(FixedRoom::classes(&request), w) == 0));
        // A bin of unknown room is kept for any request.
        let room = FixedRoom::new([None, Some((&packed[0], &alloc))].into_iter());
        assert_eq!(
            room.word(
                FixedRoom::classes(&Resources::new(i64::MAX, i64::MAX, i64::MAX)),
                0
            ),
            1
        );
    }
}
