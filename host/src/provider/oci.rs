//! Providers pulled from OCI registries (`Provider.spec.source.oci`) with `oci-client`: the
//! manifest (by tag or digest), the component's layer ([`layout`]), bounded by the size limit and
//! checked against its digest, cached on disk by digest ([`cache`]), and — when the Provider asks
//! for verification — the cosign signatures stored beside it (the `sha256-<hex>.sig` tag).
//!
//! Pulls are the host's egress, not the provider's: `spec.egress` does not apply to them.

pub mod auth;
pub mod cache;
pub mod layout;
pub mod push;

use std::time::Duration;

use futures::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use self::cache::BlobCache;
use self::layout::{Layout, LayoutError};
use crate::provider::source::{Compression, sha256_hex};

/// Largest manifest read (the registry's own limit is 4 MiB).
const MAX_MANIFEST: usize = 4 << 20;
/// Largest cosign signature payload read.
const MAX_SIGNATURE_PAYLOAD: usize = 64 << 10;
/// Largest Sigstore bundle read.
const MAX_BUNDLE: usize = 1 << 20;
/// At most this many referrers are looked at.
const MAX_REFERRERS: usize = 16;
/// The media type prefix of Sigstore bundles (`application/vnd.dev.sigstore.bundle.v0.3+json`,
/// `application/vnd.dev.sigstore.bundle+json;version=0.2`).
pub const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// cosign's simple-signing layer media type.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a simple-signing layer's base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// Why a pull failed. Each has a condition reason ([`OciError::reason`]).
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse.
    #[error("spec.source.oci.reference {reference:?}: {message}")]
    Reference {
        /// The reference.
        reference: String,
        /// What is wrong.
        message: String,
    },
    /// The registry could not be reached or refused.
    #[error("pulling {reference}: {message}")]
    Pull {
        /// What was pulled.
        reference: String,
        /// What the client said.
        message: String,
    },
    /// A push was refused or failed (`capstan provider push`).
    #[error("pushing to {reference}: {message}")]
    Push {
        /// Where to.
        reference: String,
        /// What the client said.
        message: String,
    },
    /// The registry has no such manifest (a tag or digest that does not exist).
    #[error("{reference}: not found in the registry")]
    NotFound {
        /// The reference.
        reference: String,
    },
    /// The manifest holds no usable component.
    #[error("{reference}: {source}")]
    Layout {
        /// The reference.
        reference: String,
        /// What is wrong.
        source: LayoutError,
    },
    /// What the registry served is not what was asked for.
    #[error("{what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// Which object.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// A manifest or layer is larger than the limit.
    #[error("{what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// Which object.
        what: String,
        /// The limit.
        limit: usize,
    },
}

impl OciError {
    /// The condition and Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            OciError::Reference { .. } => "InvalidReference",
            OciError::Pull { .. } | OciError::NotFound { .. } => "PullFailed",
            OciError::Push { .. } => "PushFailed",
            OciError::Layout { .. } => "InvalidArtifact",
            OciError::DigestMismatch { .. } => "DigestMismatch",
            OciError::TooLarge { .. } => "TooLarge",
        }
    }
}

/// How to reach a registry.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The reference as written.
    pub reference: Reference,
    /// Credentials (anonymous by default).
    pub auth: RegistryAuth,
    /// Plain HTTP instead of HTTPS (a registry on loopback or a lab network).
    pub plain_http: bool,
}

impl Remote {
    /// Parses `reference` (`registry/repository:tag` or `registry/repository@sha256:<hex>`).
    pub fn parse(reference: &str, auth: RegistryAuth, plain_http: bool) -> Result<Self, OciError> {
        let parsed: Reference =
            reference
                .parse()
                .map_err(|err: oci_client::ParseError| OciError::Reference {
                    reference: reference.to_owned(),
                    message: err.to_string(),
                })?;
        if let Some(digest) = parsed.digest()
            && !layout::is_sha256_digest(digest)
        {
            return Err(OciError::Reference {
                reference: reference.to_owned(),
                message: format!("digest {digest:?} is not sha256:<64 lowercase hex digits>"),
            });
        }
        Ok(Self {
            reference: parsed,
            auth,
            plain_http,
        })
    }

    /// Tag `tag` of the same repository.
    fn tagged(&self, tag: String) -> Reference {
        Reference::with_tag(
            self.reference.registry().to_owned(),
            self.reference.repository().to_owned(),
            tag,
        )
    }

    /// Whether the reference names a tag only (so it is polled for moves).
    pub fn is_tag(&self) -> bool {
        self.reference.digest().is_none()
    }

    fn client(&self) -> Client {
        crate::provider::crypto::install();
        Client::new(ClientConfig {
            protocol: if self.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            platform_resolver: None,
            ..ClientConfig::default()
        })
    }
}

/// A component pulled from a registry, not yet decompressed or verified.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The manifest's digest (`sha256:<hex>`), computed from its bytes.
    pub manifest_digest: String,
    /// The manifest as served (what a Sigstore bundle referrer signs).
    pub manifest: Vec<u8>,
    /// The layer's bytes as stored.
    pub stored: Vec<u8>,
    /// How they are compressed.
    pub compression: Compression,
    /// The layout the manifest has.
    pub layout: Layout,
    /// Whether the layer came from the disk cache.
    pub cached: bool,
}

/// One cosign simple-signing signature: its payload and base64 signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleSignature {
    /// The signed payload (JSON naming the manifest digest).
    pub payload: Vec<u8>,
    /// The base64 signature of the payload.
    pub signature: String,
}

fn pull_error(what: &str, err: OciDistributionError) -> OciError {
    OciError::Pull {
        reference: what.to_owned(),
        message: err.to_string(),
    }
}

/// Reads a blob of `digest` from `reference`'s repository, at most `limit` bytes, checked
/// against the digest.
async fn pull_blob(
    client: &Client,
    reference: &Reference,
    digest: &str,
    limit: usize,
) -> Result<Vec<u8>, OciError> {
    let what = format!("{}@{digest}", reference.repository());
    let mut sized = client
        .pull_blob_stream(reference, digest)
        .await
        .map_err(|err| pull_error(&what, err))?;
    if sized.content_length.is_some_and(|len| len > limit as u64) {
        return Err(OciError::TooLarge { what, limit });
    }
    let mut bytes =
        Vec::with_capacity(sized.content_length.unwrap_or(0).min(limit as u64) as usize);
    while let Some(chunk) = sized.stream.next().await {
        let chunk = chunk.map_err(|err| OciError::Pull {
            reference: what.clone(),
            message: err.to_string(),
        })?;
        if bytes.len() + chunk.len() > limit {
            return Err(OciError::TooLarge { what, limit });
        }
        bytes.extend_from_slice(&chunk);
    }
    let actual = format!("sha256:{}", sha256_hex(&bytes));
    if actual != digest {
        return Err(OciError::DigestMismatch {
            what,
            expected: digest.to_owned(),
            actual,
        });
    }
    Ok(bytes)
}

/// The manifest of `reference` (raw), and its digest computed from the bytes; a reference by
/// digest must get exactly that manifest.
async fn pull_manifest(
    client: &Client,
    remote: &Remote,
    reference: &Reference,
) -> Result<(Vec<u8>, String), OciError> {
    pull_manifest_as(
        client,
        remote,
        reference,
        &[layout::OCI_MANIFEST, layout::DOCKER_MANIFEST],
    )
    .await
}

/// [`pull_manifest`] accepting `media_types`.
async fn pull_manifest_as(
    client: &Client,
    remote: &Remote,
    reference: &Reference,
    media_types: &[&str],
) -> Result<(Vec<u8>, String), OciError> {
    let (bytes, _) = client
        .pull_manifest_raw(reference, &remote.auth, media_types)
        .await
        .map_err(|err| {
            if is_not_found(&err) {
                OciError::NotFound {
                    reference: reference.whole(),
                }
            } else {
                pull_error(&reference.whole(), err)
            }
        })?;
    if bytes.len() > MAX_MANIFEST {
        return Err(OciError::TooLarge {
            what: format!("the manifest of {}", reference.whole()),
            limit: MAX_MANIFEST,
        });
    }
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    if let Some(expected) = reference.digest()
        && expected != digest
    {
        return Err(OciError::DigestMismatch {
            what: format!("the manifest of {}", reference.whole()),
            expected: expected.to_owned(),
            actual: digest,
        });
    }
    Ok((bytes.to_vec(), digest))
}

/// Pulls the component `remote` names: its manifest, then its layer (from `cache` when there,
/// else from the registry, then cached). Layers over `max_size` bytes are refused before a byte
/// of them is read.
pub async fn pull(
    remote: &Remote,
    cache: Option<&BlobCache>,
    max_size: usize,
) -> Result<Pulled, OciError> {
    let client = remote.client();
    let (manifest, manifest_digest) = pull_manifest(&client, remote, &remote.reference).await?;
    let layer = layout::wasm_layer(&manifest).map_err(|source| OciError::Layout {
        reference: remote.reference.whole(),
        source,
    })?;
    if layer.size > max_size as u64 {
        return Err(OciError::TooLarge {
            what: format!("layer {} ({} bytes)", layer.digest, layer.size),
            limit: max_size,
        });
    }
    if let Some(stored) = cache.and_then(|cache| cache.get(&layer.digest)) {
        return Ok(Pulled {
            manifest_digest,
            manifest,
            stored,
            compression: layer.compression,
            layout: layer.layout,
            cached: true,
        });
    }
    let stored = pull_blob(&client, &remote.reference, &layer.digest, max_size).await?;
    if let Some(cache) = cache
        && let Err(err) = cache.put(&layer.digest, &stored)
    {
        tracing::warn!(dir = %cache.dir().display(), error = %err, "cannot cache a pulled layer");
    }
    Ok(Pulled {
        manifest_digest,
        manifest,
        stored,
        compression: layer.compression,
        layout: layer.layout,
        cached: false,
    })
}

/// The tag cosign stores the signatures of `manifest_digest` under: `sha256-<hex>.sig`.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// The cosign signatures of `manifest_digest` in `remote`'s repository (the `.sig` tag scheme);
/// none when the tag does not exist.
pub async fn signatures(
    remote: &Remote,
    manifest_digest: &str,
) -> Result<Vec<SimpleSignature>, OciError> {
    let client = remote.client();
    let reference = remote.tagged(signature_tag(manifest_digest));
    let manifest = match pull_manifest(&client, remote, &reference).await {
        Ok((manifest, _)) => manifest,
        Err(OciError::NotFound { .. }) => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let layers = layout::layers(&manifest).map_err(|source| OciError::Layout {
        reference: reference.whole(),
        source,
    })?;
    let mut found = Vec::new();
    for layer in layers {
        if layer.media_type != SIMPLE_SIGNING_MEDIA_TYPE {
            continue;
        }
        let Some(signature) = layer.annotations.get(SIGNATURE_ANNOTATION) else {
            continue;
        };
        let payload = pull_blob(&client, &reference, &layer.digest, MAX_SIGNATURE_PAYLOAD).await?;
        found.push(SimpleSignature {
            payload,
            signature: signature.clone(),
        });
    }
    Ok(found)
}

/// The Sigstore bundles attached to `manifest_digest` as OCI referrers (what `cosign sign
/// --new-bundle-format` writes): through the referrers API, or the `sha256-<hex>` tag cosign
/// falls back to on a registry without it. None when there are none.
pub async fn bundle_referrers(
    remote: &Remote,
    manifest_digest: &str,
) -> Result<Vec<String>, OciError> {
    let client = remote.client();
    let subject = remote
        .reference
        .clone_with_digest(manifest_digest.to_owned());
    let listed: Vec<layout::Descriptor> = match client.pull_referrers(&subject, None).await {
        Ok(index) => index
            .manifests
            .into_iter()
            .map(|m| layout::Descriptor {
                media_type: m.media_type,
                digest: m.digest,
                size: m.size,
                annotations: m.annotations.unwrap_or_default().into_iter().collect(),
            })
            .collect(),
        Err(_) => {
            // No referrers API: cosign's fallback tag.
            let tag = remote.tagged(manifest_digest.replacen(':', "-", 1));
            match pull_manifest_as(&client, remote, &tag, &[OCI_INDEX]).await {
                Ok((index, _)) => {
                    layout::index_manifests(&index).map_err(|source| OciError::Layout {
                        reference: tag.whole(),
                        source,
                    })?
                }
                Err(OciError::NotFound { .. }) => Vec::new(),
                Err(err) => return Err(err),
            }
        }
    };
    let mut bundles = Vec::new();
    for referrer in listed.into_iter().take(MAX_REFERRERS) {
        let at = subject.clone_with_digest(referrer.digest.clone());
        let (manifest, _) = pull_manifest(&client, remote, &at).await?;
        let layers = layout::layers(&manifest).map_err(|source| OciError::Layout {
            reference: at.whole(),
            source,
        })?;
        for layer in layers {
            if !layer.media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX) {
                continue;
            }
            let bytes = pull_blob(&client, &at, &layer.digest, MAX_BUNDLE).await?;
            if let Ok(text) = String::from_utf8(bytes) {
                bundles.push(text);
            }
        }
    }
    Ok(bundles)
}

/// Everything stored in the registry that may sign `manifest_digest`: cosign's simple-signing
/// signatures (the `.sig` tag) and the Sigstore bundles attached as referrers — what
/// [`crate::provider::verify::verify_oci`] checks.
pub async fn signature_evidence(
    remote: &Remote,
    manifest_digest: &str,
) -> Result<(Vec<SimpleSignature>, Vec<String>), OciError> {
    let signatures = signatures(remote, manifest_digest).await?;
    let bundles = bundle_referrers(remote, manifest_digest).await?;
    Ok((signatures, bundles))
}

/// Whether a client error is the registry's "no such manifest" (`MANIFEST_UNKNOWN`,
/// `NAME_UNKNOWN`, or a bare 404).
fn is_not_found(err: &OciDistributionError) -> bool {
    use oci_client::errors::OciErrorCode;
    match err {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let tag = Remote::parse(
            "127.0.0.1:5000/capstan/kwok:v1",
            RegistryAuth::Anonymous,
            true,
        )
        .unwrap();
        assert!(tag.is_tag());
        assert_eq!(tag.reference.registry(), "127.0.0.1:5000");
        assert_eq!(tag.reference.repository(), "capstan/kwok");
        let pinned = format!("ghcr.io/acme/kwok@sha256:{}", "a".repeat(64));
        assert!(
            !Remote::parse(&pinned, RegistryAuth::Anonymous, false)
                .unwrap()
                .is_tag()
        );
        for bad in ["", "UPPER/Case:tag", "ghcr.io/acme/kwok@sha256:abc"] {
            let err = Remote::parse(bad, RegistryAuth::Anonymous, false).unwrap_err();
            assert_eq!(err.reason(), "InvalidReference", "{bad}: {err}");
        }
    }

    #[test]
    fn cosign_signature_tag() {
        let digest = format!("sha256:{}", "0f".repeat(32));
        assert_eq!(
            signature_tag(&digest),
            format!("sha256-{}.sig", "0f".repeat(32))
        );
    }
}
