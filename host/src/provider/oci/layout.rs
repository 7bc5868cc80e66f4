//! Which layer of an OCI manifest is the provider's component. Three layouts are read:
//!
//! - the CNCF wasm artifact layout (TAG Runtime's wasm OCI artifact; also what `wkg oci push`
//!   writes): config `application/vnd.wasm.config.v0+json`, one layer `application/wasm`;
//! - the older Bytecode Alliance layout (`application/vnd.wasm.content.layer.v1+wasm`);
//! - a file pushed with `oras push FILE[:TYPE]`: any config, one layer whose
//!   `org.opencontainers.image.title` names a `.wasm` (or `.wasm.gz`, `.wasm.zst`) file, whatever
//!   its media type.
//!
//! An image index, a manifest without such a layer, or one with several, is refused with what it
//! holds.

use serde::Deserialize;

use crate::provider::source::Compression;

/// The CNCF wasm artifact config media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artifact layer media type.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The Bytecode Alliance's earlier wasm layer media type.
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker's v2 image manifest media type.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const INDEXES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// The annotation `oras push` names each file's layer with.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// A manifest that holds no usable component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not a manifest at all.
    #[error("the manifest does not parse: {0}")]
    Parse(String),
    /// An index (multi-platform list): a provider is one component, for no platform.
    #[error(
        "the reference is an image index ({0}), not a manifest: push the component as a single-manifest artifact"
    )]
    Index(String),
    /// No layer is a component.
    #[error(
        "no layer is a wasm component (media type {WASM_LAYER_MEDIA_TYPE}, or a title ending in .wasm); layers: {0}"
    )]
    NoWasmLayer(String),
    /// Several layers are.
    #[error("{0} layers are wasm components; a provider artifact has exactly one")]
    Ambiguous(usize),
    /// A digest that is not `sha256:<64 hex>`.
    #[error("layer digest {0:?} is not sha256:<64 hex digits>")]
    Digest(String),
}

/// Which layout the manifest has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// CNCF wasm artifact (`wkg oci push` too).
    CncfWasm,
    /// The earlier `application/vnd.wasm.content.layer.v1+wasm` layer.
    LegacyWasm,
    /// A file layer named `*.wasm` (`oras push`).
    File,
}

/// The layer holding the component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmLayer {
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size as stored, from the manifest.
    pub size: u64,
    /// How the layer's bytes are compressed (from a file layer's title; none otherwise).
    pub compression: Compression,
    /// The layout it was found by.
    pub layout: Layout,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<serde_json::Value>,
    #[serde(default)]
    layers: Vec<Descriptor>,
}

/// A content descriptor, as much of it as the host reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type.
    pub media_type: String,
    /// `algorithm:hex`.
    pub digest: String,
    /// Bytes.
    #[serde(default)]
    pub size: i64,
    /// Annotations.
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The layers of a manifest (an index has none: [`LayoutError::Index`]).
pub fn layers(manifest: &[u8]) -> Result<Vec<Descriptor>, LayoutError> {
    let parsed: Manifest =
        serde_json::from_slice(manifest).map_err(|err| LayoutError::Parse(err.to_string()))?;
    if let Some(media_type) = &parsed.media_type
        && INDEXES.contains(&media_type.as_str())
    {
        return Err(LayoutError::Index(media_type.clone()));
    }
    if parsed.manifests.is_some() {
        return Err(LayoutError::Index("manifests listed".to_owned()));
    }
    Ok(parsed.layers)
}

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

/// The manifests an image index lists (the referrers of an artifact, for instance).
pub fn index_manifests(index: &[u8]) -> Result<Vec<Descriptor>, LayoutError> {
    let parsed: Index =
        serde_json::from_slice(index).map_err(|err| LayoutError::Parse(err.to_string()))?;
    Ok(parsed.manifests)
}

/// The component's layer in `manifest` (the raw JSON).
pub fn wasm_layer(manifest: &[u8]) -> Result<WasmLayer, LayoutError> {
    let layers = layers(manifest)?;
    let typed: Vec<(&Descriptor, Layout)> = layers
        .iter()
        .filter_map(|layer| match layer.media_type.as_str() {
            WASM_LAYER_MEDIA_TYPE => Some((layer, Layout::CncfWasm)),
            LEGACY_WASM_LAYER_MEDIA_TYPE => Some((layer, Layout::LegacyWasm)),
            _ => None,
        })
        .collect();
    let (layer, layout, compression) = match typed.as_slice() {
        [(layer, layout)] => (*layer, *layout, Compression::None),
        [] => {
            let files: Vec<(&Descriptor, Compression)> = layers
                .iter()
                .filter_map(|layer| {
                    let title = layer.annotations.get(TITLE_ANNOTATION)?;
                    let stem = title.trim_end_matches(".gz").trim_end_matches(".zst");
                    stem.ends_with(".wasm")
                        .then(|| (layer, Compression::of_key(title)))
                })
                .collect();
            match files.as_slice() {
                [(layer, compression)] => (*layer, Layout::File, *compression),
                [] => {
                    let held: Vec<String> = layers
                        .iter()
                        .map(|layer| match layer.annotations.get(TITLE_ANNOTATION) {
                            Some(title) => format!("{} ({title})", layer.media_type),
                            None => layer.media_type.clone(),
                        })
                        .collect();
                    return Err(LayoutError::NoWasmLayer(if held.is_empty() {
                        "none".to_owned()
                    } else {
                        held.join(", ")
                    }));
                }
                more => return Err(LayoutError::Ambiguous(more.len())),
            }
        }
        more => return Err(LayoutError::Ambiguous(more.len())),
    };
    if !is_sha256_digest(&layer.digest) {
        return Err(LayoutError::Digest(layer.digest.clone()));
    }
    Ok(WasmLayer {
        digest: layer.digest.clone(),
        size: u64::try_from(layer.size).unwrap_or(0),
        compression,
        layout,
    })
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn manifest(config: &str, layers: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": D2, "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn cncf_wasm_layout() {
        let m = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            json!([{"mediaType": "application/wasm", "digest": D1, "size": 1234}]),
        );
        let layer = wasm_layer(&m).unwrap();
        assert_eq!(layer.digest, D1);
        assert_eq!(layer.size, 1234);
        assert_eq!(layer.layout, Layout::CncfWasm);
        assert_eq!(layer.compression, Compression::None);
    }

    #[test]
    fn legacy_wasm_layout() {
        let m = manifest(
            "application/vnd.wasm.config.v1+json",
            json!([{"mediaType": LEGACY_WASM_LAYER_MEDIA_TYPE, "digest": D1, "size": 7}]),
        );
        assert_eq!(wasm_layer(&m).unwrap().layout, Layout::LegacyWasm);
    }

    #[test]
    fn oras_file_layout_by_title_whatever_the_media_type() {
        // `oras push ref provider.wasm` (default media type) and `provider.wasm.gz:application/gzip`.
        for (title, media_type, compression) in [
            (
                "provider.wasm",
                "application/vnd.oci.image.layer.v1.tar",
                Compression::None,
            ),
            ("kwok.wasm.gz", "application/gzip", Compression::Gzip),
            ("kwok.wasm.zst", "application/zstd", Compression::Zstd),
        ] {
            let m = manifest(
                "application/vnd.oci.empty.v1+json",
                json!([
                    {"mediaType": "text/plain", "digest": D2, "size": 3,
                     "annotations": {TITLE_ANNOTATION: "README.md"}},
                    {"mediaType": media_type, "digest": D1, "size": 99,
                     "annotations": {TITLE_ANNOTATION: title}},
                ]),
            );
            let layer = wasm_layer(&m).unwrap();
            assert_eq!(layer.layout, Layout::File, "{title}");
            assert_eq!(layer.digest, D1);
            assert_eq!(layer.compression, compression, "{title}");
        }
    }

    #[test]
    fn refusals_say_what_the_manifest_holds() {
        let none = manifest(
            "application/vnd.oci.image.config.v1+json",
            json!([{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D1, "size": 5}]),
        );
        let err = wasm_layer(&none).unwrap_err();
        assert!(
            matches!(&err, LayoutError::NoWasmLayer(held) if held.contains("tar+gzip")),
            "{err}"
        );
        assert!(matches!(
            wasm_layer(&manifest("x", json!([]))).unwrap_err(),
            LayoutError::NoWasmLayer(held) if held == "none"
        ));

        let two = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            json!([
                {"mediaType": "application/wasm", "digest": D1, "size": 1},
                {"mediaType": "application/wasm", "digest": D2, "size": 1},
            ]),
        );
        assert_eq!(wasm_layer(&two).unwrap_err(), LayoutError::Ambiguous(2));

        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [],
        }))
        .unwrap();
        assert!(matches!(
            wasm_layer(&index).unwrap_err(),
            LayoutError::Index(_)
        ));

        assert!(matches!(
            wasm_layer(b"<html>not json</html>").unwrap_err(),
            LayoutError::Parse(_)
        ));

        let bad_digest = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            json!([{"mediaType": "application/wasm", "digest": "md5:abc", "size": 1}]),
        );
        assert!(matches!(
            wasm_layer(&bad_digest).unwrap_err(),
            LayoutError::Digest(_)
        ));
    }

    #[test]
    fn indexes_list_their_manifests() {
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": OCI_MANIFEST, "digest": D1, "size": 877,
                           "artifactType": "application/vnd.oci.empty.v1+json"}],
        }))
        .unwrap();
        let listed = index_manifests(&index).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].digest, D1);
        assert!(index_manifests(b"not json").is_err());
    }

    #[test]
    fn digests() {
        assert!(is_sha256_digest(D1));
        assert!(!is_sha256_digest(&D1.to_uppercase()));
        assert!(!is_sha256_digest("sha256:123"));
        assert!(!is_sha256_digest(
            "sha512:1111111111111111111111111111111111111111111111111111111111111111"
        ));
    }
}
