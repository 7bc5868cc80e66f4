//! The emulated cloud's state: the catalog, VMs, async jobs, accounts, faults and a log of the
//! requests served. One lock; nothing awaits while holding it.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cloudstack_sign::Credentials;
use serde::Serialize;

use crate::catalog::{Catalog, Tag};
use crate::faults::{Faults, JobLatency};
use crate::jobs::Job;

/// A VM's state, as CloudStack names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VmState {
    /// Deploy job running.
    Starting,
    /// Deployed; its Node is registered.
    Running,
    /// Deploy failed; kept (holding its name) until destroyed, as CloudStack does.
    Error,
    /// Destroyed without expunge.
    Destroyed,
}

impl VmState {
    /// CloudStack's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Starting => "Starting",
            VmState::Running => "Running",
            VmState::Error => "Error",
            VmState::Destroyed => "Destroyed",
        }
    }

    /// Whether the VM uses zone capacity.
    pub fn uses_capacity(self) -> bool {
        matches!(self, VmState::Starting | VmState::Running)
    }
}

/// A VM's NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// UUID.
    pub id: String,
    /// Network UUID.
    pub network_id: String,
    /// Network name.
    pub network_name: String,
    /// IPv4 address.
    pub ip_address: String,
    /// Netmask.
    pub netmask: String,
    /// Gateway.
    pub gateway: String,
    /// MAC address.
    pub mac_address: String,
    /// The default NIC (the first network).
    pub is_default: bool,
}

/// A VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Vm {
    /// UUID.
    pub id: String,
    /// Name (host name; the Node's name).
    pub name: String,
    /// Display name.
    pub display_name: String,
    /// Internal name, `i-2-<n>-VM`.
    pub instance_name: String,
    /// Zone UUID.
    pub zone_id: String,
    /// Service offering UUID.
    pub service_offering_id: String,
    /// Template UUID.
    pub template_id: String,
    /// NICs, one per network in `networkids` order.
    pub nics: Vec<Nic>,
    /// `userdata` as sent (Base64).
    pub user_data: Option<String>,
    /// `rootdisksize` in GiB.
    pub root_disk_size: Option<u64>,
    /// `diskofferingid`.
    pub disk_offering_id: Option<String>,
    /// `keypair`.
    pub keypair: Option<String>,
    /// State.
    pub state: VmState,
    /// Resource tags (resource type `UserVm`).
    pub tags: Vec<Tag>,
    /// Creation time, CloudStack's format.
    pub created: String,
    /// The deploy job's UUID.
    pub deploy_job_id: String,
    /// The boot ID its kubelet reports (`status.nodeInfo.bootID`): a new one on every boot.
    pub boot_id: String,
    /// Reboots completed (`rebootVirtualMachine` jobs that succeeded).
    pub reboots: u32,
}

/// One request the emulator answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    /// `GET` or `POST`.
    pub method: String,
    /// The `command` parameter, if any.
    pub command: Option<String>,
    /// The decoded parameters, `signature` left out.
    pub params: Vec<(String, String)>,
    /// `signatureVersion`, if the request verified and sent one.
    pub signature_version: Option<String>,
    /// The HTTP status answered.
    pub status: u16,
}

/// The inspectable state (`GET /admin/state`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// VMs (expunged ones are gone).
    pub vms: Vec<Vm>,
    /// Async jobs, oldest first.
    pub jobs: Vec<crate::jobs::JobSnapshot>,
    /// Requests answered, oldest first.
    pub requests: Vec<RequestRecord>,
    /// Node work that failed.
    pub node_errors: Vec<String>,
}

/// Everything behind the lock.
#[derive(Debug)]
pub(crate) struct State {
    pub catalog: Catalog,
    pub accounts: Vec<Credentials>,
    pub vms: Vec<Vm>,
    /// VMs expunged: their UUIDs still resolve (CloudStack searches removed rows too), so a list
    /// by such an id is empty and a destroy says the VM is not found, rather than 431 for an
    /// unknown UUID.
    pub removed_vms: BTreeSet<String>,
    pub jobs: Vec<Job>,
    pub faults: Faults,
    pub job_latency: JobLatency,
    pub requests: Vec<RequestRecord>,
    pub node_errors: Vec<String>,
    ids: IdGen,
    pub vm_counter: u64,
    /// Next host address per network.
    pub next_host: HashMap<String, u32>,
}

impl State {
    pub fn new(catalog: Catalog, accounts: Vec<Credentials>, job_latency: JobLatency) -> Self {
        Self {
            catalog,
            accounts,
            vms: Vec::new(),
            removed_vms: BTreeSet::new(),
            jobs: Vec::new(),
            faults: Faults::default(),
            job_latency,
            requests: Vec::new(),
            node_errors: Vec::new(),
            ids: IdGen::new(),
            vm_counter: 0,
            next_host: HashMap::new(),
        }
    }

    /// A fresh UUID.
    pub fn new_id(&mut self) -> String {
        self.ids.next()
    }

    /// The secret key of `api_key`.
    pub fn secret_for(&self, api_key: &str) -> Option<String> {
        self.accounts
            .iter()
            .find(|c| c.api_key == api_key)
            .map(|c| c.secret_key.clone())
    }

    pub fn vm(&self, id: &str) -> Option<&Vm> {
        self.vms.iter().find(|vm| vm.id == id)
    }

    pub fn vm_mut(&mut self, id: &str) -> Option<&mut Vm> {
        self.vms.iter_mut().find(|vm| vm.id == id)
    }

    /// Sets a zone's capacity; false if there is no such zone.
    pub fn set_zone_capacity(&mut self, zone_id: &str, capacity: Option<u32>) -> bool {
        match self.catalog.zones.iter_mut().find(|z| z.id == zone_id) {
            Some(zone) => {
                zone.capacity = capacity;
                true
            }
            None => false,
        }
    }

    /// What tests inspect.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            vms: self.vms.clone(),
            jobs: self.jobs.iter().map(crate::jobs::Job::snapshot).collect(),
            requests: self.requests.clone(),
            node_errors: self.node_errors.clone(),
        }
    }

    /// VMs in `zone_id` using capacity.
    pub fn vms_using_capacity(&self, zone_id: &str) -> usize {
        self.vms
            .iter()
            .filter(|vm| vm.zone_id == zone_id && vm.state.uses_capacity())
            .count()
    }
}

/// Milliseconds since the epoch.
pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now in CloudStack's output format (`yyyy-MM-dd'T'HH:mm:ssZ`, UTC), the format `expires`
/// is written in too.
pub(crate) fn timestamp() -> String {
    cloudstack_sign::format_expires(now_millis() / 1000)
}

/// UUID-shaped (version 4 layout) identifiers: a random per-emulator prefix and a counter.
#[derive(Debug)]
struct IdGen {
    seed: u64,
    counter: u64,
}

impl IdGen {
    fn new() -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(Instant::now().elapsed().as_nanos());
        Self {
            seed: hasher.finish(),
            counter: 0,
        }
    }

    fn next(&mut self) -> String {
        self.counter += 1;
        let a = self.seed;
        let b = self.counter;
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_shaped_and_unique() {
        let mut ids = IdGen::new();
        let a = ids.next();
        let b = ids.next();
        assert_ne!(a, b);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
