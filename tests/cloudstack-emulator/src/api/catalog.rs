//! The read-only catalog commands: `listZones`, `listServiceOfferings`, `listTemplates`,
//! `listNetworks`, `listDiskOfferings`, `listSSHKeyPairs`.

use serde_json::{Value, json};

use super::error::ApiError;
use super::params::{Params, has_tags};
use super::{ACCOUNT, DOMAIN, DOMAIN_ID, list};
use crate::catalog::{DiskOffering, Network, ServiceOffering, Tag, Template, Zone};
use crate::state::State;

/// Creation time shown for catalog items.
const CATALOG_CREATED: &str = "2025-01-01T00:00:00+0000";

/// A `tags` array entry.
pub fn tag_json(tag: &Tag, resource_type: &str, resource_id: &str) -> Value {
    json!({
        "key": tag.key,
        "value": tag.value,
        "resourcetype": resource_type,
        "resourceid": resource_id,
        "account": ACCOUNT,
        "domainid": DOMAIN_ID,
        "domain": DOMAIN,
    })
}

fn tags_json(tags: &[Tag], resource_type: &str, resource_id: &str) -> Value {
    tags.iter()
        .map(|t| tag_json(t, resource_type, resource_id))
        .collect()
}

fn keyword_matches(params: &Params, name: &str) -> bool {
    params
        .get("keyword")
        .is_none_or(|k| name.to_lowercase().contains(&k.to_lowercase()))
}

/// `id` names nothing of this kind: CloudStack's 431.
fn check_id(params: &Params, exists: impl Fn(&str) -> bool) -> Result<(), ApiError> {
    match params.get("id") {
        Some(id) if !exists(id) => Err(ApiError::invalid_id(params.command(), "id", id)),
        _ => Ok(()),
    }
}

/// `zoneid` names no zone: CloudStack's 431.
pub(crate) fn check_zone(state: &State, params: &Params) -> Result<(), ApiError> {
    match params.get("zoneid") {
        Some(zone) if state.catalog.zone(zone).is_none() => {
            Err(ApiError::invalid_id(params.command(), "zoneid", zone))
        }
        _ => Ok(()),
    }
}

fn zone_name<'a>(state: &'a State, id: &str) -> &'a str {
    state
        .catalog
        .zone(id)
        .map(|z| z.name.as_str())
        .unwrap_or("")
}

fn zone_json(zone: &Zone) -> Value {
    json!({
        "id": zone.id,
        "name": zone.name,
        "networktype": "Advanced",
        "securitygroupsenabled": false,
        "allocationstate": "Enabled",
        "zonetoken": format!("token-{}", zone.id),
        "dhcpprovider": "VirtualRouter",
        "localstorageenabled": false,
        "hasannotations": false,
        "tags": tags_json(&zone.tags, "Zone", &zone.id),
    })
}

/// `listZones`: `id`, `name`, `keyword`, `tags`.
pub fn list_zones(state: &State, params: &Params) -> Result<Value, ApiError> {
    check_id(params, |id| state.catalog.zone(id).is_some())?;
    let wanted = params.map("tags");
    let items = state
        .catalog
        .zones
        .iter()
        .filter(|z| params.get("id").is_none_or(|id| z.id == id))
        .filter(|z| params.get("name").is_none_or(|n| z.name == n))
        .filter(|z| keyword_matches(params, &z.name))
        .filter(|z| has_tags(&z.tags, &wanted))
        .map(zone_json)
        .collect();
    list(params, "zone", items)
}

fn offering_json(state: &State, o: &ServiceOffering) -> Value {
    let mut v = json!({
        "id": o.id,
        "name": o.name,
        "displaytext": o.display_text,
        "cpunumber": o.cpu_number,
        "cpuspeed": o.cpu_speed,
        "memory": o.memory,
        "created": CATALOG_CREATED,
        "storagetype": "shared",
        "provisioningtype": "thin",
        "offerha": false,
        "limitcpuuse": false,
        "isvolatile": false,
        "issystem": false,
        "defaultuse": false,
        "iscustomized": false,
        "dynamicscalingenabled": true,
        "hasannotations": false,
    });
    if let Some(tags) = &o.host_tags {
        v["hosttags"] = json!(tags);
    }
    if let Some(tags) = &o.storage_tags {
        v["tags"] = json!(tags);
    }
    if !o.zone_ids.is_empty() {
        v["zoneid"] = json!(o.zone_ids.join(","));
        let names: Vec<&str> = o.zone_ids.iter().map(|z| zone_name(state, z)).collect();
        v["zone"] = json!(names.join(","));
    }
    let mut details = serde_json::Map::new();
    for (key, value) in &o.details {
        details.insert(key.clone(), json!(value));
    }
    if let Some(gpu) = &o.gpu {
        v["gpucardname"] = json!(gpu.card_name);
        v["vgpuprofilename"] = json!(gpu.vgpu_profile);
        v["gpucount"] = json!(gpu.count);
        details.insert("pciDevice".into(), json!(gpu.card_name));
        details.insert("vgpuType".into(), json!(gpu.vgpu_profile));
    }
    if !details.is_empty() {
        v["serviceofferingdetails"] = serde_json::Value::Object(details);
    }
    v
}

/// `listServiceOfferings`: `id`, `name`, `zoneid` (offered there), `keyword`.
pub fn list_service_offerings(state: &State, params: &Params) -> Result<Value, ApiError> {
    check_id(params, |id| state.catalog.service_offering(id).is_some())?;
    check_zone(state, params)?;
    let items = state
        .catalog
        .service_offerings
        .iter()
        .filter(|o| params.get("id").is_none_or(|id| o.id == id))
        .filter(|o| params.get("name").is_none_or(|n| o.name == n))
        .filter(|o| {
            params
                .get("zoneid")
                .is_none_or(|z| o.zone_ids.is_empty() || o.zone_ids.iter().any(|oz| oz == z))
        })
        .filter(|o| keyword_matches(params, &o.name))
        .map(|o| offering_json(state, o))
        .collect();
    list(params, "serviceoffering", items)
}

fn template_json(state: &State, t: &Template, zone_id: &str) -> Value {
    json!({
        "id": t.id,
        "name": t.name,
        "displaytext": t.display_text,
        "ispublic": t.public,
        "created": CATALOG_CREATED,
        "isready": true,
        "passwordenabled": false,
        "format": "QCOW2",
        "isfeatured": t.featured,
        "crossZones": false,
        "ostypeid": t.os_type_id,
        "ostypename": t.os_type_name,
        "account": ACCOUNT,
        "zoneid": zone_id,
        "zonename": zone_name(state, zone_id),
        "status": "Download Complete",
        "size": t.size,
        "templatetype": "USER",
        "hypervisor": "KVM",
        "domain": DOMAIN,
        "domainid": DOMAIN_ID,
        "isextractable": false,
        "sshkeyenabled": false,
        "isdynamicallyscalable": false,
        "directdownload": false,
        "deployasis": false,
        "requireshvm": true,
        "arch": t.arch,
        "hasannotations": false,
        "tags": tags_json(&t.tags, "Template", &t.id),
    })
}

/// `listTemplates`: `templatefilter` (required: `featured`, `self`, `selfexecutable`,
/// `sharedexecutable`, `executable`, `community`, `all`), `id`, `name`, `zoneid`, `keyword`,
/// `arch`, `tags`. One entry per zone the template is in.
pub fn list_templates(state: &State, params: &Params) -> Result<Value, ApiError> {
    let filter = params.required("templatefilter")?;
    let visible: fn(&Template) -> bool = match filter {
        "featured" => |t| t.featured,
        "self" | "selfexecutable" => |t| !t.public,
        "sharedexecutable" => |_| false,
        "community" => |t| t.public && !t.featured,
        "executable" | "all" => |_| true,
        other => {
            return Err(ApiError::param(format!(
                "Unable to execute API command listtemplates due to invalid value. Invalid \
                 parameter templatefilter value={other}: it must be one of featured, self, \
                 selfexecutable, sharedexecutable, executable, community, all"
            )));
        }
    };
    check_id(params, |id| state.catalog.template(id).is_some())?;
    check_zone(state, params)?;
    let wanted = params.map("tags");
    let mut items = Vec::new();
    for t in state.catalog.templates.iter().filter(|t| visible(t)) {
        let matches = params.get("id").is_none_or(|id| t.id == id)
            && params.get("name").is_none_or(|n| t.name == n)
            && params.get("arch").is_none_or(|a| t.arch == a)
            && keyword_matches(params, &t.name)
            && has_tags(&t.tags, &wanted);
        if !matches {
            continue;
        }
        for zone in &t.zone_ids {
            if params.get("zoneid").is_none_or(|z| z == zone) {
                items.push(template_json(state, t, zone));
            }
        }
    }
    list(params, "template", items)
}

/// The gateway (first host) and netmask of an IPv4 CIDR.
pub fn cidr_parts(cidr: &str) -> Option<([u8; 4], u8)> {
    let (addr, bits) = cidr.split_once('/')?;
    let octets: Vec<u8> = addr
        .split('.')
        .map(|o| o.parse().ok())
        .collect::<Option<_>>()?;
    let octets: [u8; 4] = octets.try_into().ok()?;
    let bits: u8 = bits.parse().ok().filter(|b| *b <= 30)?;
    Some((octets, bits))
}

/// Dotted netmask of a prefix length.
pub fn netmask(bits: u8) -> String {
    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
    let o = mask.to_be_bytes();
    format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3])
}

/// The address `host` inside a CIDR's network.
pub fn host_address(octets: [u8; 4], bits: u8, host: u32) -> String {
    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
    let o = ((u32::from_be_bytes(octets) & mask) | host).to_be_bytes();
    format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3])
}

fn network_json(state: &State, n: &Network) -> Value {
    let (gateway, mask) = cidr_parts(&n.cidr)
        .map(|(o, b)| (host_address(o, b, 1), netmask(b)))
        .unwrap_or_default();
    json!({
        "id": n.id,
        "name": n.name,
        "displaytext": n.name,
        "broadcastdomaintype": "Vlan",
        "traffictype": "Guest",
        "gateway": gateway,
        "netmask": mask,
        "cidr": n.cidr,
        "zoneid": n.zone_id,
        "zonename": zone_name(state, &n.zone_id),
        "networkofferingid": "0f000000-0000-4000-8000-000000000001",
        "networkofferingname": "DefaultIsolatedNetworkOfferingWithSourceNatService",
        "networkofferingdisplaytext": "Offering for Isolated networks with Source Nat service enabled",
        "networkofferingavailability": "Required",
        "issystem": false,
        "state": "Implemented",
        "related": n.id,
        "dns1": gateway,
        "type": n.kind,
        "acltype": "Account",
        "account": ACCOUNT,
        "domainid": DOMAIN_ID,
        "domain": DOMAIN,
        "isdefault": false,
        "canusefordeploy": true,
        "ispersistent": false,
        "restartrequired": false,
        "specifyipranges": false,
        "hasannotations": false,
        "tags": tags_json(&n.tags, "Network", &n.id),
    })
}

/// `listNetworks`: `id`, `zoneid`, `type`, `keyword`, `tags`.
pub fn list_networks(state: &State, params: &Params) -> Result<Value, ApiError> {
    check_id(params, |id| state.catalog.network(id).is_some())?;
    check_zone(state, params)?;
    let wanted = params.map("tags");
    let items = state
        .catalog
        .networks
        .iter()
        .filter(|n| params.get("id").is_none_or(|id| n.id == id))
        .filter(|n| params.get("zoneid").is_none_or(|z| n.zone_id == z))
        .filter(|n| {
            params
                .get("type")
                .is_none_or(|t| n.kind.eq_ignore_ascii_case(t))
        })
        .filter(|n| keyword_matches(params, &n.name))
        .filter(|n| has_tags(&n.tags, &wanted))
        .map(|n| network_json(state, n))
        .collect();
    list(params, "network", items)
}

fn disk_offering_json(d: &DiskOffering) -> Value {
    let mut v = json!({
        "id": d.id,
        "name": d.name,
        "displaytext": d.name,
        "disksize": d.disk_size,
        "created": CATALOG_CREATED,
        "iscustomized": d.customized,
        "storagetype": "shared",
        "provisioningtype": "thin",
        "displayoffering": true,
        "hasannotations": false,
    });
    if let Some(tags) = &d.storage_tags {
        v["tags"] = json!(tags);
    }
    v
}

/// `listDiskOfferings`: `id`, `name`, `keyword`.
pub fn list_disk_offerings(state: &State, params: &Params) -> Result<Value, ApiError> {
    check_id(params, |id| state.catalog.disk_offering(id).is_some())?;
    let items = state
        .catalog
        .disk_offerings
        .iter()
        .filter(|d| params.get("id").is_none_or(|id| d.id == id))
        .filter(|d| params.get("name").is_none_or(|n| d.name == n))
        .filter(|d| keyword_matches(params, &d.name))
        .map(disk_offering_json)
        .collect();
    list(params, "diskoffering", items)
}

/// `listSSHKeyPairs`: `name`, `fingerprint`, `keyword`.
pub fn list_ssh_key_pairs(state: &State, params: &Params) -> Result<Value, ApiError> {
    let items = state
        .catalog
        .ssh_key_pairs
        .iter()
        .filter(|k| params.get("name").is_none_or(|n| k.name == n))
        .filter(|k| params.get("fingerprint").is_none_or(|f| k.fingerprint == f))
        .filter(|k| keyword_matches(params, &k.name))
        .map(|k| {
            json!({
                "name": k.name,
                "fingerprint": k.fingerprint,
                "account": ACCOUNT,
                "domainid": DOMAIN_ID,
                "domain": DOMAIN,
                "hasannotations": false,
            })
        })
        .collect();
    list(params, "sshkeypair", items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_arithmetic() {
        let (o, b) = cidr_parts("10.1.2.0/24").unwrap();
        assert_eq!(host_address(o, b, 1), "10.1.2.1");
        assert_eq!(host_address(o, b, 77), "10.1.2.77");
        assert_eq!(netmask(b), "255.255.255.0");
        assert_eq!(netmask(16), "255.255.0.0");
        assert!(cidr_parts("10.1.2.0").is_none());
        assert!(cidr_parts("10.1.2/24").is_none());
    }
}
