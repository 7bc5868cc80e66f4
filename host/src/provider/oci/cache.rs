//! Pulled layers on disk by digest (`<dir>/sha256/<hex>`): a provider whose layer is cached is
//! not downloaded again (after a restart, or when a tag moves back), and every read is checked
//! against its digest, so a corrupted or altered file is pulled again, never loaded.

use std::path::{Path, PathBuf};

use crate::provider::source::sha256_hex;

/// The on-disk blob cache.
#[derive(Debug, Clone)]
pub struct BlobCache {
    dir: PathBuf,
}

impl BlobCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        let hex = digest.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join("sha256").join(hex))
    }

    /// The blob with `digest` (`sha256:<hex>`), if cached and intact; a file whose content does
    /// not match its name is removed.
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let bytes = std::fs::read(&path).ok()?;
        if digest.strip_prefix("sha256:") == Some(sha256_hex(&bytes).as_str()) {
            Some(bytes)
        } else {
            tracing::warn!(path = %path.display(), "cached blob does not match its digest: removed");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Stores `bytes` under `digest` (written to a temporary file, then renamed: a reader never
    /// sees half a blob).
    pub fn put(&self, digest: &str, bytes: &[u8]) -> std::io::Result<()> {
        let Some(path) = self.path(digest) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a sha256 digest: {digest:?}"),
            ));
        };
        let dir = self.dir.join("sha256");
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join(format!(".tmp-{}-{}", std::process::id(), &digest[7..19]));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tampering() {
        let dir = std::env::temp_dir().join(format!("capstan-oci-cache-{}", std::process::id()));
        let cache = BlobCache::new(&dir);
        let blob = b"\0asm component bytes".to_vec();
        let digest = format!("sha256:{}", sha256_hex(&blob));
        assert_eq!(cache.get(&digest), None);
        cache.put(&digest, &blob).unwrap();
        assert_eq!(cache.get(&digest), Some(blob.clone()));
        // Altered on disk: refused and removed.
        let path = dir.join("sha256").join(&digest[7..]);
        std::fs::write(&path, b"something else").unwrap();
        assert_eq!(cache.get(&digest), None);
        assert!(!path.exists());
        // Names that are not digests never reach the file system.
        assert!(cache.put("sha256:../../etc/passwd", &blob).is_err());
        assert_eq!(cache.get("latest"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
