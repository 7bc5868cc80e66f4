//! Short stable hashes for drift records: the first 16 hex digits of a SHA-1.

use sha1::{Digest, Sha1};

/// 16 hex digits of the SHA-1 of `bytes`: stable across builds and platforms.
pub fn short(bytes: &[u8]) -> String {
    let digest = Sha1::digest(bytes);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_distinct() {
        // SHA-1("abc") = a9993e364706816aba3e25717850c26c9cd0d89d
        assert_eq!(short(b"abc"), "a9993e364706816a");
        assert_ne!(short(b"abc"), short(b"abd"));
        assert_eq!(short(b"").len(), 16);
    }
}
