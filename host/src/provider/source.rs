//! A provider's component as shipped in a ConfigMap: which key holds it, how it is compressed,
//! and the checks made before anything is compiled (size, decompression, the sha256 pin).
//!
//! A ConfigMap holds at most 1 MiB, so a component may be compressed: a key ending in `.gz` is
//! gzip, one ending in `.zst` is zstd, anything else is the raw component. Decompression stops at
//! the size limit, so a compression bomb costs at most that much memory. A component too large for
//! one ConfigMap even compressed (a Python provider carries CPython) is split into parts: the same
//! key in several ConfigMaps, whose bytes are concatenated in order before decompression
//! ([`from_config_maps`]); the sha256 pin covers the whole decompressed component.

use std::collections::BTreeSet;
use std::io::Read;

use k8s_openapi::api::core::v1::ConfigMap;
use sha2::{Digest, Sha256};

/// How a ConfigMap key's bytes are compressed, by the key's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// The raw component.
    None,
    /// gzip (`.gz`).
    Gzip,
    /// zstd (`.zst`).
    Zstd,
}

impl Compression {
    /// The compression a key's name announces.
    pub fn of_key(key: &str) -> Self {
        if key.ends_with(".gz") {
            Compression::Gzip
        } else if key.ends_with(".zst") {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// The key suffix (empty for none).
    pub fn suffix(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zstd => ".zst",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::None => "uncompressed",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        })
    }
}

/// Why a source cannot be used. Each has a condition reason ([`SourceError::reason`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The ConfigMap does not exist.
    #[error("ConfigMap {namespace}/{name} not found")]
    ConfigMapNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The host does not watch the ConfigMap's namespace.
    #[error(
        "ConfigMap namespace {namespace} is not allowed: this host reads provider sources from {allowed} only"
    )]
    NamespaceNotAllowed {
        /// The requested namespace.
        namespace: String,
        /// The one the host reads.
        allowed: String,
    },
    /// The key is in neither `binaryData` nor `data`.
    #[error("ConfigMap {config_map} has no key {key:?} (keys: {available})")]
    KeyNotFound {
        /// `namespace/name`.
        config_map: String,
        /// The key.
        key: String,
        /// The keys it has, comma-separated.
        available: String,
    },
    /// The key is in `data` (text), but a component is binary.
    #[error(
        "ConfigMap {config_map} key {key:?} is in data, not binaryData: a component is binary (use `capstan provider package`)"
    )]
    NotBinary {
        /// `namespace/name`.
        config_map: String,
        /// The key.
        key: String,
    },
    /// The key is empty.
    #[error("ConfigMap {config_map} key {key:?} is empty")]
    Empty {
        /// `namespace/name`.
        config_map: String,
        /// The key.
        key: String,
    },
    /// The (decompressed) component is larger than the limit.
    #[error("the component is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The bytes do not decompress.
    #[error("cannot decompress {compression} data: {message}")]
    Decompress {
        /// The compression the key announced.
        compression: Compression,
        /// What the decoder said.
        message: String,
    },
    /// The component is not the one the Provider pins.
    #[error("sha256 pin mismatch: the Provider pins {expected}, the ConfigMap holds {actual}")]
    PinMismatch {
        /// The pinned digest.
        expected: String,
        /// The digest of what was found.
        actual: String,
    },
}

impl SourceError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::ConfigMapNotFound { .. } => "SourceNotFound",
            SourceError::NamespaceNotAllowed { .. } => "SourceNamespaceNotAllowed",
            SourceError::KeyNotFound { .. } => "SourceKeyNotFound",
            SourceError::NotBinary { .. } => "SourceNotBinary",
            SourceError::Empty { .. } => "SourceEmpty",
            SourceError::TooLarge { .. } => "TooLarge",
            SourceError::Decompress { .. } => "DecompressFailed",
            SourceError::PinMismatch { .. } => "PinMismatch",
        }
    }
}

/// A component read from its source, not yet compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Component {
    /// The component (decompressed).
    pub bytes: Vec<u8>,
    /// Hex sha256 of `bytes`.
    pub sha256: String,
    /// Size as stored (compressed).
    pub stored_size: usize,
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Decompresses `stored` (as `compression` says), checks the size limit and the optional pin.
pub fn decode(
    stored: &[u8],
    compression: Compression,
    max_size: usize,
    pin: Option<&str>,
) -> Result<Component, SourceError> {
    let bytes = match compression {
        Compression::None => {
            if stored.len() > max_size {
                return Err(SourceError::TooLarge { limit: max_size });
            }
            stored.to_vec()
        }
        Compression::Gzip => {
            read_bounded(flate2::read::GzDecoder::new(stored), compression, max_size)?
        }
        Compression::Zstd => {
            let mut input = stored;
            let decoder = ruzstd::decoding::StreamingDecoder::new(&mut input).map_err(|err| {
                SourceError::Decompress {
                    compression,
                    message: err.to_string(),
                }
            })?;
            read_bounded(decoder, compression, max_size)?
        }
    };
    let sha256 = sha256_hex(&bytes);
    if let Some(expected) = pin
        && !expected.eq_ignore_ascii_case(&sha256)
    {
        return Err(SourceError::PinMismatch {
            expected: expected.to_owned(),
            actual: sha256,
        });
    }
    Ok(Component {
        bytes,
        sha256,
        stored_size: stored.len(),
    })
}

/// Reads at most `max_size` bytes from a decoder; more is [`SourceError::TooLarge`].
fn read_bounded(
    reader: impl Read,
    compression: Compression,
    max_size: usize,
) -> Result<Vec<u8>, SourceError> {
    let mut bytes = Vec::new();
    reader
        .take(max_size as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| SourceError::Decompress {
            compression,
            message: err.to_string(),
        })?;
    if bytes.len() > max_size {
        return Err(SourceError::TooLarge { limit: max_size });
    }
    Ok(bytes)
}

/// Reads the component in `key` of `config_map`.
pub fn from_config_map(
    config_map: &ConfigMap,
    key: &str,
    max_size: usize,
    pin: Option<&str>,
) -> Result<Component, SourceError> {
    from_config_maps(std::slice::from_ref(config_map), key, max_size, pin)
}

/// Reads a component split into parts: `key` of each ConfigMap, concatenated in order, then
/// decompressed as the key says. One ConfigMap is the usual, unsplit source. The stored bytes are
/// bounded by `max_size` too (compression never makes a component larger than that).
pub fn from_config_maps(
    parts: &[ConfigMap],
    key: &str,
    max_size: usize,
    pin: Option<&str>,
) -> Result<Component, SourceError> {
    let mut stored: Vec<u8> = Vec::new();
    for config_map in parts {
        let part = stored_bytes(config_map, key)?;
        if stored.len().saturating_add(part.len()) > max_size {
            return Err(SourceError::TooLarge { limit: max_size });
        }
        if parts.len() == 1 {
            return decode(part, Compression::of_key(key), max_size, pin);
        }
        stored.extend_from_slice(part);
    }
    decode(&stored, Compression::of_key(key), max_size, pin)
}

/// The bytes stored under `key` of `config_map` (binaryData, non-empty).
fn stored_bytes<'a>(config_map: &'a ConfigMap, key: &str) -> Result<&'a [u8], SourceError> {
    let id = format!(
        "{}/{}",
        config_map.metadata.namespace.as_deref().unwrap_or_default(),
        config_map.metadata.name.as_deref().unwrap_or_default()
    );
    let binary = config_map
        .binary_data
        .as_ref()
        .and_then(|data| data.get(key));
    let Some(stored) = binary else {
        if config_map
            .data
            .as_ref()
            .is_some_and(|data| data.contains_key(key))
        {
            return Err(SourceError::NotBinary {
                config_map: id,
                key: key.to_owned(),
            });
        }
        let available: BTreeSet<&str> = config_map
            .binary_data
            .iter()
            .flat_map(|data| data.keys())
            .chain(config_map.data.iter().flat_map(|data| data.keys()))
            .map(String::as_str)
            .collect();
        return Err(SourceError::KeyNotFound {
            config_map: id,
            key: key.to_owned(),
            available: if available.is_empty() {
                "none".to_owned()
            } else {
                available.into_iter().collect::<Vec<_>>().join(", ")
            },
        });
    };
    if stored.0.is_empty() {
        return Err(SourceError::Empty {
            config_map: id,
            key: key.to_owned(),
        });
    }
    Ok(&stored.0)
}

/// The text under `key` of `config_map` (`data`, or UTF-8 `binaryData`): a PEM key or CA
/// bundle, a Sigstore bundle.
pub fn text_key(config_map: &ConfigMap, key: &str) -> Option<String> {
    if let Some(text) = config_map.data.as_ref().and_then(|d| d.get(key)) {
        return Some(text.clone());
    }
    let binary = config_map.binary_data.as_ref().and_then(|d| d.get(key))?;
    String::from_utf8(binary.0.clone()).ok()
}

/// Compresses a component for a ConfigMap key (`capstan provider package`).
pub fn encode(bytes: &[u8], compression: Compression) -> Vec<u8> {
    match compression {
        Compression::None => bytes.to_vec(),
        Compression::Gzip => {
            use std::io::Write;
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            // Writing to a Vec cannot fail.
            encoder
                .write_all(bytes)
                .and_then(|()| encoder.finish())
                .unwrap_or_default()
        }
        Compression::Zstd => {
            ruzstd::encoding::compress_to_vec(bytes, ruzstd::encoding::CompressionLevel::Fastest)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    use super::*;

    fn config_map(binary: &[(&str, &[u8])], data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("src".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            binary_data: Some(
                binary
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn compression_follows_the_key() {
        assert_eq!(Compression::of_key("provider.wasm"), Compression::None);
        assert_eq!(Compression::of_key("provider.wasm.gz"), Compression::Gzip);
        assert_eq!(Compression::of_key("provider.wasm.zst"), Compression::Zstd);
    }

    #[test]
    fn round_trips_every_compression() {
        let component: Vec<u8> = (0..50_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let stored = encode(&component, compression);
            assert!(!stored.is_empty());
            if compression != Compression::None {
                assert!(stored.len() < component.len(), "{compression} compresses");
            }
            let decoded = decode(&stored, compression, 1 << 20, None).unwrap();
            assert_eq!(decoded.bytes, component, "{compression}");
            assert_eq!(decoded.sha256, sha256_hex(&component));
            assert_eq!(decoded.stored_size, stored.len());
        }
    }

    #[test]
    fn pins_are_checked_case_insensitively() {
        let component = b"\0asm component".to_vec();
        let digest = sha256_hex(&component);
        assert!(decode(&component, Compression::None, 1024, Some(&digest)).is_ok());
        assert!(
            decode(
                &component,
                Compression::None,
                1024,
                Some(&digest.to_uppercase())
            )
            .is_ok()
        );
        let err = decode(&component, Compression::None, 1024, Some(&"0".repeat(64))).unwrap_err();
        assert_eq!(err.reason(), "PinMismatch");
        assert!(err.to_string().contains(&digest), "{err}");
    }

    #[test]
    fn size_limits_hold_for_raw_and_compressed_data() {
        let big = vec![0u8; 10_000];
        let err = decode(&big, Compression::None, 9_999, None).unwrap_err();
        assert_eq!(err, SourceError::TooLarge { limit: 9_999 });
        // A bomb: 10 MB of zeros is a few kB compressed, and decoding stops at the limit.
        let bomb = vec![0u8; 10 << 20];
        for compression in [Compression::Gzip, Compression::Zstd] {
            let stored = encode(&bomb, compression);
            assert!(stored.len() < 100_000, "{compression}: {}", stored.len());
            let err = decode(&stored, compression, 1 << 20, None).unwrap_err();
            assert_eq!(
                err,
                SourceError::TooLarge { limit: 1 << 20 },
                "{compression}"
            );
        }
    }

    #[test]
    fn garbage_does_not_decompress() {
        for compression in [Compression::Gzip, Compression::Zstd] {
            let err = decode(b"not compressed at all", compression, 1024, None).unwrap_err();
            assert_eq!(err.reason(), "DecompressFailed", "{compression}: {err}");
        }
        let mut truncated = encode(&[7u8; 4096], Compression::Gzip);
        truncated.truncate(truncated.len() / 2);
        let err = decode(&truncated, Compression::Gzip, 1 << 20, None).unwrap_err();
        assert_eq!(err.reason(), "DecompressFailed", "{err}");
    }

    #[test]
    fn config_map_keys() {
        let cm = config_map(
            &[("p.wasm", b"\0asm"), ("empty.wasm", b"")],
            &[("text", "x")],
        );
        assert_eq!(
            from_config_map(&cm, "p.wasm", 1024, None).unwrap().bytes,
            b"\0asm"
        );
        let missing = from_config_map(&cm, "q.wasm", 1024, None).unwrap_err();
        assert_eq!(missing.reason(), "SourceKeyNotFound");
        assert!(
            missing.to_string().contains("empty.wasm, p.wasm, text"),
            "{missing}"
        );
        assert_eq!(
            from_config_map(&cm, "text", 1024, None)
                .unwrap_err()
                .reason(),
            "SourceNotBinary"
        );
        assert_eq!(
            from_config_map(&cm, "empty.wasm", 1024, None)
                .unwrap_err()
                .reason(),
            "SourceEmpty"
        );
    }

    #[test]
    fn parts_concatenate_before_decompression_and_the_pin_covers_the_whole() {
        let component: Vec<u8> = (0..60_000u32)
            .flat_map(|i| (i % 97).to_le_bytes())
            .collect();
        let digest = sha256_hex(&component);
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let stored = encode(&component, compression);
            let key = format!("provider.wasm{}", compression.suffix());
            let parts: Vec<ConfigMap> = stored
                .chunks(stored.len().div_ceil(3))
                .map(|chunk| config_map(&[(key.as_str(), chunk)], &[]))
                .collect();
            assert_eq!(parts.len(), 3);
            let decoded = from_config_maps(&parts, &key, 1 << 20, Some(&digest)).unwrap();
            assert_eq!(decoded.bytes, component, "{compression}");
            assert_eq!(decoded.stored_size, stored.len());
            // Parts out of order are another component: the pin refuses it (or it does not
            // decompress).
            let swapped = [parts[1].clone(), parts[0].clone(), parts[2].clone()];
            assert!(from_config_maps(&swapped, &key, 1 << 20, Some(&digest)).is_err());
            // A part missing its key names the key.
            let broken = [parts[0].clone(), config_map(&[("other", b"x")], &[])];
            assert_eq!(
                from_config_maps(&broken, &key, 1 << 20, None)
                    .unwrap_err()
                    .reason(),
                "SourceKeyNotFound"
            );
        }
        // The stored bytes are bounded as well as the decompressed ones.
        let parts = [
            config_map(&[("p.wasm", &[1u8; 600])], &[]),
            config_map(&[("p.wasm", &[1u8; 600])], &[]),
        ];
        assert_eq!(
            from_config_maps(&parts, "p.wasm", 1000, None).unwrap_err(),
            SourceError::TooLarge { limit: 1000 }
        );
    }
}
