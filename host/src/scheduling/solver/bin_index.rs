//! Which bins a pod needs to look at, so that placing a pod does not walk every open NodeClaim.
//!
//! Two things make the walk long on large runs: claims a pod's topology rules out (a hostname
//! anti-affinity pod against every claim that already holds a pod it repels; a zonal affinity pod
//! against claims pinned to zones its peers are not in), and keeping the claims in the order they
//! are tried (fewest pods first, then oldest). This index keeps
//!
//! - the new claims bucketed by pod count, each bucket a bit set over bin indices, so iterating
//!   the buckets in ascending count and each bucket's bits in ascending index is exactly the
//!   first-fit order, and a claim that gains a pod moves between two buckets in O(1);
//! - per hostname topology group, the bins whose hostname already has a counted pod;
//! - per other topology key, the bins whose requirements list each registered domain, and the
//!   bins that list none (no requirement, a complement, or an unregistered value).
//!
//! From these, [`BinIndex::restrict`] narrows a per-pod candidate set. It is a *superset* of the
//! bins the solver's host and domain filters pass, which stay the final word: the index only lets
//! the walk skip bins those filters would reject anyway, so placements do not change.

use super::topology::{DomainId, GroupId};

/// A growable bit set over bin indices.
#[derive(Clone, Debug, Default)]
pub(super) struct BinSet {
    words: Vec<u64>,
}

impl BinSet {
    pub(super) fn insert(&mut self, b: usize) {
        let w = b / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (b % 64);
    }

    pub(super) fn remove(&mut self, b: usize) {
        if let Some(word) = self.words.get_mut(b / 64) {
            *word &= !(1 << (b % 64));
        }
    }

    #[cfg(test)]
    pub(super) fn contains(&self, b: usize) -> bool {
        self.word(b / 64) & (1 << (b % 64)) != 0
    }

    /// Word `w` (bins `64w..64w+64`); zero past the end.
    #[inline]
    pub(super) fn word(&self, w: usize) -> u64 {
        self.words.get(w).copied().unwrap_or(0)
    }

    /// `self |= other`.
    pub(super) fn union_with(&mut self, other: &BinSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }
}

/// The domains a bin's requirements list for one tracked topology key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Listed {
    /// Exactly these registered domains.
    Ids(Vec<DomainId>),
    /// No usable list (the bin passes every domain filter on the key).
    Unlisted,
}

#[derive(Debug, Default)]
struct KeyIndex {
    /// Per domain id, the bins listing it.
    listed: Vec<BinSet>,
    unlisted: BinSet,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct BinIndex {
    /// `by_pods[k]`: the new claims holding `k` pods.
    by_pods: Vec<BinSet>,
    by_pods_len: Vec<usize>,
    /// Per group: `Some` (bins whose hostname has a counted pod) for hostname groups.
    occupied: Vec<Option<BinSet>>,
    /// Bins with no hostname domain (host filters never rule them out).
    no_host: BinSet,
    /// Per hostname domain id, the bins with that hostname.
    host_bins: Vec<Vec<usize>>,
    /// Per topology key: `Some` for tracked (non-hostname) keys.
    keys: Vec<Option<KeyIndex>>,
    /// Per bin, per tracked key, what `keys` holds for it.
    bin_listed: Vec<Vec<(usize, Listed)>>,
    /// The current pod's candidates, when restricted.
    candidates: Vec<u64>,
    restricted: bool,
    /// Bins covered by `candidates`.
    len: usize,
}

impl BinIndex {
    /// An index tracking occupancy for the hostname groups among `hostname_groups` and domain
    /// lists for `tracked_keys`.
    pub(super) fn new(
        group_count: usize,
        hostname_groups: impl Iterator<Item = GroupId>,
        key_count: usize,
        tracked_keys: impl Iterator<Item = usize>,
    ) -> Self {
        let mut index = BinIndex {
            occupied: vec![None; group_count],
            keys: (0..key_count).map(|_| None).collect(),
            ..BinIndex::default()
        };
        for g in hostname_groups {
            if let Some(slot) = index.occupied.get_mut(g) {
                *slot = Some(BinSet::default());
            }
        }
        for k in tracked_keys {
            if let Some(slot) = index.keys.get_mut(k) {
                *slot = Some(KeyIndex::default());
            }
        }
        index
    }

    /// The hostname groups whose occupancy is tracked.
    pub(super) fn occupancy_groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.occupied
            .iter()
            .enumerate()
            .filter_map(|(g, s)| s.as_ref().map(|_| g))
    }

    /// The tracked topology keys.
    pub(super) fn tracked_keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.keys
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.as_ref().map(|_| k))
    }

    /// Registers bin `b` (the next index). `occupied_groups` are the tracked groups whose count
    /// at its hostname is already non-zero; `listed` its domains per tracked key; `new_claim`
    /// puts it in the zero-pod bucket.
    pub(super) fn add_bin(
        &mut self,
        b: usize,
        host: Option<DomainId>,
        occupied_groups: impl Iterator<Item = GroupId>,
        listed: Vec<(usize, Listed)>,
        new_claim: bool,
    ) {
        match host {
            Some(d) => {
                let d = d as usize;
                if self.host_bins.len() <= d {
                    self.host_bins.resize(d + 1, Vec::new());
                }
                self.host_bins[d].push(b);
                for g in occupied_groups {
                    if let Some(Some(set)) = self.occupied.get_mut(g) {
                        set.insert(b);
                    }
                }
            }
            None => self.no_host.insert(b),
        }
        if self.bin_listed.len() <= b {
            self.bin_listed.resize(b + 1, Vec::new());
        }
        for (key, l) in &listed {
            self.set_listed(b, *key, l, true);
        }
        self.bin_listed[b] = listed;
        if new_claim {
            self.bucket_insert(0, b);
        }
    }

    /// Forgets bin `b`, the last one added (a claim that could not take its first pod).
    pub(super) fn remove_last_bin(&mut self, b: usize, host: Option<DomainId>) {
        match host {
            Some(d) => {
                if let Some(bins) = self.host_bins.get_mut(d as usize) {
                    bins.retain(|&x| x != b);
                }
                for set in self.occupied.iter_mut().flatten() {
                    set.remove(b);
                }
            }
            None => self.no_host.remove(b),
        }
        if let Some(listed) = self.bin_listed.get_mut(b).map(std::mem::take) {
            for (key, l) in &listed {
                self.set_listed(b, *key, l, false);
            }
        }
        self.bucket_remove(0, b);
    }

    fn set_listed(&mut self, b: usize, key: usize, listed: &Listed, on: bool) {
        let Some(Some(index)) = self.keys.get_mut(key) else {
            return;
        };
        let apply = |set: &mut BinSet| {
            if on {
                set.insert(b);
            } else {
                set.remove(b);
            }
        };
        match listed {
            Listed::Unlisted => apply(&mut index.unlisted),
            Listed::Ids(ids) => {
                for &d in ids {
                    let d = d as usize;
                    if index.listed.len() <= d {
                        index.listed.resize(d + 1, BinSet::default());
                    }
                    apply(&mut index.listed[d]);
                }
            }
        }
    }

    /// Bin `b`'s domains for tracked `key` are now `listed`.
    pub(super) fn update_listed(&mut self, b: usize, key: usize, listed: Listed) {
        let Some(pos) = self
            .bin_listed
            .get(b)
            .and_then(|v| v.iter().position(|(k, _)| *k == key))
        else {
            return;
        };
        if self.bin_listed[b][pos].1 == listed {
            return;
        }
        let old = std::mem::replace(&mut self.bin_listed[b][pos].1, listed);
        self.set_listed(b, key, &old, false);
        let new = self.bin_listed[b][pos].1.clone();
        self.set_listed(b, key, &new, true);
    }

    /// Group `g`'s count at hostname domain `d` became non-zero.
    pub(super) fn occupy(&mut self, g: GroupId, d: DomainId) {
        let (Some(Some(set)), Some(bins)) =
            (self.occupied.get_mut(g), self.host_bins.get(d as usize))
        else {
            return;
        };
        for &b in bins {
            set.insert(b);
        }
    }

    /// New claim `b` went from `pods - 1` to `pods` pods.
    pub(super) fn grew(&mut self, b: usize, pods: usize) {
        self.bucket_remove(pods - 1, b);
        self.bucket_insert(pods, b);
    }

    fn bucket_insert(&mut self, k: usize, b: usize) {
        if self.by_pods.len() <= k {
            self.by_pods.resize(k + 1, BinSet::default());
            self.by_pods_len.resize(k + 1, 0);
        }
        self.by_pods[k].insert(b);
        self.by_pods_len[k] += 1;
    }

    fn bucket_remove(&mut self, k: usize, b: usize) {
        if let (Some(set), Some(len)) = (self.by_pods.get_mut(k), self.by_pods_len.get_mut(k)) {
            set.remove(b);
            *len = len.saturating_sub(1);
        }
    }

    /// How many pod-count buckets there are.
    pub(super) fn buckets(&self) -> usize {
        self.by_pods.len()
    }

    /// Whether bucket `k` is empty.
    pub(super) fn bucket_is_empty(&self, k: usize) -> bool {
        self.by_pods_len.get(k).is_none_or(|&n| n == 0)
    }

    /// Word `w` of bucket `k`.
    #[inline]
    pub(super) fn bucket_word(&self, k: usize, w: usize) -> u64 {
        self.by_pods.get(k).map_or(0, |s| s.word(w))
    }

    /// Starts a pod's candidate set over `len` bins: every bin.
    pub(super) fn begin(&mut self, len: usize) {
        self.restricted = false;
        self.len = len;
    }

    fn start_restricting(&mut self) {
        if !self.restricted {
            self.restricted = true;
            self.candidates.clear();
            self.candidates.resize(self.len.div_ceil(64), !0);
        }
    }

    /// Keeps the bins whose hostname has no pod counted by group `g` (`Vacant`), or some
    /// (`Occupied`; bins without a hostname stay). A no-op for untracked groups.
    pub(super) fn restrict_host(&mut self, g: GroupId, occupied: bool) {
        if !matches!(self.occupied.get(g), Some(Some(_))) {
            return;
        }
        self.start_restricting();
        let Some(Some(set)) = self.occupied.get(g) else {
            return;
        };
        for (w, c) in self.candidates.iter_mut().enumerate() {
            *c &= if occupied {
                set.word(w) | self.no_host.word(w)
            } else {
                !set.word(w)
            };
        }
    }

    /// Keeps the bins that list no domain for `key` or list one of `populated`. A no-op for
    /// untracked keys.
    pub(super) fn restrict_domains(&mut self, key: usize, populated: &[DomainId]) {
        if !matches!(self.keys.get(key), Some(Some(_))) {
            return;
        }
        self.start_restricting();
        let Some(Some(index)) = self.keys.get(key) else {
            return;
        };
        for (w, c) in self.candidates.iter_mut().enumerate() {
            let mut allowed = index.unlisted.word(w);
            for &d in populated {
                if let Some(set) = index.listed.get(d as usize) {
                    allowed |= set.word(w);
                }
            }
            *c &= allowed;
        }
    }

    /// Word `w` of the current candidates.
    #[inline]
    pub(super) fn candidate_word(&self, w: usize) -> u64 {
        if self.restricted {
            self.candidates.get(w).copied().unwrap_or(0)
        } else {
            !0
        }
    }

    /// The word range outside which no bin is a candidate.
    pub(super) fn candidate_words(&self) -> std::ops::Range<usize> {
        let n = self.len.div_ceil(64);
        if !self.restricted {
            return 0..n;
        }
        let first = self.candidates.iter().position(|&w| w != 0).unwrap_or(n);
        let last = self
            .candidates
            .iter()
            .rposition(|&w| w != 0)
            .map_or(first, |l| l + 1);
        first..last
    }

    /// Whether bin `b` is a candidate.
    #[cfg(test)]
    pub(super) fn is_candidate(&self, b: usize) -> bool {
        self.candidate_word(b / 64) & (1 << (b % 64)) != 0
    }

    #[cfg(test)]
    pub(super) fn bucket_contains(&self, k: usize, b: usize) -> bool {
        self.by_pods.get(k).is_some_and(|s| s.contains(b))
    }
}
