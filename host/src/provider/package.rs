//! `capstan provider package`: a component as ready-to-apply ConfigMaps and a `Provider`, the
//! component compressed when a ConfigMap could not hold it raw, and split into parts (one
//! ConfigMap each, named after the component's digest) when even compressed it is larger than a
//! ConfigMap holds.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use crate::api::provider::{
    ConfigMapKeySource, Provider, ProviderGrant, ProviderLimits, ProviderSource, ProviderSpec,
};
use crate::provider::source::{self, Compression};
use crate::runtime::validate::{self, ValidateError};

/// A ConfigMap's data must stay under 1 MiB in total; this leaves room for the key and metadata.
pub const CONFIG_MAP_BUDGET: usize = (1 << 20) - 4096;

/// The most parts a component is split into (a Provider lists at most this many `parts`, besides
/// its ConfigMap).
pub const MAX_PARTS: usize = 64;

/// The label put on packaged ConfigMaps and Providers.
pub const PART_OF_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "capstan");

/// How to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionChoice {
    /// Raw if it fits in a ConfigMap, else gzip (which `flate2`'s best level makes smaller than
    /// the pure-Rust zstd encoder's fastest, its only level).
    Auto,
    /// This one, even if it does not fit.
    Exactly(Compression),
}

/// What to package.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    /// The Provider's name (NodeClasses refer to it).
    pub name: String,
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// Compression.
    pub compression: CompressionChoice,
    /// Pin the component's sha256 in the Provider.
    pub pin: bool,
    /// The Provider's grants.
    pub grants: Vec<ProviderGrant>,
    /// The Provider's limits.
    pub limits: Option<ProviderLimits>,
    /// The largest component accepted.
    pub max_component_size: usize,
}

/// Why a component cannot be packaged.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// It is not a runnable provider component.
    #[error("not a provider component: {0}")]
    Invalid(#[from] ValidateError),
    /// Even compressed and split it does not fit the ConfigMaps a Provider may name.
    #[error(
        "the component is {size} bytes {compression}, over {MAX_PARTS} + 1 ConfigMaps of {limit} bytes"
    )]
    TooLarge {
        /// Its stored size.
        size: usize,
        /// The compression tried.
        compression: Compression,
        /// The limit.
        limit: usize,
    },
}

/// The packaged manifests.
#[derive(Debug, Clone)]
pub struct Package {
    /// The ConfigMaps holding the component: one, or the parts of a split component in order
    /// (the first is the Provider's `configMap`, the others its `parts`).
    pub config_maps: Vec<ConfigMap>,
    /// The Provider loading it.
    pub provider: Provider,
    /// The component's sha256.
    pub sha256: String,
    /// The compression used.
    pub compression: Compression,
    /// The CRDs of the node class kinds the component declares (its `capstan:node-class-crds`
    /// section), applied before the Provider that serves them.
    pub crds: Vec<serde_json::Value>,
}

/// Packages `component`.
pub fn package(component: &[u8], options: &PackageOptions) -> Result<Package, PackageError> {
    let info = validate::inspect(component, options.max_component_size)?;
    info.provider_version()?;
    let compression = match options.compression {
        CompressionChoice::Exactly(compression) => compression,
        CompressionChoice::Auto if component.len() <= CONFIG_MAP_BUDGET => Compression::None,
        CompressionChoice::Auto => Compression::Gzip,
    };
    let stored = source::encode(component, compression);
    let chunks: Vec<&[u8]> = stored.chunks(CONFIG_MAP_BUDGET).collect();
    if chunks.len() > MAX_PARTS + 1 {
        return Err(PackageError::TooLarge {
            size: stored.len(),
            compression,
            limit: CONFIG_MAP_BUDGET,
        });
    }
    let key = format!("provider.wasm{}", compression.suffix());
    let labels = BTreeMap::from([(PART_OF_LABEL.0.to_owned(), PART_OF_LABEL.1.to_owned())]);
    // One ConfigMap keeps its usual name; parts are named after the component, so the ConfigMaps
    // of a new version never overwrite the serving one's, and the Provider's update switches.
    let names: Vec<String> = if chunks.len() == 1 {
        vec![format!("{}-provider", options.name)]
    } else {
        let digest = info.sha256.get(..12).unwrap_or(&info.sha256);
        (0..chunks.len())
            .map(|i| format!("{}-provider-{digest}-{i}", options.name))
            .collect()
    };
    let config_maps = names
        .iter()
        .zip(&chunks)
        .map(|(name, chunk)| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(options.namespace.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            binary_data: Some(BTreeMap::from([(key.clone(), ByteString(chunk.to_vec()))])),
            ..ConfigMap::default()
        })
        .collect();
    let mut provider = Provider::new(
        &options.name,
        ProviderSpec {
            source: ProviderSource {
                config_map: Some(ConfigMapKeySource {
                    namespace: options.namespace.clone(),
                    name: names[0].clone(),
                    key,
                    bundle_key: None,
                }),
                oci: None,
                parts: names[1..].to_vec(),
                sha256: options.pin.then(|| info.sha256.clone()),
            },
            grants: options.grants.clone(),
            egress: Vec::new(),
            egress_ca_bundle: None,
            config: Vec::new(),
            limits: options.limits.clone(),
            spend_limit_per_hour: None,
            node_class_kinds: None,
            verification: None,
        },
    );
    provider.metadata.labels = Some(labels);
    Ok(Package {
        config_maps,
        provider,
        sha256: info.sha256,
        compression,
        crds: info
            .node_class_kinds
            .iter()
            .map(|kind| kind.crd.clone())
            .collect(),
    })
}

/// The manifests as multi-document YAML for `kubectl apply --server-side -f -` (server-side: a client-side apply would copy the component into an annotation, which is limited to 256 KiB).
pub fn to_yaml(package: &Package) -> Result<String, serde_json::Error> {
    // JSON is YAML; one document per object keeps the output exact and `kubectl`-ready. The
    // ConfigMaps come first, so the Provider never names a part the server does not have yet;
    // then the CRDs of the node class kinds the component serves.
    let mut docs = Vec::with_capacity(package.config_maps.len() + package.crds.len() + 1);
    for config_map in &package.config_maps {
        docs.push(serde_json::to_string_pretty(config_map)?);
    }
    for crd in &package.crds {
        docs.push(serde_json::to_string_pretty(crd)?);
    }
    docs.push(serde_json::to_string_pretty(&package.provider)?);
    let parts = match package.config_maps.len() {
        1 => String::new(),
        n => format!(", split into {n} ConfigMaps"),
    };
    Ok(format!(
        "# capstan provider {name}: sha256 {sha}, {compression}{parts}\n---\n{docs}\n",
        name = package
            .provider
            .metadata
            .name
            .as_deref()
            .unwrap_or_default(),
        sha = package.sha256,
        compression = package.compression,
        docs = docs.join("\n---\n"),
    ))
}
