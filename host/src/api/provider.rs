//! `capstan.dev/v1alpha1` Provider: where a provider's wasm component comes from, the permissions
//! it runs with and its resource limits. Cluster-scoped and meant to be writable by cluster admins
//! only: whoever can write the source ConfigMap ships code, but only a Provider grants it power, and
//! `sha256` can pin the exact code.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::shared::{Condition, Quantity};

/// Provider loads one wasm component and states what it may touch.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Provider",
    plural = "providers",
    singular = "provider",
    category = "capstan",
    status = "ProviderStatus",
    derive = "PartialEq",
    doc = "Provider is a Capstan provider: a wasm component, its grants and its limits",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Degraded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Degraded\")].status"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].status"
    ),
    printcolumn(name = "WIT", type_ = "string", json_path = ".status.witVersion"),
    printcolumn(
        name = "Digest",
        type_ = "string",
        json_path = ".status.digest",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    pub source: ProviderSource,
    /// What the provider may do in Kubernetes. Everything else is denied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<ProviderGrant>,
    /// Where the provider may send HTTP requests (contract 0.2, `wasi:http`): rules
    /// `scheme://host[:port]` (`https://api.example.com`, `http://127.0.0.1:8080`,
    /// `https://*.example.com:8443`; scheme `http`, `https` or `*`, the scheme's port by default,
    /// port `*` any, a leading `*.` any subdomain). Everything else is denied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// PEM CA certificates trusted for outbound HTTPS besides the system's roots: a ConfigMap key
    /// in the provider source namespace (the namespace of `source.configMap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ca_bundle: Option<LocalObjectKey>,
    /// Configuration and credentials the provider reads through `wasi:config/store` (contract
    /// 0.2): each a literal `value` or a `secretKeyRef` to a Secret in the provider source
    /// namespace. Secret values reach this provider only, never logs, Events or status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<ProviderConfigEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ProviderLimits>,
    /// What the nodes of all the NodePools this provider launches for may cost together per
    /// hour, in the provider's price unit with NodeOverlays applied (a decimal: `12.5`).
    /// Provisioning stops at it as at a pool's `capstan.dev/price-per-hour` limit. Absent: no
    /// limit over the pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::nodeoverlay::PRICE_PATTERN))]
    pub spend_limit_per_hour: Option<String>,
    /// The node class kinds this provider serves besides `capstan.dev` NodeClass. Absent: every
    /// kind its component declares. A list restricts it to those kinds, and may remap: a kind the
    /// component does not declare is served when it names `version`, `plural` and `servedAs`, the
    /// declared kind the provider receives its objects as. A kind another Provider serves already
    /// (the older one keeps it) is refused, and the `NodeClassKinds` condition says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_kinds: Option<Vec<NodeClassKindSpec>>,
    /// Signatures the component must carry before it is compiled. Absent: none is checked
    /// (unless the host requires verification, then such a Provider never loads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<ProviderVerification>,
}

/// One node class kind a Provider serves (see `ProviderSpec::node_class_kinds`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassKindSpec {
    /// API group (`karpenter.kwok.sh`).
    #[schemars(length(min = 1, max = 253))]
    pub group: String,
    /// Kind (`KWOKNodeClass`).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The version to watch (default: the declared kind's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The resource's plural (default: the declared kind's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
    /// A declared kind (`Kind.group`) the provider receives this kind's objects as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_as: Option<String>,
}

/// What signs a provider's component: cosign public keys, keyless identities, or both (a
/// signature any one of them accepts is enough).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("(has(self.keys) ? size(self.keys) : 0) + (has(self.identities) ? size(self.identities) : 0) > 0")
        .message("set keys, identities, or both"),
    validation = Rule::new("!has(self.identities) || size(self.identities) == 0 || has(self.trustRoot)")
        .message("identities need a trustRoot (Sigstore's trusted_root.json: the certificate authorities their certificates chain to, and the timestamp authorities or logs that prove when they signed)")
)]
pub struct ProviderVerification {
    /// cosign public keys (PEM, as `cosign generate-key-pair` writes `cosign.pub`); a signature
    /// by any one of them is accepted. OCI sources: cosign's signature in the registry (the
    /// `sha256-<digest>.sig` tag, or a Sigstore bundle referrer). ConfigMap sources: the
    /// Sigstore bundle in `source.configMap.bundleKey`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub keys: Vec<VerificationKeyRef>,
    /// Keyless signers: a Sigstore bundle whose certificate chains to a certificate authority of
    /// `trustRoot`, was valid when a timestamp authority or log of `trustRoot` proves it signed,
    /// and names one of these (its subject alternative name and its Fulcio OIDC issuer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub identities: Vec<KeylessIdentity>,
    /// A ConfigMap key (provider source namespace) holding Sigstore's `trusted_root.json` (as
    /// `cosign trusted-root create` writes it, or Sigstore's public-good root): the certificate
    /// authorities keyless certificates chain to, and the timestamp authorities and
    /// transparency logs whose timestamps and entries a bundle carries (each is verified, never
    /// skipped). Supplied by the admin, so verification needs no network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root: Option<LocalObjectKey>,
}

/// A keyless signer: who (the certificate's subject alternative name: an email address or a
/// URI such as a CI workflow's) and who vouched for them (the OIDC issuer Fulcio recorded).
/// Each is matched exactly, or by prefix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.issuer) != has(self.issuerPrefix)")
        .message("set exactly one of issuer and issuerPrefix"),
    validation = Rule::new("has(self.subject) != has(self.subjectPrefix)")
        .message("set exactly one of subject and subjectPrefix")
)]
pub struct KeylessIdentity {
    /// The OIDC issuer, exactly (e.g. `https://token.actions.githubusercontent.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The OIDC issuer's prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_prefix: Option<String>,
    /// The certificate's subject alternative name, exactly (`release@example.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The subject's prefix (`https://github.com/acme/provider/.github/workflows/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_prefix: Option<String>,
}

/// Where a public key is: a key of a ConfigMap or of a Secret in the provider source namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.configMapKeyRef) != has(self.secretKeyRef)")
        .message("set exactly one of configMapKeyRef and secretKeyRef")
)]
pub struct VerificationKeyRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<LocalObjectKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<LocalObjectKey>,
}

/// A key of a ConfigMap or Secret in the provider source namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectKey {
    pub name: String,
    pub key: String,
}

/// One configuration value of a provider.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigEntry {
    /// The key the provider asks `wasi:config/store` for.
    #[schemars(length(min = 1))]
    pub name: String,
    /// A literal value (not secret: it is part of the Provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A key of a Secret in the provider source namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<LocalObjectKey>,
}

impl std::fmt::Debug for ProviderConfigEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Literal values are not secret, but a Debug of a spec must never be the place to check.
        f.debug_struct("ProviderConfigEntry")
            .field("name", &self.name)
            .field("value", &self.value.as_ref().map(|_| "<redacted>"))
            .field("secret_key_ref", &self.secret_key_ref)
            .finish()
    }
}

/// Where the component comes from: a ConfigMap, or an OCI registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.configMap) != has(self.oci)")
        .message("set exactly one of configMap and oci"),
    validation = Rule::new("!has(self.oci) || !has(self.parts) || size(self.parts) == 0")
        .message("parts apply to configMap sources only")
)]
pub struct ProviderSource {
    /// The ConfigMap key holding the component (binaryData; `.gz` or `.zst` keys are decompressed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapKeySource>,
    /// An OCI artifact holding the component (the CNCF wasm layout, `wkg oci push`, or a
    /// `.wasm` file pushed with `oras push`), pulled by the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
    /// Further ConfigMaps, in `configMap.namespace`, holding the same key: a component too large
    /// for one ConfigMap even compressed is split, and the parts' bytes follow `configMap`'s in
    /// this order (concatenated, then decompressed as the key says). `capstan provider package`
    /// splits large components and names every part after the component's digest, so an update
    /// switches versions at once when the Provider changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub parts: Vec<String>,
    /// Optional pin: the hex sha256 of the (decompressed) component. A different component is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[a-f0-9]{64}$"))]
    pub sha256: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeySource {
    pub namespace: String,
    pub name: String,
    pub key: String,
    /// A key of the same ConfigMap holding a Sigstore bundle of the (decompressed) component, as
    /// `cosign sign-blob --bundle` writes it; checked against `spec.verification`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_key: Option<String>,
}

/// A component in an OCI registry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSource {
    /// `registry/repository:tag` or `registry/repository@sha256:<digest>`. A tag is polled
    /// (`pollInterval`) and a move hot-reloads the provider.
    #[schemars(length(min = 1, max = 1024))]
    pub reference: String,
    /// The provider source namespace: where the pull Secret, the Secrets of `spec.config`, the
    /// CA bundle and the verification keys are.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// A `kubernetes.io/dockerconfigjson` Secret with credentials for the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// How often a tag is checked for a new digest (default 5m; not used for digests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub poll_interval: Option<String>,
    /// Talk plain HTTP to the registry (a registry on loopback or in a lab); HTTPS otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plain_http: bool,
}

impl ProviderSource {
    /// The provider source namespace: the ConfigMap's, or the OCI source's.
    pub fn namespace(&self) -> &str {
        match (&self.config_map, &self.oci) {
            (Some(config_map), _) => &config_map.namespace,
            (None, Some(oci)) => &oci.namespace,
            (None, None) => "",
        }
    }
}

/// Which cluster a grant applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum GrantCluster {
    /// The cluster whose nodes Capstan manages.
    #[default]
    Workload,
    /// The management cluster (`--management-kubeconfig`), for Cluster API setups.
    Management,
}

/// Which objects a grant reaches: only those the provider owns (the default), or any.
///
/// A provider owns an object that carries its ownership mark, the label
/// `capstan.dev/provider: <provider>`: the host stamps it on every object the provider creates
/// through `kube` and on the Nodes registered for its NodeClaims, and the provider can neither
/// set, change nor remove it; an admin hands an existing object over by labelling it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum GrantScope {
    /// Only objects carrying the provider's ownership mark: `get`, `patch`, `update` and
    /// `delete` of another object are refused, `list` and `watch` see only the provider's own.
    #[default]
    Owned,
    /// Any object the rest of the grant names. Written explicitly; `capstan provider inspect`
    /// and the Provider's `GrantsScoped` condition flag it.
    Any,
}

impl GrantScope {
    /// The scope as written in grants.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScope::Owned => "owned",
            GrantScope::Any => "any",
        }
    }
}

/// One permission, shaped like an RBAC rule plus the cluster and namespaces it applies to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderGrant {
    #[serde(default)]
    pub cluster: GrantCluster,
    /// API groups (`""` is the core group, `*` any).
    pub api_groups: Vec<String>,
    /// Resources, with subresources spelled `resource/subresource` (`*` any resource; a
    /// subresource is only granted when named).
    pub resources: Vec<String>,
    /// Verbs: get, list, watch, create, patch, update, delete, or `*`.
    pub verbs: Vec<String>,
    /// Namespaces the grant covers (`*` any). Absent or empty: cluster-scoped resources only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// `owned` (the default): only objects carrying the provider's ownership mark; `any`: every
    /// object the grant names (flagged in the Provider's status).
    #[serde(default)]
    pub scope: GrantScope,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderLimits {
    /// Linear memory per call (default 64Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Wall-clock limit of every call except `create` (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub call_timeout: Option<String>,
    /// Wall-clock limit of `create` (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub launch_timeout: Option<String>,
    /// Calls running at once (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub concurrency: Option<u32>,
    /// Outbound HTTP: time to connect, TLS handshake included (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub http_connect_timeout: Option<String>,
    /// Outbound HTTP: time from sending a request to its response headers (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub http_first_byte_timeout: Option<String>,
    /// Outbound HTTP: time between two chunks of a response body (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::DURATION_PATTERN))]
    pub http_between_bytes_timeout: Option<String>,
    /// Outbound HTTP: largest response body (default 16Mi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_max_response_body: Option<Quantity>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    /// sha256 of the component serving now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The WIT package version the component implements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wit_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_loaded: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// OCI sources: the manifest digest serving (`sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_digest: Option<String>,
    /// Who signed the component serving (the verification key's location), when verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}
