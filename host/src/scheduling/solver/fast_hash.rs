//! FNV-1a hashing for the solver's internal maps: keys are short label values and sets the solver
//! built itself, so a cheap hash beats SipHash's flooding resistance.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, 64-bit.
#[derive(Default)]
pub(super) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// A `HashMap` with [`Fnv`].
pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A `HashSet` with [`Fnv`].
pub(super) type FastSet<K> = HashSet<K, BuildHasherDefault<Fnv>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_hashes_differ() {
        let mut m: FastMap<String, u32> = FastMap::default();
        m.insert("zone-1".into(), 1);
        m.insert("zone-2".into(), 2);
        assert_eq!(m.get("zone-2"), Some(&2));
        let hash = |s: &str| {
            let mut h = Fnv::default();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_ne!(hash("a"), hash("b"));
    }
}
