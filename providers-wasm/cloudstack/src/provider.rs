//! The `cloud-provider` export: glue between the WIT calls, [`Ops`] and the host: requests go
//! through `wasi:http` (the SDK's [`http`] helper, under the Provider's egress grants), the API
//! key, secret key, endpoint and cluster name come from `wasi:config` (the Provider's
//! `spec.config`, read per call so a rotated Secret is used at once), time and sleeps from the
//! `host` import, shared state from the host cache.
//!
//! Configuration keys: `api-key` and `secret-key` (required), `endpoint` (unless every NodeClass
//! sets `endpoint`; `get`, `list` and `delete` get no NodeClass and use it, or the endpoint of
//! the last NodeClass seen), `cluster-name` (the ownership tag; default `capstan`).

use std::time::Duration;

use capstan_provider_sdk::http::{self, ErrorCode};
use capstan_provider_sdk::{
    Guest, InstanceTypes, NodeClaim, NodeClass, NodePool, ProviderError, RebootError, Registration,
    RepairAction, RepairRule, cache, clock, config,
};
use cloudstack_sign::Credentials;

use crate::api::response::Raw;
use crate::api::{ApiError, Context};
use crate::client::{Client, Clock, Method, Request, Transport, TransportError};
use crate::endpoint::Endpoint;
use crate::operations::{Ops, Store};
use crate::params::Parameters;

/// The CloudStack provider.
pub struct CloudStack;

/// The provider's name.
pub const NAME: &str = "cloudstack";
/// Configuration key: the API key.
pub const API_KEY: &str = "api-key";
/// Configuration key: the secret key.
pub const SECRET_KEY: &str = "secret-key";
/// Configuration key: the endpoint.
pub const ENDPOINT: &str = "endpoint";
/// Configuration key: the cluster name.
pub const CLUSTER_NAME: &str = "cluster-name";
/// The cluster name when `cluster-name` is not set.
pub const DEFAULT_CLUSTER: &str = "capstan";
/// The most the provider reads of one answer (the host has its own cap).
pub const MAX_BODY: u64 = 16 << 20;
/// Per-request connect, first-byte and between-bytes timeout asked of the host.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Cache key of the endpoint of the last NodeClass seen.
const LAST_ENDPOINT: &str = "last-endpoint";

/// `wasi:http` through the SDK.
struct WasiTransport;

impl Transport for WasiTransport {
    fn send(&mut self, request: &Request) -> Result<Raw, TransportError> {
        let url = format!(
            "{}://{}{}",
            request.scheme, request.authority, request.path_and_query
        );
        let r = match request.method {
            Method::Get => http::Request::get(url),
            Method::Post => http::Request::post(url, request.body.clone().unwrap_or_default())
                .header("content-type", "application/x-www-form-urlencoded"),
        }
        .header("accept", "application/json")
        .max_body(MAX_BODY)
        .timeout_ms(REQUEST_TIMEOUT_MS);
        match http::send(&r) {
            Ok(response) => Ok(Raw {
                status: response.status,
                content_type: response.header("content-type").map(str::to_string),
                location: response.header("location").map(str::to_string),
                body: response.body,
            }),
            Err(e) if e.is_denied() => Err(TransportError::Denied(e.to_string())),
            Err(http::Error::TooLarge { limit }) => Err(TransportError::TooLarge(
                usize::try_from(limit).unwrap_or(usize::MAX),
            )),
            Err(http::Error::Http(ErrorCode::HttpResponseBodySize(limit))) => Err(
                TransportError::TooLarge(limit.and_then(|l| usize::try_from(l).ok()).unwrap_or(0)),
            ),
            Err(e) => Err(TransportError::Failed(e.to_string())),
        }
    }
}

/// The `host` import's clock and sleep.
struct HostClock;

impl Clock for HostClock {
    fn now_millis(&self) -> u64 {
        clock::now_millis()
    }
    fn sleep_millis(&self, millis: u64) {
        clock::sleep_millis(millis);
    }
}

/// The host cache.
struct HostStore;

impl Store for HostStore {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        cache::get_raw(key)
    }
    fn set(&self, key: &str, value: &[u8], ttl: Duration) {
        cache::set_raw(key, value, ttl);
    }
}

fn config_value(key: &str) -> Result<Option<String>, ApiError> {
    match config::get(key) {
        Ok(value) => Ok(value.filter(|v| !v.trim().is_empty())),
        Err(config::Error::Upstream(m) | config::Error::Io(m)) => Err(ApiError::Config(format!(
            "reading configuration key {key:?}: {m}"
        ))),
    }
}

fn required(key: &str) -> Result<String, ApiError> {
    config_value(key)?.ok_or_else(|| {
        ApiError::Config(format!(
            "the Provider does not define configuration key {key:?} (spec.config, usually from a Secret)"
        ))
    })
}

/// The endpoint: the NodeClass's, else the `endpoint` config value, else the last NodeClass's.
fn endpoint(params: Option<&Parameters>) -> Result<Endpoint, ApiError> {
    let text = match params.and_then(|p| p.endpoint.clone()) {
        Some(e) => {
            cache::set_raw(LAST_ENDPOINT, e.as_bytes(), Duration::from_secs(24 * 3600));
            e
        }
        None => match config_value(ENDPOINT)? {
            Some(e) => e,
            None => cache::get_raw(LAST_ENDPOINT)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    ApiError::Config(format!(
                        "no CloudStack endpoint: set the Provider's {ENDPOINT:?} configuration value or the NodeClass's endpoint"
                    ))
                })?,
        },
    };
    Endpoint::parse(&text).map_err(|e| ApiError::Config(format!("endpoint: {e}")))
}

/// Runs `f` with a client for this call.
fn with_ops<R>(
    params: Option<&Parameters>,
    context: Context,
    f: impl FnOnce(&mut Ops<'_, WasiTransport, HostClock, HostStore>) -> Result<R, ProviderError>,
) -> Result<R, ProviderError> {
    with_ops_or(params, |e| e.into_provider_error(context), f)
}

/// [`with_ops`] for an export with its own error type: `setup` maps a configuration failure.
fn with_ops_or<R, E>(
    params: Option<&Parameters>,
    setup_error: impl FnOnce(ApiError) -> E,
    f: impl FnOnce(&mut Ops<'_, WasiTransport, HostClock, HostStore>) -> Result<R, E>,
) -> Result<R, E> {
    let setup = || -> Result<(Endpoint, Credentials, String), ApiError> {
        let endpoint = endpoint(params)?;
        let credentials = Credentials::new(required(API_KEY)?, required(SECRET_KEY)?);
        let cluster = config_value(CLUSTER_NAME)?.unwrap_or_else(|| DEFAULT_CLUSTER.to_string());
        Ok((endpoint, credentials, cluster))
    };
    let (endpoint, credentials, cluster) = setup().map_err(setup_error)?;
    let scope = format!("{endpoint} {}", credentials.api_key);
    let mut client = Client::new(endpoint, credentials, WasiTransport, HostClock);
    let mut ops = Ops {
        client: &mut client,
        store: &HostStore,
        scope,
        cluster,
    };
    f(&mut ops)
}

impl Guest for CloudStack {
    fn name() -> String {
        NAME.to_string()
    }

    /// The catalog, and no volume attachment limits: a CloudStack service offering does not
    /// bound the volumes of a VM (the hypervisor does, per host: `listHypervisorCapabilities`'
    /// `maxdatavolumeslimit`), so the CSI driver's CSINode limits apply once a node registers.
    fn get_instance_types(
        _pool: NodePool,
        class: NodeClass,
    ) -> Result<InstanceTypes, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        with_ops(Some(&params), Context::NodeClass, |ops| {
            Ok(InstanceTypes {
                catalog: ops.catalog(&params)?,
                volume_limits: Vec::new(),
            })
        })
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<NodeClaim, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        with_ops(Some(&params), Context::Create, |ops| {
            ops.create(&params, &class.name, &claim)
        })
    }

    fn delete(claim: NodeClaim) -> Result<(), ProviderError> {
        with_ops(None, Context::Instance, |ops| ops.delete(&claim))
    }

    fn get(provider_id: String) -> Result<NodeClaim, ProviderError> {
        with_ops(None, Context::Instance, |ops| ops.get(&provider_id))
    }

    fn list() -> Result<Vec<NodeClaim>, ProviderError> {
        with_ops(None, Context::Instance, |ops| ops.list())
    }

    fn is_drifted(claim: NodeClaim, class: NodeClass) -> Result<Option<String>, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        with_ops(Some(&params), Context::NodeClass, |ops| {
            ops.is_drifted(&params, &claim)
        })
    }

    fn repair_policies() -> Vec<RepairRule> {
        repair_rules()
    }

    fn reboot(claim: NodeClaim, operation_id: String) -> Result<(), RebootError> {
        with_ops_or(None, crate::operations::reboot_error, |ops| {
            ops.reboot(&claim, &operation_id)
        })
    }

    /// A VM's Node has nothing to wait for once it has joined.
    fn registered(_claim: NodeClaim) -> Result<Registration, ProviderError> {
        Ok(Registration::Ready)
    }

    fn validate_node_class(class: NodeClass) -> Result<(), ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        with_ops(Some(&params), Context::NodeClass, |ops| {
            ops.resolve(&params, Context::NodeClass).map(drop)
        })
    }
}

/// How long a node may be `Ready=False` or `Unknown` before it is replaced, in seconds.
pub const READY_TOLERATION_SECONDS: u64 = 30 * 60;

/// The repair rules: what the provider answered before contract 0.4 (Karpenter's usual node
/// auto-repair), as the host read those policies: `Ready=False` (the set's default) or
/// `Unknown` for [`READY_TOLERATION_SECONDS`] replaces the node, draining as the claim says.
/// No rule reboots: a node that is not Ready for half an hour is replaced, as before.
pub fn repair_rules() -> Vec<RepairRule> {
    let rule = |status: &str, reason_regex: &str| RepairRule {
        condition_type: "Ready".to_string(),
        condition_status: status.to_string(),
        reason_regex: reason_regex.to_string(),
        toleration_seconds: READY_TOLERATION_SECONDS,
        termination_grace_seconds: None,
        priority: 0,
        action: RepairAction::Replace,
    };
    vec![rule("False", ""), rule("Unknown", ".*")]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules are the policies of before 0.4 as the host read them then: `Ready=False` as
    /// the default and `Ready=Unknown`, 30 minutes each, replace, drained as the claim says.
    #[test]
    fn repair_rules_are_the_policies_of_before() {
        let rules = repair_rules();
        let shape: Vec<_> = rules
            .iter()
            .map(|r| {
                (
                    r.condition_type.as_str(),
                    r.condition_status.as_str(),
                    r.reason_regex.as_str(),
                    r.toleration_seconds,
                    r.termination_grace_seconds,
                    r.action,
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("Ready", "False", "", 1800, None, RepairAction::Replace),
                ("Ready", "Unknown", ".*", 1800, None, RepairAction::Replace),
            ]
        );
    }
}
