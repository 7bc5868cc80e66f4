//! `capstan provider package`: a component as a ready-to-apply ConfigMap and `Provider`, the
//! component compressed when a ConfigMap could not hold it raw.

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

/// The label put on packaged ConfigMaps and Providers.
pub const PART_OF_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "capstan");

/// How to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionChoice {
    /// Raw if it fits in a ConfigMap, else gzip.
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
    /// Even compressed it does not fit a ConfigMap.
    #[error(
        "the component is {size} bytes {compression}, over a ConfigMap's limit of {limit} bytes"
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
    /// The ConfigMap holding the component.
    pub config_map: ConfigMap,
    /// The Provider loading it.
    pub provider: Provider,
    /// The component's sha256.
    pub sha256: String,
    /// The compression used.
    pub compression: Compression,
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
    if stored.len() > CONFIG_MAP_BUDGET {
        return Err(PackageError::TooLarge {
            size: stored.len(),
            compression,
            limit: CONFIG_MAP_BUDGET,
        });
    }
    let key = format!("provider.wasm{}", compression.suffix());
    let labels = BTreeMap::from([(PART_OF_LABEL.0.to_owned(), PART_OF_LABEL.1.to_owned())]);
    let config_map_name = format!("{}-provider", options.name);
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name.clone()),
            namespace: Some(options.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        binary_data: Some(BTreeMap::from([(key.clone(), ByteString(stored))])),
        ..ConfigMap::default()
    };
    let mut provider = Provider::new(
        &options.name,
        ProviderSpec {
            source: ProviderSource {
                config_map: ConfigMapKeySource {
                    namespace: options.namespace.clone(),
                    name: config_map_name,
                    key,
                },
                sha256: options.pin.then(|| info.sha256.clone()),
            },
            grants: options.grants.clone(),
            egress: Vec::new(),
            egress_ca_bundle: None,
            config: Vec::new(),
            limits: options.limits.clone(),
        },
    );
    provider.metadata.labels = Some(labels);
    Ok(Package {
        config_map,
        provider,
        sha256: info.sha256,
        compression,
    })
}

/// The manifests as multi-document YAML for `kubectl apply --server-side -f -` (server-side: a client-side apply would copy the component into an annotation, which is limited to 256 KiB).
pub fn to_yaml(package: &Package) -> Result<String, serde_json::Error> {
    // JSON is YAML; one document per object keeps the output exact and `kubectl`-ready.
    let config_map = serde_json::to_string_pretty(&package.config_map)?;
    let provider = serde_json::to_string_pretty(&package.provider)?;
    Ok(format!(
        "# capstan provider {name}: sha256 {sha}, {compression}\n---\n{config_map}\n---\n{provider}\n",
        name = package
            .provider
            .metadata
            .name
            .as_deref()
            .unwrap_or_default(),
        sha = package.sha256,
        compression = package.compression,
    ))
}
