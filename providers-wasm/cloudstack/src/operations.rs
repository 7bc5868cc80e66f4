//! What each export does, over the [`Client`] and a small key-value [`Store`] (the host cache
//! in the component): resolving a NodeClass (the cloud listed once and cached), launching with
//! zone fallback, deleting with `expunge`, rebooting once per operation, finding VMs by their
//! ownership tags, drift. Generic over the transport, clock and store, so it runs natively
//! against a scripted cloud.

use std::time::Duration;

use capstan_provider_sdk::{
    NodeClaim, ProviderError, RebootError, Requirements, ResourceList, labels, lookup,
};
use serde_json::Value;

use crate::api::model::VirtualMachine;
use crate::api::{ApiError, Context};
use crate::catalog::{self, Cloud, Resolved, Unavailable};
use crate::client::{Client, Clock, Method, Transport};
use crate::drift::{self, Recorded};
use crate::instance::{self, Launched};
use crate::params::Parameters;
use crate::selection::{self, Candidate};
use crate::tags::{self, Ownership};

/// How long the listed cloud is reused across calls.
pub const CLOUD_TTL: Duration = Duration::from_secs(30);
/// How long an offering that ran out of capacity is reported unavailable.
pub const UNAVAILABLE_TTL: Duration = Duration::from_secs(180);
/// Deploys one `create` tries before giving up (each in another offering or zone).
pub const MAX_ATTEMPTS: usize = 4;
/// How long `delete` waits for the destroy job before answering "under way".
pub const DELETE_WAIT: Duration = Duration::from_secs(10);
/// How long cleaning up a failed deploy may take before the next attempt.
pub const CLEANUP_WAIT: Duration = Duration::from_secs(20);
/// How long tagging may take.
pub const TAG_WAIT: Duration = Duration::from_secs(20);
/// How long `reboot` may wait in all (tags and the reboot job) before answering that the reboot
/// is under way: well inside the host's 30-second limit of a call.
pub const REBOOT_WAIT: Duration = Duration::from_secs(20);
/// Poll interval of the jobs `delete` and `reboot` wait for.
const INSTANCE_POLL_MILLIS: u64 = 250;

/// A small key-value store shared by calls (the host cache).
pub trait Store {
    /// The value under `key`.
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Stores `value` under `key` for `ttl`.
    fn set(&self, key: &str, value: &[u8], ttl: Duration);
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Per-endpoint and per-account cache keys (the API key hashed).
fn key(kind: &str, scope: &str) -> String {
    format!("{kind}:{}", crate::hash::short(scope.as_bytes()))
}

/// The calls' shared context: a client, the store, and the scope of cache keys.
pub struct Ops<'a, T, C, S> {
    /// The API client.
    pub client: &'a mut Client<T, C>,
    /// The store.
    pub store: &'a S,
    /// What cache keys are scoped by (endpoint and API key).
    pub scope: String,
    /// The cluster name (ownership tag).
    pub cluster: String,
}

impl<T: Transport, C: Clock, S: Store> Ops<'_, T, C, S> {
    fn now(&self) -> u64 {
        self.client.clock().now_millis()
    }

    /// The cloud, from the store when listed in the last [`CLOUD_TTL`].
    pub fn cloud(&mut self, with_disks: bool) -> Result<Cloud, ApiError> {
        let k = key(
            if with_disks { "cloud+disks" } else { "cloud" },
            &self.scope,
        );
        if let Some(cloud) = self
            .store
            .get(&k)
            .and_then(|b| serde_json::from_slice::<Cloud>(&b).ok())
        {
            return Ok(cloud);
        }
        let cloud = self.client.cloud(with_disks)?;
        if let Ok(bytes) = serde_json::to_vec(&cloud) {
            self.store.set(&k, &bytes, CLOUD_TTL);
        }
        Ok(cloud)
    }

    /// The NodeClass resolved against the cloud.
    pub fn resolve(
        &mut self,
        params: &Parameters,
        context: Context,
    ) -> Result<Resolved, ProviderError> {
        let cloud = self
            .cloud(params.disk_offering.is_some())
            .map_err(|e| e.into_provider_error(context))?;
        catalog::resolve(params, &cloud)
    }

    /// Offerings that recently ran out of capacity.
    pub fn unavailable(&self) -> Unavailable {
        let now = self.now();
        self.unavailable_entries()
            .into_iter()
            .filter(|(_, _, until)| *until > now)
            .map(|(o, z, _)| (o, z))
            .collect()
    }

    fn unavailable_entries(&self) -> Vec<(String, String, u64)> {
        self.store
            .get(&key("unavailable", &self.scope))
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn mark_unavailable(&self, offering_id: &str, zone_id: &str) {
        let now = self.now();
        let mut entries = self.unavailable_entries();
        entries.retain(|(o, z, until)| *until > now && !(o == offering_id && z == zone_id));
        entries.push((
            offering_id.to_string(),
            zone_id.to_string(),
            now + millis(UNAVAILABLE_TTL),
        ));
        if let Ok(bytes) = serde_json::to_vec(&entries) {
            self.store
                .set(&key("unavailable", &self.scope), &bytes, UNAVAILABLE_TTL);
        }
    }

    /// The tags a VM launched for `claim` carries: the NodeClass's and the ownership tags.
    fn vm_tags(
        &self,
        params: &Parameters,
        class_name: &str,
        claim: &NodeClaim,
    ) -> Vec<(String, String)> {
        let hash = params.hash();
        let owner = Ownership {
            cluster: &self.cluster,
            node_claim: &claim.name,
            node_pool: claim.node_pool_name.as_deref(),
            node_class: class_name,
            parameters_hash: &hash,
        };
        tags::vm_tags(&params.tags, &owner)
    }

    /// The WIT catalog for a NodeClass.
    pub fn catalog(
        &mut self,
        params: &Parameters,
    ) -> Result<capstan_provider_sdk::Catalog, ProviderError> {
        let resolved = self.resolve(params, Context::NodeClass)?;
        Ok(catalog::to_catalog(&resolved, &self.unavailable()))
    }

    /// Launches the claim (see the module docs of [`crate::provider`]).
    pub fn create(
        &mut self,
        params: &Parameters,
        class_name: &str,
        claim: &NodeClaim,
    ) -> Result<NodeClaim, ProviderError> {
        let started = self.now();
        let name = instance::vm_name(&claim.name);
        let err = |e: ApiError| e.into_provider_error(Context::Create);
        let resolved = self.resolve(params, Context::Create)?;
        if let Some(found) = self.existing(params, &resolved, &name, class_name, claim, started)? {
            return Ok(found);
        }
        let requirements = Requirements::from_slice(&claim.requirements)
            .map_err(|e| ProviderError::Invalid(e.to_string()))?;
        let requests = ResourceList::from_resources(&claim.requests)
            .map_err(|e| ProviderError::Invalid(e.to_string()))?;
        let unavailable = self.unavailable();
        let candidates = selection::candidates(&resolved, &requirements, &requests, &unavailable)
            .map_err(ProviderError::InsufficientCapacity)?;
        let vm_tags = self.vm_tags(params, class_name, claim);
        let mut no_capacity = Vec::new();
        let mut sold_out: Unavailable = Unavailable::new();
        let mut attempts = 0;
        for candidate in &candidates {
            // Another architecture of an offering that just ran out in this zone: skip it too.
            if sold_out.contains(&candidate.key()) {
                continue;
            }
            if attempts == MAX_ATTEMPTS {
                break;
            }
            attempts += 1;
            let waited = self.now().saturating_sub(started);
            let budget = params.launch_timeout_millis().saturating_sub(waited);
            if budget == 0 {
                break;
            }
            match self.deploy(params, &resolved, candidate, &name, claim, &vm_tags, budget) {
                Ok(vm) => {
                    log_info(&format!(
                        "launched {} as {} in {} ({}) in {} ms with {} API calls",
                        claim.name,
                        candidate.instance_type.name,
                        candidate.placement.zone_name,
                        candidate.arch,
                        self.now().saturating_sub(started),
                        self.client.calls()
                    ));
                    let launched = Launched {
                        instance_type: candidate.instance_type,
                        arch: candidate.arch,
                        network_id: &candidate.placement.network_id,
                    };
                    return Ok(instance::launched_claim(&vm, launched, claim));
                }
                Err(e) if e.is_insufficient_capacity() => {
                    let (offering, zone) = candidate.key();
                    self.mark_unavailable(&offering, &zone);
                    sold_out.insert((offering, zone));
                    no_capacity.push(format!(
                        "{} in {}: {e}",
                        candidate.instance_type.name, candidate.placement.zone_name
                    ));
                }
                Err(e) => return Err(err(e)),
            }
        }
        if no_capacity.is_empty() {
            return Err(ProviderError::create_failed(
                "CloudStackJobTimeout",
                format!(
                    "no deploy finished within launchTimeoutSeconds ({} s)",
                    params.launch_timeout_millis() / 1000
                ),
            ));
        }
        Err(ProviderError::InsufficientCapacity(format!(
            "no capacity for {}: {}",
            claim.name,
            no_capacity.join("; ")
        )))
    }

    /// A VM an earlier `create` for this claim launched (a retry after a timeout or crash):
    /// waited for and tagged if needed. A VM that failed to start is destroyed first.
    fn existing(
        &mut self,
        params: &Parameters,
        resolved: &Resolved,
        name: &str,
        class_name: &str,
        claim: &NodeClaim,
        started: u64,
    ) -> Result<Option<NodeClaim>, ProviderError> {
        let err = |e: ApiError| e.into_provider_error(Context::Create);
        let vms = self.client.vms_named(None, name).map_err(err)?;
        let mine: Vec<VirtualMachine> = vms
            .into_iter()
            .filter(|vm| !vm.is_leaving())
            .filter(|vm| vm.tag(tags::NODE_CLAIM).is_none_or(|c| c == claim.name))
            .filter(|vm| vm.tag(tags::CLUSTER).is_none_or(|c| c == self.cluster))
            .collect();
        let Some(mut vm) = mine.into_iter().next() else {
            return Ok(None);
        };
        if vm.is_error() {
            self.destroy_and_wait(&vm.id, millis(CLEANUP_WAIT));
            return Ok(None);
        }
        if vm.tag(tags::NODE_CLAIM).is_none() {
            let missing: Vec<(String, String)> = self
                .vm_tags(params, class_name, claim)
                .into_iter()
                .filter(|(k, _)| vm.tag(k).is_none())
                .collect();
            let job = self.client.create_tags(&vm.id, &missing).map_err(err)?;
            self.client
                .wait(
                    "createTags",
                    &job.job_id,
                    params.poll_millis(),
                    millis(TAG_WAIT),
                )
                .map_err(err)?;
        }
        let mut delay = params.poll_millis();
        while !vm.is_running() {
            if vm.is_error() || vm.is_leaving() {
                return Err(ProviderError::create_failed(
                    "CloudStackVmFailed",
                    format!("VM {} ({}) is {}", vm.name, vm.id, vm.state),
                ));
            }
            if self.now().saturating_sub(started) >= params.launch_timeout_millis() {
                return Err(ProviderError::create_failed(
                    "CloudStackJobTimeout",
                    format!("VM {} ({}) still {}", vm.name, vm.id, vm.state),
                ));
            }
            self.client.clock().sleep_millis(delay);
            delay = (delay * 3 / 2).min(params.poll_millis() * 4);
            vm = self.client.vm(&vm.id).map_err(err)?.ok_or_else(|| {
                ProviderError::Retryable(format!("VM {name} vanished while starting"))
            })?;
        }
        let t = resolved
            .types
            .iter()
            .find(|t| t.offering_id == vm.service_offering_id);
        let placement = resolved.placements.iter().find(|p| p.zone_id == vm.zone_id);
        Ok(Some(match (t, placement) {
            (Some(t), Some(p)) => {
                let arch = p
                    .templates
                    .iter()
                    .find(|(_, tpl)| tpl.id == vm.template_id)
                    .map_or_else(
                        || crate::api::model::kube_arch(vm.arch.as_deref()),
                        |(a, _)| a.clone(),
                    );
                let network = vm
                    .nics
                    .first()
                    .map_or(p.network_id.clone(), |n| n.network_id.clone());
                instance::launched_claim(
                    &vm,
                    Launched {
                        instance_type: t,
                        arch: &arch,
                        network_id: &network,
                    },
                    claim,
                )
            }
            _ => instance::to_claim(&vm, None),
        }))
    }

    /// One deploy: start it, tag the VM at once (so garbage collection finds it even if this
    /// call dies), wait for the job. A VM whose deploy failed is destroyed.
    #[allow(clippy::too_many_arguments)]
    fn deploy(
        &mut self,
        params: &Parameters,
        resolved: &Resolved,
        c: &Candidate<'_>,
        name: &str,
        claim: &NodeClaim,
        vm_tags: &[(String, String)],
        budget: u64,
    ) -> Result<VirtualMachine, ApiError> {
        let mut p: Vec<(String, String)> = vec![
            ("zoneid".into(), c.placement.zone_id.clone()),
            (
                "serviceofferingid".into(),
                c.instance_type.offering_id.clone(),
            ),
            ("templateid".into(), c.template_id().to_string()),
            ("networkids".into(), c.placement.network_id.clone()),
            ("name".into(), name.to_string()),
            ("displayname".into(), claim.name.clone()),
        ];
        if let Some(data) = params.user_data_base64() {
            p.push(("userdata".into(), data));
        }
        if let Some(keypair) = &params.ssh_key_pair {
            p.push(("keypair".into(), keypair.clone()));
        }
        if let Some(size) = params.root_disk_size {
            p.push(("rootdisksize".into(), size.to_string()));
        }
        if let Some(disk) = &resolved.disk_offering_id {
            p.push(("diskofferingid".into(), disk.clone()));
        }
        let start = self
            .client
            .start("deployVirtualMachine", &p, Method::Post)?;
        let tag_job = match &start.id {
            Some(id) => match self.client.create_tags(id, vm_tags) {
                Ok(job) => Some(job.job_id),
                Err(e) => {
                    log_info(&format!("tagging VM {id} failed, retrying after boot: {e}"));
                    None
                }
            },
            None => None,
        };
        let result = self.client.wait(
            "deployVirtualMachine",
            &start.job_id,
            params.poll_millis(),
            budget,
        );
        let result = match result {
            Ok(result) => result,
            Err(e) => {
                if let Some(id) = &start.id {
                    // A failed or late deploy leaves the VM (Error or Starting): remove it, so
                    // the next attempt can reuse the name and nothing leaks.
                    self.destroy_and_wait(id, millis(CLEANUP_WAIT));
                }
                return Err(e);
            }
        };
        let vm = match vm_of(&result) {
            Some(vm) => vm,
            None => {
                let id = start.id.clone().unwrap_or_default();
                self.client
                    .vm(&id)?
                    .ok_or_else(|| ApiError::NotCloudStack {
                        command: "deployVirtualMachine".into(),
                        status: 200,
                        detail: format!("job {} succeeded but VM {id} is not listed", start.job_id),
                    })?
            }
        };
        let tagged = match tag_job {
            Some(job) => self
                .client
                .wait("createTags", &job, params.poll_millis(), millis(TAG_WAIT))
                .is_ok(),
            None => false,
        };
        if !tagged {
            let job = self.client.create_tags(&vm.id, vm_tags)?;
            self.client.wait(
                "createTags",
                &job.job_id,
                params.poll_millis(),
                millis(TAG_WAIT),
            )?;
        }
        let mut vm = vm;
        if vm.tags.is_empty() {
            vm.tags = vm_tags
                .iter()
                .map(|(k, v)| crate::api::model::Tag {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect();
        }
        Ok(vm)
    }

    /// Destroys (expunging) and waits a while; failures are logged, not returned (cleanup).
    fn destroy_and_wait(&mut self, vm_id: &str, wait: u64) {
        let poll = 250;
        match self.client.destroy(vm_id) {
            Ok(job) => {
                if let Err(e) = self
                    .client
                    .wait("destroyVirtualMachine", &job.job_id, poll, wait)
                {
                    log_info(&format!("cleaning up VM {vm_id}: {e}"));
                }
            }
            Err(e) => log_info(&format!("cleaning up VM {vm_id}: {e}")),
        }
    }

    /// Deletes the claim's VM: `destroyVirtualMachine` with `expunge=true`, waiting up to
    /// [`DELETE_WAIT`]; `not-found` once it is gone.
    pub fn delete(&mut self, claim: &NodeClaim) -> Result<(), ProviderError> {
        let err = |e: ApiError| e.into_provider_error(Context::Instance);
        let vm = match claim.provider_id.as_deref() {
            Some(id) => {
                let (_, vm_id) = instance::parse_provider_id(id).ok_or_else(|| {
                    ProviderError::NotFound(format!("{id:?} is not a CloudStack provider ID"))
                })?;
                self.client.vm(vm_id).map_err(err)?
            }
            None => self
                .client
                .vms_named(None, &instance::vm_name(&claim.name))
                .map_err(err)?
                .into_iter()
                .find(|vm| vm.tag(tags::NODE_CLAIM) == Some(claim.name.as_str())),
        };
        let Some(vm) = vm else {
            return Err(ProviderError::NotFound(format!(
                "the VM of {} is gone",
                claim.name
            )));
        };
        if vm.state.eq_ignore_ascii_case("expunging") {
            return Ok(());
        }
        let pending = key("destroy", &format!("{}/{}", self.scope, vm.id));
        if let Some(job) = self
            .store
            .get(&pending)
            .and_then(|b| String::from_utf8(b).ok())
            && self.client.job(&job).map_err(err)? == crate::api::response::JobStatus::Pending
        {
            return Ok(());
        }
        let job = self.client.destroy(&vm.id).map_err(err)?;
        self.store
            .set(&pending, job.job_id.as_bytes(), Duration::from_secs(600));
        match self.client.wait(
            "destroyVirtualMachine",
            &job.job_id,
            250,
            millis(DELETE_WAIT),
        ) {
            Ok(_) => match self.client.vm(&vm.id).map_err(err)? {
                None => Err(ProviderError::NotFound(format!(
                    "VM {} ({}) expunged",
                    vm.name, vm.id
                ))),
                Some(_) => Ok(()),
            },
            Err(ApiError::JobTimeout { .. }) => Ok(()),
            Err(e) => Err(err(e)),
        }
    }

    /// Reboots the claim's VM in place (`rebootVirtualMachine`), once per `operation_id`: the
    /// operation ID goes on the VM as a tag ([`tags::REBOOT_OPERATION`]) before the reboot
    /// starts, and a VM already tagged with it is not rebooted again (at most once: a reboot
    /// that the tag announced but that never started shows on the Node, which keeps its boot
    /// ID, and the host replaces it). Waits for the job up to [`REBOOT_WAIT`] in all; a job
    /// still pending then is a reboot under way (ok).
    ///
    /// `not-found` for an unknown provider ID or an expunged VM; `failed` for a VM that is not
    /// `Running` (`Stopped`, `Destroyed`, `Error`...), for CloudStack refusing the reboot (431)
    /// and for credentials or grants that do not allow it; `retryable` for a VM on its way
    /// (`Starting`, `Stopping`, `Migrating`) and for transient failures (throttling, an
    /// unreachable or broken endpoint, a job that failed on CloudStack's side).
    pub fn reboot(&mut self, claim: &NodeClaim, operation_id: &str) -> Result<(), RebootError> {
        let started = self.now();
        let deadline = started + millis(REBOOT_WAIT);
        let Some(provider_id) = claim.provider_id.as_deref().filter(|id| !id.is_empty()) else {
            return Err(RebootError::NotFound(format!(
                "NodeClaim {} has no provider ID",
                claim.name
            )));
        };
        let (_, vm_id) = instance::parse_provider_id(provider_id).ok_or_else(|| {
            RebootError::NotFound(format!("{provider_id:?} is not a CloudStack provider ID"))
        })?;
        let vm = self
            .client
            .vm(vm_id)
            .map_err(reboot_error)?
            .ok_or_else(|| RebootError::NotFound(format!("no VM {vm_id}")))?;
        let what = format!("VM {} ({})", vm.name, vm.id);
        if vm.is_leaving() {
            return Err(RebootError::Failed(format!(
                "{what} is {}: it cannot be rebooted",
                vm.state
            )));
        }
        let recorded = vm.tag(tags::REBOOT_OPERATION);
        if recorded == Some(operation_id) {
            log_info(&format!(
                "{what}: reboot {operation_id} was asked for already, not rebooting again"
            ));
            return Ok(());
        }
        if !vm.is_running() {
            let message = format!("{what} is {}: only a Running VM reboots", vm.state);
            return Err(if reboot_settles(&vm.state) {
                RebootError::Retryable(message)
            } else {
                RebootError::Failed(message)
            });
        }
        // Record the operation first: from here on the same operation does not reboot again.
        let tag = |value: &str| vec![(tags::REBOOT_OPERATION.to_string(), value.to_string())];
        if let Some(previous) = recorded {
            let job = self
                .client
                .delete_tags(&vm.id, &tag(previous))
                .map_err(reboot_error)?;
            self.wait_until("deleteTags", &job.job_id, deadline)
                .map_err(reboot_error)?;
        }
        let job = self
            .client
            .create_tags(&vm.id, &tag(operation_id))
            .map_err(reboot_error)?;
        self.wait_until("createTags", &job.job_id, deadline)
            .map_err(reboot_error)?;
        let job = match self.client.reboot(&vm.id) {
            Ok(job) => job,
            // CloudStack refused it: nothing started, so the same operation may try again.
            Err(e @ ApiError::CloudStack { .. }) => {
                self.forget_reboot(&vm.id, operation_id);
                return Err(reboot_error(e));
            }
            // No answer: CloudStack may have started it; the tag stays (at most once).
            Err(e) => return Err(reboot_error(e)),
        };
        match self.wait_until("rebootVirtualMachine", &job.job_id, deadline) {
            Ok(_) => {
                log_info(&format!(
                    "rebooted {what} for {} (operation {operation_id}) in {} ms",
                    claim.name,
                    self.now().saturating_sub(started)
                ));
                Ok(())
            }
            Err(ApiError::JobTimeout { .. }) => {
                log_info(&format!(
                    "rebooting {what} for {} (operation {operation_id}): job {} under way",
                    claim.name, job.job_id
                ));
                Ok(())
            }
            Err(e @ ApiError::JobFailed { .. }) => {
                // The job failed: the VM did not reboot.
                self.forget_reboot(&vm.id, operation_id);
                Err(reboot_error(e))
            }
            Err(e) => Err(reboot_error(e)),
        }
    }

    /// Waits for a job until `deadline` (at least one look).
    fn wait_until(
        &mut self,
        command: &str,
        job_id: &str,
        deadline: u64,
    ) -> Result<Value, ApiError> {
        let budget = deadline.saturating_sub(self.now());
        self.client
            .wait(command, job_id, INSTANCE_POLL_MILLIS, budget)
    }

    /// Removes the operation tag of a reboot that did not start, so that the same operation may
    /// start it when asked again; failures are logged (the reboot's own error is the answer).
    fn forget_reboot(&mut self, vm_id: &str, operation_id: &str) {
        let tag = [(tags::REBOOT_OPERATION.to_string(), operation_id.to_string())];
        let removed = self.client.delete_tags(vm_id, &tag).and_then(|job| {
            self.client.wait(
                "deleteTags",
                &job.job_id,
                INSTANCE_POLL_MILLIS,
                millis(TAG_WAIT),
            )
        });
        if let Err(e) = removed {
            log_info(&format!(
                "VM {vm_id}: removing the tag of reboot {operation_id}, which did not start: {e}"
            ));
        }
    }

    /// The VM with this provider ID.
    pub fn get(&mut self, provider_id: &str) -> Result<NodeClaim, ProviderError> {
        let (_, vm_id) = instance::parse_provider_id(provider_id).ok_or_else(|| {
            ProviderError::NotFound(format!("{provider_id:?} is not a CloudStack provider ID"))
        })?;
        match self
            .client
            .vm(vm_id)
            .map_err(|e| e.into_provider_error(Context::Instance))?
        {
            Some(vm) if !vm.is_leaving() => Ok(instance::to_claim(&vm, None)),
            _ => Err(ProviderError::NotFound(format!("no VM {vm_id}"))),
        }
    }

    /// Every VM of this cluster (by its ownership tags), one list call.
    pub fn list(&mut self) -> Result<Vec<NodeClaim>, ProviderError> {
        let vms = self
            .client
            .vms_tagged(&tags::cluster_selector(&self.cluster))
            .map_err(|e| e.into_provider_error(Context::Instance))?;
        Ok(vms
            .iter()
            .filter(|vm| !vm.is_leaving())
            .filter(|vm| vm.tag(tags::CLUSTER) == Some(self.cluster.as_str()))
            .map(|vm| instance::to_claim(vm, None))
            .collect())
    }

    /// Whether the claim's VM drifted from the NodeClass.
    pub fn is_drifted(
        &mut self,
        params: &Parameters,
        claim: &NodeClaim,
    ) -> Result<Option<String>, ProviderError> {
        let resolved = self.resolve(params, Context::NodeClass)?;
        let source = if lookup(&claim.annotations, instance::TEMPLATE_ANNOTATION).is_some() {
            claim.clone()
        } else {
            let Some(id) = &claim.provider_id else {
                return Ok(None);
            };
            match self.get(id) {
                Ok(c) => c,
                Err(ProviderError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        };
        let a = |k: &str| lookup(&source.annotations, k);
        let recorded = Recorded {
            zone_id: a(instance::ZONE_ANNOTATION),
            arch: lookup(&claim.labels, labels::ARCH).or(lookup(&source.labels, labels::ARCH)),
            template_id: a(instance::TEMPLATE_ANNOTATION),
            offering_id: a(instance::OFFERING_ANNOTATION),
            network_id: a(instance::NETWORK_ANNOTATION),
            hash: a(instance::HASH_ANNOTATION),
        };
        Ok(drift::reason(recorded, &resolved, &params.hash()).map(str::to_string))
    }
}

/// Whether a VM in `state` becomes Running (or settles in a state a reboot can judge) by
/// itself: asking again later may reboot it.
fn reboot_settles(state: &str) -> bool {
    ["starting", "stopping", "migrating"]
        .iter()
        .any(|s| state.eq_ignore_ascii_case(s))
}

/// The contract's reboot error for a failed call: CloudStack refusing the reboot (431, a VM that
/// is not Running or is gone), rejected credentials (401, 432), an endpoint outside the egress
/// grants and a redirect cannot be retried away (`failed`); everything else (throttling, an
/// unreachable or broken endpoint, a failed or late job, missing configuration) is `retryable`.
pub fn reboot_error(e: ApiError) -> RebootError {
    let message = e.to_string();
    if e.is_auth()
        || e.code() == Some(crate::api::error::PARAM_ERROR)
        || matches!(e, ApiError::Denied { .. } | ApiError::Redirect { .. })
    {
        RebootError::Failed(format!("{}: {message}", e.reason()))
    } else {
        RebootError::Retryable(message)
    }
}

/// The VM in a deploy job's result.
fn vm_of(result: &Value) -> Option<VirtualMachine> {
    serde_json::from_value(result.get("virtualmachine")?.clone()).ok()
}

/// Logs through the host in the component; nowhere natively.
fn log_info(message: &str) {
    #[cfg(target_arch = "wasm32")]
    capstan_provider_sdk::info!("{message}");
    #[cfg(not(target_arch = "wasm32"))]
    let _ = message;
}

#[cfg(test)]
mod tests;
