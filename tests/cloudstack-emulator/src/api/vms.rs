//! `deployVirtualMachine`, `destroyVirtualMachine` and `rebootVirtualMachine` (async) and
//! `listVirtualMachines`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::catalog::{check_zone, cidr_parts, host_address, netmask, tag_json};
use super::error::{ApiError, INSUFFICIENT_CAPACITY_ERROR, PARAM_ERROR};
use super::params::{Params, has_tags};
use super::{ACCOUNT, DOMAIN, DOMAIN_ID, USER_ID, list};
use crate::faults::JobFailure;
use crate::jobs::{self, JobWork};
use crate::state::{Nic, State, Vm, VmState, timestamp};

/// CloudStack's limit on `userdata` (Base64) in a GET request.
pub const MAX_GET_USER_DATA: usize = 4096;
/// CloudStack's default limit on `userdata` (Base64) in a POST request
/// (`vm.userdata.max.length`).
pub const MAX_POST_USER_DATA: usize = 32768;

/// The `virtualmachine` object.
pub fn vm_json(state: &State, vm: &Vm) -> Value {
    let offering = state.catalog.service_offering(&vm.service_offering_id);
    let template = state.catalog.template(&vm.template_id);
    let zone = state.catalog.zone(&vm.zone_id);
    let nics: Vec<Value> = vm
        .nics
        .iter()
        .enumerate()
        .map(|(i, nic)| {
            json!({
                "id": nic.id,
                "networkid": nic.network_id,
                "networkname": nic.network_name,
                "netmask": nic.netmask,
                "gateway": nic.gateway,
                "ipaddress": nic.ip_address,
                "isolationuri": "vlan://100",
                "broadcasturi": "vlan://100",
                "traffictype": "Guest",
                "type": "Isolated",
                "isdefault": nic.is_default,
                "macaddress": nic.mac_address,
                "deviceid": i.to_string(),
                "extradhcpoption": [],
            })
        })
        .collect();
    let mut v = json!({
        "id": vm.id,
        "name": vm.name,
        "displayname": vm.display_name,
        "account": ACCOUNT,
        "userid": USER_ID,
        "username": ACCOUNT,
        "domainid": DOMAIN_ID,
        "domain": DOMAIN,
        "created": vm.created,
        "state": vm.state.as_str(),
        "haenable": false,
        "zoneid": vm.zone_id,
        "zonename": zone.map(|z| z.name.as_str()).unwrap_or(""),
        "templateid": vm.template_id,
        "templatename": template.map(|t| t.name.as_str()).unwrap_or(""),
        "templatedisplaytext": template.map(|t| t.display_text.as_str()).unwrap_or(""),
        "passwordenabled": false,
        "serviceofferingid": vm.service_offering_id,
        "serviceofferingname": offering.map(|o| o.name.as_str()).unwrap_or(""),
        "cpunumber": offering.map(|o| o.cpu_number).unwrap_or(0),
        "cpuspeed": offering.map(|o| o.cpu_speed).unwrap_or(0),
        "memory": offering.map(|o| o.memory).unwrap_or(0),
        "guestosid": template.map(|t| t.os_type_id.as_str()).unwrap_or(""),
        "ostypeid": template.map(|t| t.os_type_id.as_str()).unwrap_or(""),
        "osdisplayname": template.map(|t| t.os_type_name.as_str()).unwrap_or(""),
        "arch": template.map(|t| t.arch.as_str()).unwrap_or(""),
        "rootdeviceid": 0,
        "rootdevicetype": "ROOT",
        "securitygroup": [],
        "nic": nics,
        "hypervisor": "KVM",
        "instancename": vm.instance_name,
        "affinitygroup": [],
        "displayvm": true,
        "isdynamicallyscalable": false,
        "hasannotations": false,
        "tags": vm.tags.iter().map(|t| tag_json(t, "UserVm", &vm.id)).collect::<Vec<_>>(),
    });
    if let Some(keypair) = &vm.keypair {
        v["keypairs"] = json!(keypair);
    }
    if let Some(size) = vm.root_disk_size {
        v["details"] = json!({ "rootdisksize": size.to_string() });
    }
    if let Some(id) = &vm.disk_offering_id {
        v["diskofferingid"] = json!(id);
        if let Some(d) = state.catalog.disk_offering(id) {
            v["diskofferingname"] = json!(d.name);
        }
    }
    if let Some(gpu) = offering.and_then(|o| o.gpu.as_ref()) {
        v["gpucardname"] = json!(gpu.card_name);
        v["gpucount"] = json!(gpu.count);
    }
    v
}

/// CloudStack's host name rule for VM names.
fn valid_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.as_bytes()[0].is_ascii_digit()
}

fn check_user_data(data: &str, method_is_get: bool) -> Result<(), ApiError> {
    if method_is_get && data.len() > MAX_GET_USER_DATA {
        return Err(ApiError::param(
            "User data is too long for an http GET request",
        ));
    }
    if data.len() > MAX_POST_USER_DATA {
        return Err(ApiError::param(format!(
            "User data is too long. Max length allowed is {MAX_POST_USER_DATA}"
        )));
    }
    if BASE64.decode(data).is_err() {
        return Err(ApiError::param("User data is not base64 encoded"));
    }
    Ok(())
}

/// `deployVirtualMachine`: validates synchronously (431s), creates the VM `Starting` and an
/// async job that boots it, or fails it with insufficient capacity (533) when its zone is full.
pub fn deploy(state: &mut State, params: &Params, method_is_get: bool) -> Result<Value, ApiError> {
    let cmd = params.command();
    let zone_id = params.required("zoneid")?;
    let offering_id = params.required("serviceofferingid")?;
    let template_id = params.required("templateid")?;
    let zone = state
        .catalog
        .zone(zone_id)
        .cloned()
        .ok_or_else(|| ApiError::invalid_id(cmd, "zoneid", zone_id))?;
    let offering = state
        .catalog
        .service_offering(offering_id)
        .cloned()
        .ok_or_else(|| ApiError::invalid_id(cmd, "serviceofferingid", offering_id))?;
    let template = state
        .catalog
        .template(template_id)
        .cloned()
        .ok_or_else(|| ApiError::invalid_id(cmd, "templateid", template_id))?;
    if !offering.zone_ids.is_empty() && !offering.zone_ids.contains(&zone.id) {
        return Err(ApiError::param(format!(
            "Service offering {} is not available in zone {}",
            offering.name, zone.name
        )));
    }
    if !template.zone_ids.contains(&zone.id) {
        return Err(ApiError::param(format!(
            "Template {} is not available in zone {}",
            template.name, zone.name
        )));
    }
    let mut networks = Vec::new();
    for id in params.list("networkids") {
        let network = state
            .catalog
            .network(&id)
            .cloned()
            .ok_or_else(|| ApiError::invalid_id(cmd, "networkids", &id))?;
        if network.zone_id != zone.id {
            return Err(ApiError::param(format!(
                "Network {} doesn't belong to zone {}",
                network.name, zone.name
            )));
        }
        networks.push(network);
    }
    if networks.is_empty() {
        let default = state
            .catalog
            .networks
            .iter()
            .find(|n| n.zone_id == zone.id)
            .cloned()
            .ok_or_else(|| {
                ApiError::param(format!(
                    "Unable to find a default network to deploy the VM in zone {}",
                    zone.name
                ))
            })?;
        networks.push(default);
    }
    let name = match params.get("name") {
        Some(name) => name.to_string(),
        None => format!("VM-{}", state.new_id()),
    };
    if !valid_host_name(&name) {
        return Err(ApiError::param(
            "Invalid name. Vm name can contain ASCII letters 'a' through 'z', the digits '0' \
             through '9', and the hyphen ('-'), must be between 1 and 63 characters long, and \
             can't start or end with \"-\" and can't start with digit",
        ));
    }
    if state
        .vms
        .iter()
        .any(|vm| vm.zone_id == zone.id && vm.name.eq_ignore_ascii_case(&name))
    {
        return Err(ApiError::param(format!(
            "The vm with hostName {name} already exists in the network domain: {}.cloud.internal; network={}",
            zone.name, networks[0].name
        )));
    }
    let user_data = params.get("userdata").map(str::to_string);
    if let Some(data) = &user_data {
        check_user_data(data, method_is_get)?;
    }
    let root_disk_size = params.number("rootdisksize")?;
    let disk_offering_id = match params.get("diskofferingid") {
        Some(id) if state.catalog.disk_offering(id).is_none() => {
            return Err(ApiError::invalid_id(cmd, "diskofferingid", id));
        }
        other => other.map(str::to_string),
    };
    let keypair = match params.get("keypair") {
        Some(k) if !state.catalog.ssh_key_pairs.iter().any(|p| p.name == k) => {
            return Err(ApiError::param(format!(
                "A key pair with name '{k}' was not found for account {ACCOUNT} in specified domain id"
            )));
        }
        other => other.map(str::to_string),
    };

    let full = zone
        .capacity
        .is_some_and(|c| state.vms_using_capacity(&zone.id) >= c as usize);
    state.vm_counter += 1;
    let instance_name = format!("i-2-{}-VM", state.vm_counter);
    let failure = if full {
        Some(JobFailure::deploy(
            INSUFFICIENT_CAPACITY_ERROR,
            format!("Unable to create a deployment for VM[User|{instance_name}]"),
        ))
    } else {
        state.faults.take_job_failure(cmd)
    };
    let nics = networks
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let host = state.next_host.entry(n.id.clone()).or_insert(10);
            *host += 1;
            let host = *host;
            let (address, mask, gateway) = cidr_parts(&n.cidr)
                .map(|(o, b)| (host_address(o, b, host), netmask(b), host_address(o, b, 1)))
                .unwrap_or_default();
            Nic {
                id: state.new_id(),
                network_id: n.id.clone(),
                network_name: n.name.clone(),
                ip_address: address,
                netmask: mask,
                gateway,
                mac_address: format!(
                    "02:00:{:02x}:{:02x}:{:02x}:{:02x}",
                    (state.vm_counter >> 8) & 0xff,
                    state.vm_counter & 0xff,
                    i,
                    host & 0xff
                ),
                is_default: i == 0,
            }
        })
        .collect();
    let vm_id = state.new_id();
    let job_id = jobs::start(
        state,
        cmd,
        JobWork::Deploy {
            vm_id: vm_id.clone(),
        },
        failure,
    );
    let boot_id = state.new_id();
    state.vms.push(Vm {
        id: vm_id.clone(),
        display_name: params.get("displayname").unwrap_or(&name).to_string(),
        name,
        instance_name,
        zone_id: zone.id,
        service_offering_id: offering.id,
        template_id: template.id,
        nics,
        user_data,
        root_disk_size,
        disk_offering_id,
        keypair,
        state: VmState::Starting,
        tags: Vec::new(),
        created: timestamp(),
        deploy_job_id: job_id.clone(),
        boot_id,
        reboots: 0,
    });
    Ok(json!({ "id": vm_id, "jobid": job_id }))
}

/// `destroyVirtualMachine`: `id`, `expunge`. The job waits for the VM's deploy job, as
/// CloudStack serialises work on a VM.
pub fn destroy(state: &mut State, params: &Params) -> Result<Value, ApiError> {
    let cmd = params.command();
    let id = params.required("id")?;
    if state.removed_vms.contains(id) {
        return Err(ApiError::param(
            "Unable to find a virtual machine with specified vmId",
        ));
    }
    let vm = state
        .vm(id)
        .ok_or_else(|| ApiError::invalid_id(cmd, "id", id))?;
    let expunge = params.flag("expunge");
    if vm.state == VmState::Destroyed && !expunge {
        return Err(ApiError::param(format!(
            "Vm with id {id} is already destroyed"
        )));
    }
    let vm_id = vm.id.clone();
    let failure = state.faults.take_job_failure(cmd);
    let job_id = jobs::start(state, cmd, JobWork::Destroy { vm_id, expunge }, failure);
    Ok(json!({ "jobid": job_id }))
}

/// CloudStack's error for a reboot of a VM that is not `Running` (`UserVmManagerImpl`).
pub fn not_running_text(vm: &Vm) -> String {
    format!(
        "The Instance {} ({}) is not running, unable to reboot it",
        vm.id, vm.display_name
    )
}

/// CloudStack's error for work on a VM that is gone (its UUID still resolves: CloudStack looks
/// up removed rows too, then finds no VM).
pub fn vm_gone_text(id: &str) -> String {
    format!("Unable to find a virtual machine with id {id}")
}

/// `rebootVirtualMachine`: `id` (required). As in CloudStack the request only queues the job
/// (`{"jobid"}`); the job checks the VM: one that is not `Running` (or was expunged) fails it
/// with 431 and CloudStack's text. A successful job leaves the VM `Running` with a new boot ID,
/// answers `{"virtualmachine": ...}`, and reboots its Node (see [`crate::nodes`]).
pub fn reboot(state: &mut State, params: &Params) -> Result<Value, ApiError> {
    let cmd = params.command();
    let id = params.required("id")?;
    let refused = |text: String| JobFailure {
        command: Some(cmd.to_string()),
        errorcode: PARAM_ERROR,
        errortext: text,
    };
    let failure = if state.removed_vms.contains(id) {
        Some(refused(vm_gone_text(id)))
    } else {
        let vm = state
            .vm(id)
            .ok_or_else(|| ApiError::invalid_id(cmd, "id", id))?;
        if vm.state == VmState::Running {
            state.faults.take_job_failure(cmd)
        } else {
            Some(refused(not_running_text(vm)))
        }
    };
    let vm_id = id.to_string();
    let job_id = jobs::start(state, cmd, JobWork::Reboot { vm_id }, failure);
    Ok(json!({ "jobid": job_id }))
}

/// `listVirtualMachines`: `id`, `ids`, `name` (a substring, any case, as CloudStack's `LIKE`),
/// `zoneid`, `state`, `templateid`, `serviceofferingid`, `networkid`, `keyword`, `tags`;
/// `listall` is accepted (one account). Destroyed VMs only with `state=Destroyed`.
pub fn list_vms(state: &State, params: &Params) -> Result<Value, ApiError> {
    let cmd = params.command();
    let mut ids = params.list("ids");
    if let Some(id) = params.get("id") {
        ids.push(id.to_string());
    }
    for id in &ids {
        if state.vm(id).is_none() && !state.removed_vms.contains(id) {
            let name = if params.get("id") == Some(id.as_str()) {
                "id"
            } else {
                "ids"
            };
            return Err(ApiError::invalid_id(cmd, name, id));
        }
    }
    check_zone(state, params)?;
    let wanted = params.map("tags");
    let want_state = params.get("state");
    let contains =
        |haystack: &str, needle: &str| haystack.to_lowercase().contains(&needle.to_lowercase());
    let items = state
        .vms
        .iter()
        .filter(|vm| ids.is_empty() || ids.contains(&vm.id))
        .filter(|vm| params.get("name").is_none_or(|n| contains(&vm.name, n)))
        .filter(|vm| params.get("keyword").is_none_or(|k| contains(&vm.name, k)))
        .filter(|vm| params.get("zoneid").is_none_or(|z| vm.zone_id == z))
        .filter(|vm| params.get("templateid").is_none_or(|t| vm.template_id == t))
        .filter(|vm| {
            params
                .get("serviceofferingid")
                .is_none_or(|o| vm.service_offering_id == o)
        })
        .filter(|vm| {
            params
                .get("networkid")
                .is_none_or(|n| vm.nics.iter().any(|nic| nic.network_id == n))
        })
        .filter(|vm| match want_state {
            Some(s) => vm.state.as_str().eq_ignore_ascii_case(s),
            None => vm.state != VmState::Destroyed,
        })
        .filter(|vm| has_tags(&vm.tags, &wanted))
        .map(|vm| vm_json(state, vm))
        .collect();
    list(params, "virtualmachine", items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_follow_cloudstacks_rule() {
        assert!(valid_host_name("default-abc12"));
        assert!(valid_host_name("A1"));
        assert!(!valid_host_name("1abc"));
        assert!(!valid_host_name("-abc"));
        assert!(!valid_host_name("abc-"));
        assert!(!valid_host_name("a_b"));
        assert!(!valid_host_name(&"a".repeat(64)));
        assert!(!valid_host_name(""));
    }

    #[test]
    fn user_data_limits_depend_on_the_method() {
        let small = BASE64.encode("#cloud-config\n");
        assert!(check_user_data(&small, true).is_ok());
        let big = BASE64.encode(vec![b'x'; 6000]);
        assert!(check_user_data(&big, true).is_err());
        assert!(check_user_data(&big, false).is_ok());
        assert_eq!(
            check_user_data("not base64!", false).unwrap_err().text,
            "User data is not base64 encoded"
        );
    }
}
