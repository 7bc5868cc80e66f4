//! The compiled-component cache on disk.
//!
//! Compiling a provider takes a good fraction of a second; loading its compiled form takes well
//! under a millisecond. Entries are keyed by the sha256 of the component bytes *and* a digest of
//! the engine's compatibility hash (wasmtime version, target and every setting that affects code
//! generation), so a changed engine never loads code compiled for another.
//!
//! The runtime touches the disk only through the [`cap_std::fs::Dir`] handed to
//! [`ComponentCache::new`]: the caller opens it (with ambient authority, at the edge) and nothing
//! here can reach outside it.
//!
//! Each file is a small header, the sha256 of the artifact, and the artifact. Files are written to
//! a temporary name and renamed into place, so readers never see half a file; an entry whose
//! digest does not match (a torn write, disk corruption, or an artifact from an engine that
//! [`Component::deserialize`] rejects) is compiled again and replaced, never trusted.

use std::hash::{Hash, Hasher};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Magic at the start of every cache file (format version 1).
const MAGIC: &[u8; 16] = b"capstan-cwasm-1\n";
const DIGEST_LEN: usize = 32;

/// Failures of the cache. Problems with an existing entry are not errors (it is recompiled); only
/// compiling, and writing the result, can fail.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Wasmtime could not compile the component.
    #[error("cannot compile the component: {0}")]
    Compile(String),
    /// Wasmtime could not load what it had just compiled.
    #[error("cannot load the compiled component: {0}")]
    Load(String),
    /// The cache directory could not be written.
    #[error("cannot write the compiled-component cache entry {name}: {source}")]
    Write {
        /// The entry's file name.
        name: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a valid cache entry.
    Hit,
    /// Compiled; no entry existed. The result was stored.
    Miss,
    /// Compiled because the entry was unreadable or corrupt. The result replaced it.
    Replaced,
    /// Compiled without a cache.
    Uncached,
}

/// The cache key of some component bytes for an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// Hex sha256 of the component bytes.
    pub component_sha256: String,
    /// Hex sha256 of the engine's compatibility hash, shortened.
    pub engine: String,
}

impl CacheKey {
    /// The key of `bytes` for `engine`.
    pub fn new(engine: &Engine, bytes: &[u8]) -> Self {
        Self {
            component_sha256: hex::encode(Sha256::digest(bytes)),
            engine: engine_digest(engine),
        }
    }

    /// The entry's file name.
    pub fn file_name(&self) -> String {
        format!("{}-{}.cwasm", self.component_sha256, self.engine)
    }
}

/// A hex digest (16 bytes of sha256) of `engine.precompile_compatibility_hash()`.
///
/// The compatibility hash is only exposed as `impl Hash`; it is fed into sha256 rather than
/// `DefaultHasher`, whose output may change between Rust releases.
pub fn engine_digest(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..16])
}

struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Compiled components on disk, in one directory.
///
/// The directory must belong to Capstan alone: a file placed there by someone else that matches an
/// entry's name and digest would be loaded as native code.
#[derive(Debug)]
pub struct ComponentCache {
    dir: Dir,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl ComponentCache {
    /// A cache in `dir`, which the caller opened.
    pub fn new(dir: Dir) -> Self {
        Self { dir }
    }

    /// The compiled component for `bytes`: from the cache if a valid entry exists, else compiled
    /// and stored.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
    ) -> Result<(Component, CacheOutcome), CacheError> {
        let key = CacheKey::new(engine, bytes);
        let name = key.file_name();
        let outcome = match self.read_entry(&name) {
            Ok(Some(artifact)) => match deserialize(engine, &artifact) {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(message) => {
                    tracing::warn!(entry = %name, %message, "cached component rejected; recompiling");
                    CacheOutcome::Replaced
                }
            },
            Ok(None) => CacheOutcome::Miss,
            Err(EntryProblem::Corrupt(why)) => {
                tracing::warn!(entry = %name, problem = why, "corrupt cache entry; recompiling");
                CacheOutcome::Replaced
            }
            Err(EntryProblem::Io(err)) => {
                tracing::warn!(entry = %name, error = %err, "unreadable cache entry; recompiling");
                CacheOutcome::Replaced
            }
        };
        let artifact = Precompiled::compile(engine, bytes)?;
        self.write_entry(&name, &artifact.bytes)?;
        let component = artifact.load(engine)?;
        Ok((component, outcome))
    }

    /// Whether an entry for `bytes` exists (valid or not).
    pub fn contains(&self, engine: &Engine, bytes: &[u8]) -> bool {
        self.dir.exists(CacheKey::new(engine, bytes).file_name())
    }

    /// The compiled artifact of a valid entry, if there is one (for benchmarks and tooling).
    pub fn artifact(&self, engine: &Engine, bytes: &[u8]) -> Option<Precompiled> {
        self.read_entry(&CacheKey::new(engine, bytes).file_name())
            .ok()
            .flatten()
            .map(|bytes| Precompiled { bytes })
    }

    fn read_entry(&self, name: &str) -> Result<Option<Vec<u8>>, EntryProblem> {
        let file = match self.dir.read(name) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(EntryProblem::Io(err)),
        };
        let header = MAGIC.len() + DIGEST_LEN;
        if file.len() < header || &file[..MAGIC.len()] != MAGIC {
            return Err(EntryProblem::Corrupt("bad header"));
        }
        let (digest, artifact) = file[MAGIC.len()..].split_at(DIGEST_LEN);
        if Sha256::digest(artifact).as_slice() != digest {
            return Err(EntryProblem::Corrupt("digest mismatch"));
        }
        Ok(Some(artifact.to_vec()))
    }

    fn write_entry(&self, name: &str, artifact: &[u8]) -> Result<(), CacheError> {
        let write_error = |source| CacheError::Write {
            name: name.to_owned(),
            source,
        };
        let temp = format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let mut file = Vec::with_capacity(MAGIC.len() + DIGEST_LEN + artifact.len());
        file.extend_from_slice(MAGIC);
        file.extend_from_slice(&Sha256::digest(artifact));
        file.extend_from_slice(artifact);
        self.dir.write(&temp, &file).map_err(write_error)?;
        if let Err(err) = self.dir.rename(&temp, &self.dir, name) {
            // Best effort: do not leave the temporary file behind.
            let _ = self.dir.remove_file(&temp);
            return Err(write_error(err));
        }
        Ok(())
    }
}

enum EntryProblem {
    Corrupt(&'static str),
    Io(io::Error),
}

/// A compiled component, as produced by [`Engine::precompile_component`].
///
/// Only [`Precompiled::compile`] and [`ComponentCache::artifact`] (which verifies the entry's
/// digest) create one, which is what makes [`Precompiled::load`] safe to offer.
#[derive(Clone)]
pub struct Precompiled {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for Precompiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Precompiled")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl Precompiled {
    /// Compiles component `bytes` for `engine`.
    pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Self, CacheError> {
        engine
            .precompile_component(bytes)
            .map(|bytes| Self { bytes })
            .map_err(|err| CacheError::Compile(format!("{err:#}")))
    }

    /// The artifact's size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the artifact is empty (never, for a real one).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Loads the artifact into `engine` (wasmtime rejects it if the engine is incompatible).
    pub fn load(&self, engine: &Engine) -> Result<Component, CacheError> {
        deserialize(engine, &self.bytes).map_err(CacheError::Load)
    }
}

/// Loads an artifact produced by [`Engine::precompile_component`].
fn deserialize(engine: &Engine, artifact: &[u8]) -> Result<Component, String> {
    // SAFETY: `Component::deserialize` requires bytes produced by `Engine::precompile_component`
    // (wasmtime checks the header and the engine's configuration, but not the code itself).
    // Every artifact that reaches this point is either a `Precompiled` (made only by
    // `Precompiled::compile`, or from a verified cache entry) or a cache entry whose sha256
    // matched, and cache entries are only ever written by `write_entry` with the output of
    // `Precompiled::compile`. The cache directory belongs to Capstan and must not be writable by
    // anyone untrusted: whoever can write it can run native code in this process.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, artifact) };
    component.map_err(|err| format!("{err:#}"))
}
