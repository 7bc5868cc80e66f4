//! Pushing a component as an OCI artifact in the CNCF wasm layout the host pulls (config
//! `application/vnd.wasm.config.v0+json`, one layer `application/wasm`): what `capstan provider
//! push` does.

use std::collections::BTreeMap;

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use serde_json::json;

use super::layout::{
    OCI_MANIFEST, TITLE_ANNOTATION, WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE,
};
use super::{OciError, Remote};
use crate::provider::source::sha256_hex;

/// What a push stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The manifest's digest (`sha256:<hex>`): what to sign and to pin.
    pub manifest_digest: String,
    /// The layer's digest.
    pub layer_digest: String,
}

/// The wasm config blob (`architecture`/`os` as the CNCF layout has them, and the layer's
/// digest).
fn config_blob(layer_digest: &str) -> Vec<u8> {
    json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    })
    .to_string()
    .into_bytes()
}

/// The manifest for `component`, its layer named `file_name` (so `oras pull` writes it under
/// that name), with `annotations` on the manifest; the manifest's bytes as pushed.
pub fn manifest(
    component: &[u8],
    file_name: &str,
    annotations: BTreeMap<String, String>,
) -> Result<(Vec<u8>, ImageLayer, Config), serde_json::Error> {
    let layer = ImageLayer::new(
        component.to_vec(),
        WASM_LAYER_MEDIA_TYPE.to_owned(),
        Some(BTreeMap::from([(
            TITLE_ANNOTATION.to_owned(),
            file_name.to_owned(),
        )])),
    );
    let config = Config::new(
        config_blob(&layer.sha256_digest()),
        WASM_CONFIG_MEDIA_TYPE.to_owned(),
        None,
    );
    let mut manifest = OciImageManifest::build(
        std::slice::from_ref(&layer),
        &config,
        (!annotations.is_empty()).then_some(annotations),
    );
    manifest.media_type = Some(OCI_MANIFEST.to_owned());
    // Serialized once here: these bytes are what the registry stores and the digest names.
    let bytes = serde_json::to_vec(&manifest)?;
    Ok((bytes, layer, config))
}

fn push_error(what: &str, err: oci_client::errors::OciDistributionError) -> OciError {
    OciError::Push {
        reference: what.to_owned(),
        message: err.to_string(),
    }
}

/// Pushes `component` to `remote` (its tag, or the digest it must get). Returns the digests.
pub async fn push(
    remote: &Remote,
    component: &[u8],
    file_name: &str,
    annotations: BTreeMap<String, String>,
) -> Result<Pushed, OciError> {
    let client = remote.client();
    let reference = &remote.reference;
    let what = reference.whole();
    let (manifest, layer, config) =
        manifest(component, file_name, annotations).map_err(|err| OciError::Push {
            reference: what.clone(),
            message: format!("cannot serialize the manifest: {err}"),
        })?;
    let manifest_digest = format!("sha256:{}", sha256_hex(&manifest));
    if let Some(expected) = reference.digest()
        && expected != manifest_digest
    {
        return Err(OciError::DigestMismatch {
            what: format!("the manifest pushed to {}", reference.whole()),
            expected: expected.to_owned(),
            actual: manifest_digest,
        });
    }
    client
        .auth(reference, &remote.auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|err| push_error(&what, err))?;
    let layer_digest = layer.sha256_digest();
    client
        .push_blob(reference, layer.data, &layer_digest)
        .await
        .map_err(|err| push_error(&what, err))?;
    let config_digest = config.sha256_digest();
    client
        .push_blob(reference, config.data, &config_digest)
        .await
        .map_err(|err| push_error(&what, err))?;
    let content_type = http::HeaderValue::from_static(OCI_MANIFEST);
    client
        .push_manifest_raw(reference, manifest, content_type)
        .await
        .map_err(|err| push_error(&what, err))?;
    Ok(Pushed {
        manifest_digest,
        layer_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::oci::layout::{self, Layout};

    #[test]
    fn the_pushed_manifest_is_the_layout_the_host_pulls() {
        let component = b"\0asm\x0d\0\x01\0";
        let (bytes, layer, config) = manifest(
            component,
            "kwok.wasm",
            BTreeMap::from([(
                "org.opencontainers.image.version".to_owned(),
                "1".to_owned(),
            )]),
        )
        .unwrap();
        let found = layout::wasm_layer(&bytes).unwrap();
        assert_eq!(found.layout, Layout::CncfWasm);
        assert_eq!(found.digest, format!("sha256:{}", sha256_hex(component)));
        assert_eq!(found.size, component.len() as u64);
        assert_eq!(layer.sha256_digest(), found.digest);
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed["mediaType"], OCI_MANIFEST);
        assert_eq!(parsed["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(
            parsed["layers"][0]["annotations"][TITLE_ANNOTATION],
            "kwok.wasm"
        );
        assert_eq!(
            parsed["annotations"]["org.opencontainers.image.version"],
            "1"
        );
        let config: serde_json::Value = serde_json::from_slice(&config.data).unwrap();
        assert_eq!(config["layerDigests"][0], found.digest.as_str());
        assert_eq!(config["architecture"], "wasm");
    }
}
