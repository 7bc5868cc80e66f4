//! A fixed-size bit set over instance-type indices.

/// Bits `0..len`, packed into words. All sets a solver combines have the same length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    /// The empty set over `len` bits.
    pub(super) fn empty(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
        }
    }

    /// The full set over `len` bits.
    pub(super) fn full(len: usize) -> Self {
        let mut s = Self::empty(len);
        for i in 0..len {
            s.insert(i);
        }
        s
    }

    /// Makes `self` the empty set over `len` bits, reusing its allocation.
    pub(super) fn reset(&mut self, len: usize) {
        self.words.clear();
        self.words.resize(len.div_ceil(64), 0);
    }

    #[inline]
    pub(super) fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    #[inline]
    pub(super) fn remove(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    #[inline]
    pub(super) fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the sets share a member.
    pub(super) fn intersects(&self, other: &BitSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// `self &= other`.
    pub(super) fn intersect_with(&mut self, other: &BitSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= *b;
        }
    }

    /// `self |= other`.
    pub(super) fn union_with(&mut self, other: &BitSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
    }

    /// Makes `self` a copy of `other` without reallocating.
    pub(super) fn copy_from(&mut self, other: &BitSet) {
        self.words.clear();
        self.words.extend_from_slice(&other.words);
    }

    /// Keeps the members for which `keep` holds.
    #[inline]
    pub(super) fn retain(&mut self, mut keep: impl FnMut(usize) -> bool) {
        for (wi, word) in self.words.iter_mut().enumerate() {
            let mut w = *word;
            while w != 0 {
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                if !keep(wi * 64 + bit) {
                    *word &= !(1u64 << bit);
                }
            }
        }
    }

    /// The members, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &word)| {
            let mut w = word;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(wi * 64 + bit)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let mut a = BitSet::empty(130);
        for i in [0, 63, 64, 129] {
            a.insert(i);
        }
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 63, 64, 129]);
        assert_eq!(a.count(), 4);
        let mut b = BitSet::full(130);
        b.remove(63);
        b.intersect_with(&a);
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 64, 129]);
        assert!(b.contains(64) && !b.contains(63));
        assert!(b.intersects(&a));
        assert!(!b.intersects(&BitSet::empty(130)));
        let mut odd = BitSet::full(130);
        odd.retain(|i| i % 2 == 1);
        assert_eq!(odd.count(), 65);
        assert!(odd.contains(129) && !odd.contains(128));
        let mut c = BitSet::empty(130);
        assert!(c.is_empty());
        c.union_with(&b);
        assert_eq!(c, b);
        c.copy_from(&a);
        assert_eq!(c, a);
        c.reset(130);
        assert_eq!(c, BitSet::empty(130));
    }
}
