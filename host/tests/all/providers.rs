//! The Provider controller against the real API server: components shipped in ConfigMaps, hot
//! reload under load, bad updates refused while the last good version serves, grants enforced
//! with Events, and misbehaving providers next to well-behaved ones.
//!
//! The controller runs in the test process (so the test can call providers from the registry
//! the way the other controllers do); the API server, the CRDs and the ConfigMaps are real.
//! Each test has its own namespace and labels its Providers with its own run label, which its
//! controller selects, so concurrent tests never see each other's Providers.

mod bad_updates;
mod egress;
mod hostile;
mod multiple;
mod oci;
mod package;
mod reload;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capstan::api::provider::{
    ConfigMapKeySource, Provider, ProviderGrant, ProviderLimits, ProviderSource, ProviderSpec,
};
use capstan::controllers::providers::{ProviderController, ProviderState, Settings};
use capstan::provider::{Loader, Registry};
use capstan::runtime::engine::EngineBuilder;
use capstan::runtime::{ProviderPre, Runtime};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Api, Client};

use crate::lifecycle::{Names, RUN_LABEL, cluster};

/// One runtime for these tests, caching compiled components in a temporary directory.
pub fn runtime() -> Arc<Runtime> {
    static RUNTIME: OnceLock<Arc<Runtime>> = OnceLock::new();
    Arc::clone(RUNTIME.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("capstan-provider-tests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cache dir");
        let handle = cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority())
            .expect("open cache dir");
        Arc::new(
            Runtime::builder()
                .engine(EngineBuilder::default().max_instances(512))
                .cache_dir(handle)
                .build()
                .expect("runtime"),
        )
    }))
}

/// `bytes` made distinct by a trailing custom section: the same code, a different digest.
pub fn variant(bytes: &[u8], n: u32) -> Vec<u8> {
    let name = b"capstan-test-variant";
    let payload = n.to_le_bytes();
    let mut content = Vec::new();
    leb128(&mut content, name.len() as u64);
    content.extend_from_slice(name);
    content.extend_from_slice(&payload);
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    leb128(&mut out, content.len() as u64);
    out.extend_from_slice(&content);
    out
}

fn leb128(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A running Provider controller for one test.
pub struct Setup {
    pub client: Client,
    pub names: Names,
    pub namespace: String,
    pub registry: Arc<Registry>,
    pub state: Arc<ProviderState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Setup {
    /// Starts a controller; `tune` adjusts its settings.
    pub async fn start(prefix: &str, tune: impl FnOnce(&mut Settings)) -> Self {
        Self::start_with(prefix, None, tune).await
    }

    /// Like [`Setup::start`], with a management cluster connection.
    pub async fn start_with(
        prefix: &str,
        management: Option<Client>,
        tune: impl FnOnce(&mut Settings),
    ) -> Self {
        let (cp, client) = cluster().await;
        let names = Names::new(prefix);
        let namespace = cp.create_namespace_unique(prefix).await.expect("namespace");
        let registry = Arc::new(Registry::new());
        let loader = Arc::new(Loader::new(runtime(), Some(client.clone()), management));
        let mut settings = Settings {
            source_namespace: Some(namespace.clone()),
            selector: Some(names.selector()),
            denial_event_interval: Duration::from_millis(100),
            ..Settings::default()
        };
        tune(&mut settings);
        let controller =
            ProviderController::new(client.clone(), Arc::clone(&registry), loader, settings);
        let state = controller.state();
        let task = tokio::spawn(controller.run());
        Self {
            client,
            names,
            namespace,
            registry,
            state,
            task,
        }
    }

    /// Creates or replaces ConfigMap `name` with one binary key.
    pub async fn put_source(&self, name: &str, key: &str, bytes: &[u8]) {
        self.put_config_map(name, Some((key, bytes)), None).await;
    }

    /// Creates or replaces ConfigMap `name` (server-side apply, so keys not given are removed).
    pub async fn put_config_map(
        &self,
        name: &str,
        binary: Option<(&str, &[u8])>,
        text: Option<(&str, &str)>,
    ) {
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            binary_data: binary
                .map(|(key, bytes)| [(key.to_owned(), ByteString(bytes.to_vec()))].into()),
            data: text.map(|(key, value)| [(key.to_owned(), value.to_owned())].into()),
            ..ConfigMap::default()
        };
        let mut value = serde_json::to_value(&config_map).unwrap();
        value["apiVersion"] = "v1".into();
        value["kind"] = "ConfigMap".into();
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                name,
                &PatchParams::apply("capstan-tests").force(),
                &Patch::Apply(&value),
            )
            .await
            .expect("apply ConfigMap");
    }

    /// A Provider spec reading `key` of ConfigMap `config_map` in the test namespace.
    pub fn spec(&self, config_map: &str, key: &str) -> ProviderSpec {
        ProviderSpec {
            source: ProviderSource {
                config_map: Some(ConfigMapKeySource {
                    namespace: self.namespace.clone(),
                    name: config_map.to_owned(),
                    key: key.to_owned(),
                    bundle_key: None,
                }),
                oci: None,
                parts: Vec::new(),
                sha256: None,
            },
            grants: Vec::new(),
            egress: Vec::new(),
            egress_ca_bundle: None,
            config: Vec::new(),
            limits: None,
            spend_limit_per_hour: None,
            node_class_kinds: None,
            verification: None,
        }
    }

    /// Creates or replaces Provider `name` (labelled for this test's controller).
    pub async fn put_provider(&self, name: &str, spec: ProviderSpec) {
        let mut provider = Provider::new(name, spec);
        provider.metadata.labels = Some([(RUN_LABEL.to_owned(), self.names.run.clone())].into());
        let mut value = serde_json::to_value(&provider).unwrap();
        value["apiVersion"] = "capstan.dev/v1alpha1".into();
        value["kind"] = "Provider".into();
        Api::<Provider>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::apply("capstan-tests").force(),
                &Patch::Apply(&value),
            )
            .await
            .expect("apply Provider");
    }

    /// Waits until the registry serves `digest` under `name`, and returns it.
    pub async fn wait_serving(&self, name: &str, digest: &str) -> Arc<ProviderPre> {
        self.wait_serving_within(name, digest, Duration::from_secs(60))
            .await
    }

    /// [`Setup::wait_serving`] with another timeout (a large component compiles for a while the
    /// first time).
    pub async fn wait_serving_within(
        &self,
        name: &str,
        digest: &str,
        timeout: Duration,
    ) -> Arc<ProviderPre> {
        let registry = Arc::clone(&self.registry);
        capstan_test_support::wait_until(
            timeout,
            &format!("provider {name} serving {digest}"),
            || {
                let registry = Arc::clone(&registry);
                async move {
                    Ok::<_, String>(
                        registry
                            .get(name)
                            .filter(|pre| pre.sha256() == digest),
                    )
                }
            },
        )
        .await
        .expect("serving")
    }

    /// Waits until Provider `name` reports `Ready=True (Loaded)` for the module with `digest`. A
    /// reload swaps the registry before the status is written, so an earlier version's `Loaded`
    /// can still be on record for a moment.
    pub async fn wait_loaded(&self, name: &str, digest: &str) -> Provider {
        let api: Api<Provider> = Api::all(self.client.clone());
        capstan_test_support::wait_until(
            Duration::from_secs(60),
            &format!("Provider {name} Loaded with {digest}"),
            || {
                let api = api.clone();
                async move {
                    let provider = api.get(name).await.map_err(|e| e.to_string())?;
                    let loaded = provider.status.as_ref().is_some_and(|s| {
                        s.digest.as_deref() == Some(digest)
                            && s.conditions.iter().any(|c| {
                                c.type_ == "Ready"
                                    && format!("{:?}", c.status) == "True"
                                    && c.reason.as_deref() == Some("Loaded")
                            })
                    });
                    Ok::<_, String>(loaded.then_some(provider))
                }
            },
        )
        .await
        .expect("loaded")
    }

    /// Waits until condition `type_` of Provider `name` has `status` and `reason`.
    pub async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> Provider {
        let api: Api<Provider> = Api::all(self.client.clone());
        capstan_test_support::wait_until(
            Duration::from_secs(60),
            &format!("Provider {name} {type_}={status} ({reason})"),
            || {
                let api = api.clone();
                async move {
                    let provider = api.get(name).await.map_err(|e| e.to_string())?;
                    let found = provider
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
                        .is_some_and(|c| {
                            format!("{:?}", c.status) == status
                                && c.reason.as_deref() == Some(reason)
                        });
                    Ok::<_, String>(found.then_some(provider))
                }
            },
        )
        .await
        .expect("condition")
    }

    /// The Events about Provider `name` with `reason`.
    pub async fn events(&self, name: &str, reason: &str) -> Vec<Event> {
        let api: Api<Event> = Api::all(self.client.clone());
        api.list(&ListParams::default().fields(&format!(
            "regarding.kind=Provider,regarding.name={name},reason={reason}"
        )))
        .await
        .expect("list events")
        .items
    }

    /// Waits for an Event about Provider `name` with `reason`; returns its note.
    pub async fn wait_event(&self, name: &str, reason: &str) -> String {
        capstan_test_support::wait_until(
            Duration::from_secs(30),
            &format!("Event {reason} on Provider {name}"),
            || async move {
                Ok::<_, String>(
                    self.events(name, reason)
                        .await
                        .into_iter()
                        .next()
                        .map(|e| e.note.unwrap_or_default()),
                )
            },
        )
        .await
        .expect("event")
    }
}

/// Grants as a Provider spec lists them.
pub fn grant(
    cluster: capstan::api::provider::GrantCluster,
    groups: &[&str],
    resources: &[&str],
    verbs: &[&str],
    namespaces: &[&str],
) -> ProviderGrant {
    let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    ProviderGrant {
        cluster,
        api_groups: owned(groups),
        resources: owned(resources),
        verbs: owned(verbs),
        namespaces: owned(namespaces),
        scope: capstan::api::provider::GrantScope::Owned,
    }
}

/// Limits with only `memory` set.
pub fn memory_limit(quantity: &str) -> ProviderLimits {
    ProviderLimits {
        memory: Some(capstan::api::shared::Quantity::new(quantity)),
        ..ProviderLimits::default()
    }
}

/// Tasks calling `name()` through the registry every 20 ms, as the controllers call providers,
/// while a test changes the provider's version underneath them.
pub struct Callers {
    stop: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<std::sync::atomic::AtomicU64>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    served: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What [`Callers`] saw.
pub struct CallerReport {
    /// Calls made (a missing provider is a failure, not a call).
    pub calls: u64,
    /// Every failed call: the provider missing, a wrong name, an error.
    pub failures: Vec<String>,
    /// The sha256 of every version that answered a call.
    pub served: std::collections::HashSet<String>,
}

impl Callers {
    /// Starts `tasks` callers of provider `name`, expecting `name()` to answer `expected`.
    pub fn start(
        registry: &Arc<Registry>,
        name: &str,
        expected: &'static str,
        tasks: usize,
    ) -> Self {
        use std::sync::atomic::Ordering;
        let callers = Callers {
            stop: Arc::default(),
            calls: Arc::default(),
            failures: Arc::default(),
            served: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..tasks)
            .map(|_| {
                let (stop, calls, failures, served) = (
                    Arc::clone(&callers.stop),
                    Arc::clone(&callers.calls),
                    Arc::clone(&callers.failures),
                    Arc::clone(&callers.served),
                );
                let registry = Arc::clone(registry);
                let name = name.to_owned();
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let Some(provider) = registry.get(&name) else {
                            failures.lock().unwrap().push("provider missing".into());
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        };
                        match provider.name().await {
                            Ok(reported) if reported == expected => {
                                served.lock().unwrap().insert(provider.sha256().to_owned());
                            }
                            Ok(other) => failures.lock().unwrap().push(format!("name() = {other}")),
                            Err(err) => failures.lock().unwrap().push(err.to_string()),
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Callers { tasks, ..callers }
    }

    /// Stops the callers and reports what they saw.
    pub async fn stop(self) -> CallerReport {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        CallerReport {
            calls: self.calls.load(Ordering::Relaxed),
            failures: self.failures.lock().unwrap().clone(),
            served: self.served.lock().unwrap().clone(),
        }
    }
}
