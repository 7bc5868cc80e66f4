//! A Provider's component read from its source, and its signature checked, before anything is
//! compiled: the ConfigMaps of `spec.source.configMap` (a split component's parts in order, and
//! the Sigstore bundle of `bundleKey`) or the artifact of `spec.source.oci` (with its pull
//! Secret), then the keys, identities and trust root of `spec.verification`, read from the
//! source namespace.
//!
//! Only reads: the Provider controller decides what a refusal means for the Provider's status.

use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};

use crate::api::provider::{ConfigMapKeySource, OciSource, ProviderSpec, ProviderVerification};
use crate::provider::oci::{self, OciError, Remote, auth::AuthError, cache::BlobCache};
use crate::provider::source::{self, Component, SourceError};
use crate::provider::verify::{self, Keys, VerifyError};

/// Why a component could not be fetched or its signature was refused. [`FetchError::Kube`] is
/// the API failing (worth retrying); every other is the source's or the signature's fault.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A ConfigMap source is missing or its component is invalid.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// An OCI pull failed.
    #[error(transparent)]
    Oci(#[from] OciError),
    /// The pull Secret is missing or unusable.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The signature, or what it is checked against, was refused.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// Neither or both of the source kinds are set.
    #[error("set exactly one of spec.source.configMap and spec.source.oci")]
    InvalidSource,
}

/// What fetching may read and keep.
#[derive(Clone, Copy)]
pub struct FetchSettings<'a> {
    /// The cluster the source and keys are read from.
    pub client: &'a Client,
    /// Largest component accepted, after decompression.
    pub max_component_size: usize,
    /// Where pulled layers are cached by digest; none keeps no copy.
    pub oci_cache: Option<&'a Path>,
}

/// A component read from its source, with what its signature is checked against.
#[derive(Debug)]
pub struct Fetched {
    /// The component, decompressed and its pin checked.
    pub component: Component,
    evidence: Evidence,
}

/// Where a component's signature is.
#[derive(Debug)]
enum Evidence {
    /// A ConfigMap source: the bundle in `bundleKey`, if any.
    Bundle(Option<String>),
    /// An OCI source: cosign's signatures beside the manifest.
    Oci {
        remote: Box<Remote>,
        manifest: Vec<u8>,
        manifest_digest: String,
    },
}

impl Fetched {
    /// The manifest digest of an OCI source.
    pub fn artifact_digest(&self) -> Option<String> {
        match &self.evidence {
            Evidence::Bundle(_) => None,
            Evidence::Oci {
                manifest_digest, ..
            } => Some(manifest_digest.clone()),
        }
    }
}

/// Reads (or pulls) the component `spec.source` names.
pub async fn fetch(
    spec: &ProviderSpec,
    settings: FetchSettings<'_>,
) -> Result<Fetched, FetchError> {
    match (&spec.source.config_map, &spec.source.oci) {
        (Some(source_ref), None) => fetch_config_map(source_ref, spec, settings).await,
        (None, Some(oci_source)) => fetch_oci(oci_source, spec, settings).await,
        _ => Err(FetchError::InvalidSource),
    }
}

/// Reads the component of a ConfigMap source (and its bundle).
async fn fetch_config_map(
    source_ref: &ConfigMapKeySource,
    spec: &ProviderSpec,
    settings: FetchSettings<'_>,
) -> Result<Fetched, FetchError> {
    let api: Api<ConfigMap> = Api::namespaced(settings.client.clone(), &source_ref.namespace);
    // The ConfigMap, then the parts a split component continues in, in order.
    let mut parts = Vec::with_capacity(1 + spec.source.parts.len());
    for part in std::iter::once(&source_ref.name).chain(&spec.source.parts) {
        let Some(config_map) = api.get_opt(part).await? else {
            return Err(SourceError::ConfigMapNotFound {
                namespace: source_ref.namespace.clone(),
                name: part.clone(),
            }
            .into());
        };
        parts.push(config_map);
    }
    let bundle = source_ref
        .bundle_key
        .as_deref()
        .and_then(|key| parts.first().and_then(|first| source::text_key(first, key)));
    let component = source::from_config_maps(
        &parts,
        &source_ref.key,
        settings.max_component_size,
        spec.source.sha256.as_deref(),
    )?;
    Ok(Fetched {
        component,
        evidence: Evidence::Bundle(bundle),
    })
}

/// Pulls the component of an OCI source.
async fn fetch_oci(
    oci_source: &OciSource,
    spec: &ProviderSpec,
    settings: FetchSettings<'_>,
) -> Result<Fetched, FetchError> {
    let mut auth = oci_client::secrets::RegistryAuth::Anonymous;
    if let Some(secret_name) = &oci_source.pull_secret {
        let api: Api<Secret> = Api::namespaced(settings.client.clone(), &oci_source.namespace);
        let id = format!("{}/{secret_name}", oci_source.namespace);
        let config = api
            .get_opt(secret_name)
            .await?
            .and_then(|secret| secret.data)
            .and_then(|mut data| data.remove(".dockerconfigjson"));
        let Some(config) = config else {
            return Err(AuthError::Format {
                secret: id,
                message: "the Secret or its key does not exist".to_owned(),
            }
            .into());
        };
        let registry = Remote::parse(
            &oci_source.reference,
            oci_client::secrets::RegistryAuth::Anonymous,
            oci_source.plain_http,
        )?
        .reference
        .registry()
        .to_owned();
        auth = oci::auth::from_docker_config(&config.0, &registry, &id)?;
    }
    let remote = Remote::parse(&oci_source.reference, auth, oci_source.plain_http)?;
    let cache = settings.oci_cache.map(BlobCache::new);
    let pulled = oci::pull(&remote, cache.as_ref(), settings.max_component_size).await?;
    let component = source::decode(
        &pulled.stored,
        pulled.compression,
        settings.max_component_size,
        spec.source.sha256.as_deref(),
    )?;
    Ok(Fetched {
        component,
        evidence: Evidence::Oci {
            remote: Box::new(remote),
            manifest: pulled.manifest,
            manifest_digest: pulled.manifest_digest,
        },
    })
}

/// Reads the verification keys, identities and trust root of `verification` (ConfigMaps and
/// Secrets of `namespace`).
async fn read_keys(
    verification: &ProviderVerification,
    namespace: &str,
    client: &Client,
) -> Result<Keys, FetchError> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut named = Vec::with_capacity(verification.keys.len());
    for key in &verification.keys {
        let (kind, found) = match (&key.config_map_key_ref, &key.secret_key_ref) {
            (Some(cm), _) => (
                format!("ConfigMap {namespace}/{} key {}", cm.name, cm.key),
                config_maps
                    .get_opt(&cm.name)
                    .await?
                    .and_then(|config_map| source::text_key(&config_map, &cm.key)),
            ),
            (None, Some(sk)) => (
                format!("Secret {namespace}/{} key {}", sk.name, sk.key),
                secrets
                    .get_opt(&sk.name)
                    .await?
                    .and_then(|secret| secret.data)
                    .and_then(|mut data| data.remove(&sk.key))
                    .and_then(|bytes| String::from_utf8(bytes.0).ok()),
            ),
            (None, None) => {
                return Err(VerifyError::Key {
                    name: "spec.verification.keys".to_owned(),
                    message: "set one of configMapKeyRef and secretKeyRef".to_owned(),
                }
                .into());
            }
        };
        let Some(pem) = found else {
            return Err(VerifyError::Key {
                name: kind,
                message: "does not exist".to_owned(),
            }
            .into());
        };
        named.push((kind, pem));
    }
    let keys = Keys::parse(named)?;
    let Some(root) = &verification.trust_root else {
        if verification.identities.is_empty() {
            return Ok(keys);
        }
        return Err(VerifyError::Key {
            name: "spec.verification.trustRoot".to_owned(),
            message: "identities need a trust root".to_owned(),
        }
        .into());
    };
    let name = format!("ConfigMap {namespace}/{} key {}", root.name, root.key);
    let Some(json) = config_maps
        .get_opt(&root.name)
        .await?
        .and_then(|config_map| source::text_key(&config_map, &root.key))
    else {
        return Err(VerifyError::Key {
            name,
            message: "does not exist".to_owned(),
        }
        .into());
    };
    let root = verify::keyless::TrustRoot::parse(name, &json)?;
    Ok(keys.with_trust_root(root).with_identities(
        verification
            .identities
            .iter()
            .map(verify::keyless::Identity::from)
            .collect(),
    ))
}

/// Checks the signature of a fetched component against `verification` (read from
/// `namespace`); the key or signer that verified it.
pub async fn check_signature(
    verification: &ProviderVerification,
    fetched: &Fetched,
    namespace: &str,
    client: &Client,
) -> Result<String, FetchError> {
    let keys = read_keys(verification, namespace, client).await?;
    let verified = match &fetched.evidence {
        Evidence::Bundle(None) => Err(VerifyError::Missing(
            "the ConfigMap source has no bundleKey (a Sigstore bundle of the component)".into(),
        )),
        Evidence::Bundle(Some(bundle)) => {
            verify::verify_bundle(&fetched.component.bytes, bundle, &keys)
        }
        Evidence::Oci {
            remote,
            manifest,
            manifest_digest,
        } => {
            let (signatures, bundles) = oci::signature_evidence(remote, manifest_digest).await?;
            verify::verify_oci(&signatures, &bundles, manifest, manifest_digest, &keys)
        }
    };
    Ok(verified?)
}
