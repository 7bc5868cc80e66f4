//! The `cloud-provider` export: glue between the WIT calls, the pure modules and the `kube`
//! import.
//!
//! MachineDeployments and Machines are read in the NodeClass's cluster and namespace. Calls that
//! get no NodeClass (`get`, `list`, `delete`) find Machines by label across namespaces, in the
//! management cluster, or in the workload cluster when the host has no management cluster; with
//! `v1beta2`, or `v1beta1` where that is all the API server serves.

use std::collections::{BTreeMap, BTreeSet};

use capstan_provider_sdk::kube::{self, Cluster, KubeError, ListOptions, Target};
use capstan_provider_sdk::{
    Catalog, Guest, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy, Requirements,
    ResourceList, clock,
};
use serde_json::json;

use crate::catalog::{self, NoGroup};
use crate::ledger::{self, AtMaxSize, Capacity, Ledger};
use crate::machine::{
    CLAIM_LABEL, DELETE_MACHINE, DEPLOYMENT_LABEL, HASH_ANNOTATION, MIN_SIZE_MEMBER, Machine,
    parse_pending,
};
use crate::node_group::{
    self, GroupError, InfraTemplateStatus, Kind, MAX_PROVISION_TIME, MEMBER_LABEL,
    MachineDeployment, NodeGroup,
};
use crate::params::{GROUP, Parameters};
use crate::rollout::{self, MachineSet, PAUSED, PAUSED_AT};

/// The Cluster API provider.
pub struct ClusterApi;

/// Where Cluster API objects are: a cluster, an API version, and a namespace (none: all).
#[derive(Debug, Clone)]
struct Place {
    cluster: Cluster,
    version: String,
    namespace: Option<String>,
}

impl Place {
    fn of(params: &Parameters) -> Self {
        Self {
            cluster: params.cluster.cluster(),
            version: params.api_version.clone(),
            namespace: (!params.all_namespaces).then(|| params.namespace.clone()),
        }
    }

    fn target(&self, kind: &str) -> Target {
        let target = Target::new(self.cluster, &format!("{GROUP}/{}", self.version), kind);
        match &self.namespace {
            Some(ns) => target.namespaced(ns),
            None => target,
        }
    }

    fn in_namespace(&self, namespace: &str) -> Place {
        Place {
            namespace: Some(namespace.to_string()),
            ..self.clone()
        }
    }
}

fn err(launch: bool) -> impl Fn(kube::Error) -> ProviderError {
    move |e| e.into_provider_error(launch)
}

fn invalid(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Invalid(e.to_string())
}

/// Lists Machines with `selector` wherever this provider's Machines may be (see the module docs).
fn find_machines(selector: &str) -> Result<(Place, Vec<Machine>), ProviderError> {
    let mut last = None;
    for cluster in [Cluster::Management, Cluster::Workload] {
        for version in ["v1beta2", "v1beta1"] {
            let place = Place {
                cluster,
                version: version.to_string(),
                namespace: None,
            };
            match kube::list::<Machine>(&place.target("Machine"), &ListOptions::labels(selector)) {
                Ok(machines) => return Ok((place, machines)),
                // No such cluster, or no such version here: try the next.
                Err(e @ kube::Error::Kube(KubeError::Unavailable(_) | KubeError::NotFound(_))) => {
                    last = Some(e);
                }
                Err(e) => return Err(e.into_provider_error(false)),
            }
        }
    }
    Err(last.map_or_else(
        || ProviderError::Retryable("no cluster holds Machines".into()),
        |e| e.into_provider_error(false),
    ))
}

/// The Machine launched for claim `name`, or with provider ID `id`.
fn claimed_machine(
    claim: Option<&str>,
    id: Option<&str>,
) -> Result<Option<(Place, Machine)>, ProviderError> {
    if let Some(claim) = claim {
        let (place, machines) = find_machines(&format!("{CLAIM_LABEL}={claim}"))?;
        if let Some(machine) = machines.into_iter().next() {
            return Ok(Some((place, machine)));
        }
    }
    if let Some(id) = id {
        let (place, machines) = find_machines(CLAIM_LABEL)?;
        let found = match parse_pending(id) {
            Some((ns, name)) => machines
                .into_iter()
                .find(|m| m.metadata.namespace == ns && m.metadata.name == name),
            None => machines.into_iter().find(|m| m.has_provider_id(id)),
        };
        return Ok(found.map(|m| (place, m)));
    }
    Ok(None)
}

/// The label on an infrastructure provider's CRD that names its API versions implementing Cluster
/// API's contract `version` (`v1beta1_v1beta2`: the last is the newest).
fn contract_label(version: &str) -> String {
    format!("{GROUP}/{version}")
}

/// The API version of infrastructure `kind` in `group` that implements the contract of `place`'s
/// Cluster API version, as Cluster API finds it: the contract label of the kind's CRD
/// (`<kind>s.<group>`, lower case), else the CRD's storage version.
fn contract_version(place: &Place, group: &str, kind: &str) -> Result<String, String> {
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Crd {
        metadata: node_group::Meta,
        spec: CrdSpec,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct CrdSpec {
        versions: Vec<CrdVersion>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct CrdVersion {
        name: String,
        storage: bool,
    }
    let name = format!("{}s.{group}", kind.to_lowercase());
    let crd: Crd = kube::get(
        &Target::new(
            place.cluster,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
        )
        .object(&name),
    )
    .map_err(|e| format!("reading CustomResourceDefinition {name}: {e}"))?;
    crd.metadata
        .labels
        .get(&contract_label(&place.version))
        .and_then(|versions| versions.split('_').next_back())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .or_else(|| {
            crd.spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone())
        })
        .ok_or_else(|| format!("CustomResourceDefinition {name} names no version"))
}

/// The status of a MachineDeployment's infrastructure machine template (what scaling from zero
/// reads when the capacity annotations are absent). `versions` remembers what
/// [`contract_version`] found for each group and kind.
fn template_status(
    place: &Place,
    md: &MachineDeployment,
    versions: &mut BTreeMap<(String, String), Result<String, String>>,
) -> Result<InfraTemplateStatus, String> {
    let reference = &md.spec.template.spec.infrastructure_ref;
    let field = |name: &str| {
        reference[name]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("spec.template.spec.infrastructureRef has no {name}"))
    };
    let (kind, name) = (field("kind")?, field("name")?);
    // v1beta1 references carry an apiVersion; v1beta2 ones only the group.
    let api_version = match reference["apiVersion"].as_str() {
        Some(version) => version.to_string(),
        None => {
            let group = field("apiGroup")?;
            let version = versions
                .entry((group.to_string(), kind.to_string()))
                .or_insert_with(|| contract_version(place, group, kind))
                .clone()?;
            format!("{group}/{version}")
        }
    };
    #[derive(serde::Deserialize, Default)]
    #[serde(default)]
    struct Template {
        status: InfraTemplateStatus,
    }
    let template: Template = kube::get(
        &Target::new(place.cluster, &api_version, kind)
            .namespaced(&md.metadata.namespace)
            .object(name),
    )
    .map_err(|e| format!("reading {kind} {name}: {e}"))?;
    Ok(template.status)
}

/// A MachineDeployment as a node group, reading its infrastructure template's status when its
/// annotations do not give the capacity.
fn parse_group(
    place: &Place,
    kind: Kind,
    md: &MachineDeployment,
    versions: &mut BTreeMap<(String, String), Result<String, String>>,
) -> Result<NodeGroup, GroupError> {
    if !md.needs_template_capacity() {
        return node_group::parse_kind(kind, md, None);
    }
    match template_status(place, md, versions) {
        Ok(status) => node_group::parse_kind(kind, md, Some(&status)),
        Err(problem) => {
            capstan_provider_sdk::warn!(
                "{} {}/{}: no capacity annotations, and its infrastructure template could not be read: {problem}",
                kind.as_str(),
                md.metadata.namespace,
                md.metadata.name
            );
            node_group::parse_kind(kind, md, None)
        }
    }
}

/// The member MachineDeployments of `place` (with the extra selector), and the member MachineSets
/// no MachineDeployment owns, parsed; the malformed ones come back as errors.
fn load_groups(
    place: &Place,
    params: &Parameters,
    launch: bool,
) -> Result<(Vec<NodeGroup>, Vec<GroupError>), ProviderError> {
    let mut selector = MEMBER_LABEL.to_string();
    for (key, value) in &params.selector {
        selector.push_str(&format!(",{key}={value}"));
    }
    for expression in &params.expressions {
        selector.push(',');
        selector.push_str(expression);
    }
    let deployments: Vec<MachineDeployment> = kube::list(
        &place.target("MachineDeployment"),
        &ListOptions::labels(&selector),
    )
    .map_err(err(launch))?;
    lift_stale_pauses(place, &deployments);
    let mut groups = Vec::new();
    let mut errors = Vec::new();
    let mut versions = BTreeMap::new();
    for md in deployments
        .iter()
        .filter(|md| md.metadata.deletion_timestamp.is_none())
    {
        match parse_group(place, Kind::MachineDeployment, md, &mut versions) {
            Ok(group) => groups.push(group),
            Err(e) => errors.push(e),
        }
    }
    // MachineSets of a MachineDeployment carry its name label; the others are node groups too.
    let sets: Vec<MachineDeployment> =
        kube::list(&place.target("MachineSet"), &ListOptions::labels(&selector))
            .map_err(err(launch))?;
    for set in sets.iter().filter(|s| {
        s.metadata.deletion_timestamp.is_none() && !s.metadata.labels.contains_key(DEPLOYMENT_LABEL)
    }) {
        let taken = deployments.iter().any(|md| {
            md.metadata.name == set.metadata.name && md.metadata.namespace == set.metadata.namespace
        });
        if taken {
            capstan_provider_sdk::warn!(
                "skipping MachineSet {}/{}: a MachineDeployment has its name (instance types are named after them)",
                set.metadata.namespace,
                set.metadata.name
            );
            continue;
        }
        match parse_group(place, Kind::MachineSet, set, &mut versions) {
            Ok(group) => groups.push(group),
            Err(e) => errors.push(e),
        }
    }
    Ok((groups, errors))
}

/// The node group of a Machine (its MachineDeployment or MachineSet), if it still parses.
fn group_of(place: &Place, machine: &Machine) -> Option<NodeGroup> {
    let (kind, name) = machine.owner()?;
    let md: MachineDeployment = kube::get(
        &place
            .in_namespace(&machine.metadata.namespace)
            .target(kind.as_str())
            .object(name),
    )
    .ok()?;
    parse_group(place, kind, &md, &mut BTreeMap::new()).ok()
}

/// Lowers a MachineDeployment's (or MachineSet's: `kind`) replicas by one through its `scale`
/// subresource, retrying conflicts.
fn scale_down_one(place: &Place, kind: &str, deployment: &str) -> Result<(), ProviderError> {
    let object = place.target(kind).object(deployment).subresource("scale");
    let mut last = String::new();
    for _ in 0..8 {
        let current: serde_json::Value = kube::get(&object).map_err(err(false))?;
        let replicas = current["spec"]["replicas"].as_i64().unwrap_or(0);
        if replicas == 0 {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "spec": {"replicas": replicas - 1},
        });
        match kube::patch_merge::<_, serde_json::Value>(&object, &patch) {
            Ok(_) => return Ok(()),
            Err(e @ kube::Error::Kube(KubeError::Conflict(_))) => last = e.to_string(),
            Err(e) => return Err(e.into_provider_error(false)),
        }
    }
    Err(ProviderError::Retryable(format!(
        "scaling {kind} {deployment} down: still conflicting ({last})"
    )))
}

/// Sets or lifts this provider's pause of a MachineDeployment (see [`rollout`]).
fn set_paused(place: &Place, deployment: &str, paused: bool) -> Result<(), ProviderError> {
    let annotations = if paused {
        json!({PAUSED: "", PAUSED_AT: clock::now_millis().to_string()})
    } else {
        json!({PAUSED: null, PAUSED_AT: null})
    };
    match kube::patch_merge::<_, serde_json::Value>(
        &place.target("MachineDeployment").object(deployment),
        &json!({"metadata": {"annotations": annotations}}),
    ) {
        Ok(_) => Ok(()),
        Err(e) if !paused && e.is_not_found() => Ok(()),
        Err(e) => Err(e.into_provider_error(false)),
    }
}

/// Lowers the replicas for one marked Machine of `deployment`: of the MachineDeployment alone, or,
/// mid-rollout, of the Machine's MachineSet and the MachineDeployment while it is paused (see
/// [`rollout`]).
fn scale_down_for(place: &Place, deployment: &str, machine: &Machine) -> Result<(), ProviderError> {
    let sets: Vec<MachineSet> = kube::list(
        &place.target("MachineSet"),
        &ListOptions::labels(&format!("{DEPLOYMENT_LABEL}={deployment}")),
    )
    .map_err(err(false))?;
    let Some(set) = rollout::set_to_shrink(&sets, machine) else {
        return scale_down_one(place, "MachineDeployment", deployment);
    };
    let md: MachineDeployment =
        kube::get(&place.target("MachineDeployment").object(deployment)).map_err(err(false))?;
    // Someone else's pause stays; ours is lifted when done.
    let ours = !md.metadata.annotations.contains_key(PAUSED);
    if ours {
        set_paused(place, deployment, true)?;
    }
    let result = scale_down_one(place, "MachineSet", &set.metadata.name)
        .and_then(|()| scale_down_one(place, "MachineDeployment", deployment));
    let unpaused = if ours {
        set_paused(place, deployment, false)
    } else {
        Ok(())
    };
    capstan_provider_sdk::info!(
        "MachineDeployment {deployment} is mid-rollout: scaled MachineSet {} down for Machine {}",
        set.metadata.name,
        machine.metadata.name
    );
    result.and(unpaused)
}

/// Lifts the pauses this provider left on MachineDeployments (a host that died mid-removal).
fn lift_stale_pauses(place: &Place, deployments: &[MachineDeployment]) {
    let now = clock::now_millis();
    for md in deployments
        .iter()
        .filter(|md| rollout::stale_pause(&md.metadata.annotations, now))
    {
        let place = place.in_namespace(&md.metadata.namespace);
        if let Err(e) = set_paused(&place, &md.metadata.name, false) {
            capstan_provider_sdk::warn!(
                "could not lift the stale pause of MachineDeployment {}: {e:?}",
                md.metadata.name
            );
        }
    }
}

/// Claims an unclaimed Machine of `group` for `claim` (optimistic: a Machine someone else claimed
/// first is skipped), while fewer Machines are claimed than the replicas (a rolling update's surge
/// Machines, beyond the replicas, are Cluster API's to remove).
fn adopt(
    place: &Place,
    group: &NodeGroup,
    claim: &str,
    max_age: u64,
) -> Result<Option<Machine>, ProviderError> {
    let (_, capacity, machines) = capacity(place, group.of(), max_age)?;
    if capacity.available() == 0 {
        return Ok(None);
    }
    let mut candidates: Vec<Machine> = machines
        .iter()
        .filter(|m| !m.is_leaving() && m.claim().is_none())
        .cloned()
        .collect();
    candidates.sort_by(|a, b| {
        a.metadata
            .creation_timestamp
            .cmp(&b.metadata.creation_timestamp)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    // The first `min_size` claimed Machines are held from disruption (see [`MIN_SIZE_MEMBER`]).
    let holders = machines
        .iter()
        .filter(|m| !m.is_leaving() && m.claim().is_some() && m.holds_min_size())
        .count();
    let member = i64::try_from(holders).unwrap_or(i64::MAX) < group.min_size;
    for machine in candidates {
        let mut annotations = json!({HASH_ANNOTATION: group.template_hash});
        if member {
            annotations[MIN_SIZE_MEMBER] = json!(group.min_size.to_string());
        }
        let patch = json!({"metadata": {
            "resourceVersion": machine.metadata.resource_version,
            "labels": {CLAIM_LABEL: claim},
            "annotations": annotations,
        }});
        match kube::patch_merge::<_, Machine>(
            &place.target("Machine").object(&machine.metadata.name),
            &patch,
        ) {
            Ok(adopted) if member => return settle_min_size(place, group, adopted).map(Some),
            Ok(adopted) => return Ok(Some(adopted)),
            Err(kube::Error::Kube(KubeError::Conflict(_) | KubeError::NotFound(_))) => continue,
            Err(e) => return Err(e.into_provider_error(true)),
        }
    }
    Ok(None)
}

/// Launches adopting at once may all have seen too few Machines holding `group`'s minimum size:
/// of the holders, the first `min_size` by name keep the mark, and `adopted` gives it up if it is
/// not among them (every launch agrees on the order, so exactly `min_size` stay).
fn settle_min_size(
    place: &Place,
    group: &NodeGroup,
    adopted: Machine,
) -> Result<Machine, ProviderError> {
    let machines: Vec<Machine> = kube::list(
        &place.target("Machine"),
        &ListOptions::labels(&format!("{}={}", group.kind.machine_label(), group.name)),
    )
    .map_err(err(true))?;
    let mut holders: Vec<&str> = machines
        .iter()
        .filter(|m| !m.is_leaving() && m.claim().is_some() && m.holds_min_size())
        .map(|m| m.metadata.name.as_str())
        .collect();
    holders.sort_unstable();
    let keep = usize::try_from(group.min_size).unwrap_or(usize::MAX);
    if holders
        .iter()
        .take(keep)
        .any(|h| *h == adopted.metadata.name)
    {
        return Ok(adopted);
    }
    kube::patch_merge::<_, Machine>(
        &place.target("Machine").object(&adopted.metadata.name),
        &json!({"metadata": {"annotations": {MIN_SIZE_MEMBER: null}}}),
    )
    .map_err(err(true))
}

/// Marks a Machine for removal and scales its MachineDeployment down by one; undoes the mark if
/// the scale-down fails. Idempotent: a Machine already leaving is left alone.
fn remove(place: &Place, machine: &Machine) -> Result<(), ProviderError> {
    if machine.is_leaving() {
        return Ok(());
    }
    let place = place.in_namespace(&machine.metadata.namespace);
    let object = place.target("Machine").object(&machine.metadata.name);
    kube::patch_merge::<_, serde_json::Value>(
        &object,
        &json!({"metadata": {"annotations": {DELETE_MACHINE: "true"}}}),
    )
    .map_err(err(false))?;
    let scaled = match machine.owner() {
        Some((Kind::MachineDeployment, deployment)) => scale_down_for(&place, deployment, machine),
        Some((Kind::MachineSet, set)) => scale_down_one(&place, "MachineSet", set),
        // Neither: delete it directly.
        None => {
            return match kube::delete(&object) {
                Ok(()) => Ok(()),
                Err(e) if e.is_not_found() => Ok(()),
                Err(e) => Err(e.into_provider_error(false)),
            };
        }
    };
    if let Err(e) = scaled {
        let undo = kube::patch_merge::<_, serde_json::Value>(
            &object,
            &json!({"metadata": {"annotations": {DELETE_MACHINE: null}}}),
        );
        if let Err(undo) = undo {
            capstan_provider_sdk::warn!(
                "could not unmark Machine {} after a failed scale-down: {undo}",
                machine.metadata.name
            );
        }
        return Err(match e {
            ProviderError::NotFound(m) => ProviderError::Retryable(m),
            other => other,
        });
    }
    Ok(())
}

/// Waits until `machine` has a provider ID; past the deadline, removes it and fails.
fn wait_launched(
    place: &Place,
    params: &Parameters,
    mut machine: Machine,
    group: Option<&NodeGroup>,
    deadline: u64,
) -> Result<NodeClaim, ProviderError> {
    let object = place.target("Machine").object(&machine.metadata.name);
    loop {
        if machine
            .spec
            .provider_id
            .as_deref()
            .is_some_and(|id| !id.is_empty())
        {
            return Ok(machine.to_claim(group));
        }
        if machine.metadata.deletion_timestamp.is_some() {
            return Err(ProviderError::create_failed(
                "MachineDeleted",
                format!(
                    "Machine {} was deleted before it launched",
                    machine.metadata.name
                ),
            ));
        }
        if clock::now_millis() >= deadline {
            remove(place, &machine)?;
            return Err(ProviderError::create_failed(
                "LaunchTimeout",
                format!(
                    "Machine {} got no providerID within the launch timeout (launchTimeoutSeconds {} s, or its MachineDeployment's shorter {MAX_PROVISION_TIME}); it was removed and its MachineDeployment scaled back",
                    machine.metadata.name, params.launch_timeout_seconds
                ),
            ));
        }
        clock::sleep_millis(params.poll_millis);
        machine = match kube::get(&object) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => {
                return Err(ProviderError::create_failed(
                    "MachineDeleted",
                    format!(
                        "Machine {} disappeared before it launched",
                        machine.metadata.name
                    ),
                ));
            }
            Err(e) => return Err(e.into_provider_error(true)),
        };
    }
}

/// How often an edit of a launch ledger is tried against conflicting edits.
const LEDGER_ATTEMPTS: u32 = 30;

/// Edits a node group's launch ledger (compare-and-swap on its resourceVersion), pruning entries
/// older than `max_age` ms.
fn update_ledger(
    place: &Place,
    (kind, deployment): (Kind, &str),
    max_age: u64,
    edit: impl Fn(&mut Ledger),
) -> Result<(), ProviderError> {
    let object = place.target(kind.as_str()).object(deployment);
    // Many launches joining at once conflict: retry longer, after a short pause that differs
    // between them (so they do not collide again in step).
    for attempt in 0..LEDGER_ATTEMPTS {
        if attempt > 0 {
            clock::sleep_millis(5 + clock::now_millis() % 25);
        }
        let md: MachineDeployment = kube::get(&object).map_err(err(true))?;
        let before = Ledger::parse(
            md.metadata
                .annotations
                .get(ledger::ANNOTATION)
                .map(String::as_str),
        );
        let mut after = before.clone();
        after.prune(clock::now_millis(), max_age);
        edit(&mut after);
        if after == before {
            return Ok(());
        }
        let patch = json!({"metadata": {
            "resourceVersion": md.metadata.resource_version,
            "annotations": {ledger::ANNOTATION: after.to_text()},
        }});
        match kube::patch_merge::<_, serde_json::Value>(&object, &patch) {
            Ok(_) => return Ok(()),
            Err(kube::Error::Kube(KubeError::Conflict(_))) => {}
            Err(e) => return Err(e.into_provider_error(true)),
        }
    }
    Err(ProviderError::Retryable(format!(
        "{} {deployment}: its launch requests keep changing",
        kind.as_str()
    )))
}

/// Takes `claim` off the ledger; a failure only logs (the entry ages out, and a claimed Machine
/// no longer counts as waiting anyway).
fn leave_ledger(place: &Place, of: (Kind, &str), max_age: u64, claim: &str) {
    if let Err(e) = update_ledger(place, of, max_age, |l| l.remove(claim)) {
        capstan_provider_sdk::warn!(
            "claim {claim}: could not leave the launch ledger of {}: {e:?}",
            of.1
        );
    }
}

/// A node group's capacity for its waiting launches, its resourceVersion and Machines.
fn capacity(
    place: &Place,
    (kind, deployment): (Kind, &str),
    max_age: u64,
) -> Result<(Option<String>, Capacity, Vec<Machine>), ProviderError> {
    let md: MachineDeployment =
        kube::get(&place.target(kind.as_str()).object(deployment)).map_err(err(true))?;
    let machines: Vec<Machine> = kube::list(
        &place.target("Machine"),
        &ListOptions::labels(&format!("{}={deployment}", kind.machine_label())),
    )
    .map_err(err(true))?;
    let live: Vec<&Machine> = machines.iter().filter(|m| !m.is_leaving()).collect();
    let claimed: BTreeSet<String> = live
        .iter()
        .filter_map(|m| m.claim())
        .map(str::to_string)
        .collect();
    let mut ledger = Ledger::parse(
        md.metadata
            .annotations
            .get(ledger::ANNOTATION)
            .map(String::as_str),
    );
    ledger.prune(clock::now_millis(), max_age);
    let capacity = Capacity {
        replicas: md.spec.replicas.unwrap_or(0),
        live: live.len(),
        unclaimed: live.iter().filter(|m| m.claim().is_none()).count(),
        waiting: ledger.waiting(&claimed),
    };
    Ok((md.metadata.resource_version, capacity, machines))
}

/// Raises the replicas (through the `scale` subresource, compare-and-swap) so that every waiting
/// launch gets a Machine: one request for all of them.
fn ensure_capacity(place: &Place, group: &NodeGroup, max_age: u64) -> Result<(), ProviderError> {
    for _ in 0..8 {
        let (version, capacity, _) = capacity(place, group.of(), max_age)?;
        let target = match capacity.wanted(group.max_size) {
            Ok(None) => return Ok(()),
            Ok(Some(target)) => target,
            Err(AtMaxSize { max }) => {
                return Err(ProviderError::InsufficientCapacity(format!(
                    "{} {} is at its maximum size ({max})",
                    group.kind.as_str(),
                    group.name
                )));
            }
        };
        let patch = json!({"metadata": {"resourceVersion": version}, "spec": {"replicas": target}});
        let scale = place
            .target(group.kind.as_str())
            .object(&group.name)
            .subresource("scale");
        match kube::patch_merge::<_, serde_json::Value>(&scale, &patch) {
            Ok(_) => {
                capstan_provider_sdk::info!(
                    "scaled {} {} from {} to {} for {} waiting launches",
                    group.kind.as_str(),
                    group.name,
                    capacity.replicas,
                    target,
                    capacity.waiting
                );
                return Ok(());
            }
            Err(kube::Error::Kube(KubeError::Conflict(_))) => {}
            Err(e) => return Err(e.into_provider_error(true)),
        }
    }
    // Others keep changing it: the next round looks again.
    Ok(())
}

/// Gives back capacity no launch waits for any more: marks unclaimed Machines for removal (so
/// the scale-down takes them, never a claimed one) and lowers the replicas.
fn release_excess(
    place: &Place,
    (kind, deployment): (Kind, &str),
    max_age: u64,
) -> Result<(), ProviderError> {
    for _ in 0..8 {
        let (version, capacity, machines) = capacity(place, (kind, deployment), max_age)?;
        let excess = capacity.excess();
        if excess == 0 {
            return Ok(());
        }
        for machine in machines
            .iter()
            .filter(|m| !m.is_leaving() && m.claim().is_none())
            .take(excess)
        {
            let object = place.target("Machine").object(&machine.metadata.name);
            match kube::patch_merge::<_, serde_json::Value>(
                &object,
                &json!({"metadata": {"annotations": {DELETE_MACHINE: "true"}}}),
            ) {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into_provider_error(false)),
            }
        }
        let target = (capacity.replicas - i64::try_from(excess).unwrap_or(i64::MAX)).max(0);
        let patch = json!({"metadata": {"resourceVersion": version}, "spec": {"replicas": target}});
        let scale = place
            .target(kind.as_str())
            .object(deployment)
            .subresource("scale");
        match kube::patch_merge::<_, serde_json::Value>(&scale, &patch) {
            Ok(_) => return Ok(()),
            Err(kube::Error::Kube(KubeError::Conflict(_))) => {}
            Err(e) => return Err(e.into_provider_error(false)),
        }
    }
    Err(ProviderError::Retryable(format!(
        "{} {deployment}: could not give back unused capacity",
        kind.as_str()
    )))
}

impl Guest for ClusterApi {
    fn name() -> String {
        "clusterapi".to_string()
    }

    fn get_instance_types(pool: NodePool, class: NodeClass) -> Result<Catalog, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        let (groups, errors) = load_groups(&Place::of(&params), &params, false)?;
        for e in &errors {
            capstan_provider_sdk::warn!("skipping {e}");
        }
        let offered: Vec<NodeGroup> = groups
            .into_iter()
            .filter(|g| catalog::pool_tolerates(&pool, g))
            .collect();
        Ok(catalog::to_catalog(&offered))
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<NodeClaim, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        let place = Place::of(&params);
        let deadline = clock::now_millis() + params.launch_timeout_seconds * 1000;
        // A retried create: the Machine is already ours.
        let claimed: Vec<Machine> = kube::list(
            &place.target("Machine"),
            &ListOptions::labels(&format!("{CLAIM_LABEL}={}", claim.name)),
        )
        .map_err(err(true))?;
        if let Some(machine) = claimed.into_iter().find(|m| !m.is_leaving()) {
            let place = place.in_namespace(&machine.metadata.namespace);
            let group = group_of(&place, &machine);
            return wait_launched(&place, &params, machine, group.as_ref(), deadline);
        }
        let (groups, _) = load_groups(&place, &params, true)?;
        let requirements = Requirements::from_slice(&claim.requirements).map_err(invalid)?;
        let requests = ResourceList::from_resources(&claim.requests).map_err(invalid)?;
        let group = catalog::cheapest(&groups, &requirements, &requests).map_err(|e| match e {
            NoGroup::Incompatible(m) | NoGroup::AtMaxSize(m) => {
                ProviderError::InsufficientCapacity(m)
            }
        })?;
        // The MachineDeployment's own namespace (a ClusterAPINodeClass looks in all of them).
        let place = place.in_namespace(&group.namespace);
        // Its own launch timeout (Cluster Autoscaler's `maxnodeprovisiontime`), if shorter.
        let deadline = group.max_provision_millis.map_or(deadline, |millis| {
            deadline.min(clock::now_millis() + millis)
        });
        // Join the MachineDeployment's waiting launches, give others a moment to join too, then
        // take an unclaimed Machine, or raise the replicas for everyone still waiting.
        let max_age = params.ledger_max_age();
        update_ledger(&place, group.of(), max_age, |l| {
            l.add(&claim.name, clock::now_millis());
        })?;
        clock::sleep_millis(params.batch_millis);
        let machine = loop {
            if let Some(machine) = adopt(&place, group, &claim.name, max_age)? {
                leave_ledger(&place, group.of(), max_age, &claim.name);
                break machine;
            }
            if clock::now_millis() >= deadline {
                leave_ledger(&place, group.of(), max_age, &claim.name);
                release_excess(&place, group.of(), max_age)?;
                return Err(ProviderError::create_failed(
                    "MachineNotCreated",
                    format!(
                        "no new Machine of {} {} within the launch timeout (launchTimeoutSeconds {} s, or its shorter {MAX_PROVISION_TIME}); scaled it back",
                        group.kind.as_str(),
                        group.name,
                        params.launch_timeout_seconds
                    ),
                ));
            }
            if let Err(e) = ensure_capacity(&place, group, max_age) {
                leave_ledger(&place, group.of(), max_age, &claim.name);
                return Err(e);
            }
            clock::sleep_millis(params.poll_millis);
        };
        wait_launched(&place, &params, machine, Some(group), deadline)
    }

    fn delete(claim: NodeClaim) -> Result<(), ProviderError> {
        let Some((place, machine)) =
            claimed_machine(Some(&claim.name), claim.provider_id.as_deref())?
        else {
            return Err(ProviderError::NotFound(format!(
                "no Machine for claim {}",
                claim.name
            )));
        };
        remove(&place, &machine)
    }

    fn get(provider_id: String) -> Result<NodeClaim, ProviderError> {
        let (place, machine) = claimed_machine(None, Some(&provider_id))?
            .ok_or_else(|| ProviderError::NotFound(format!("no Machine with {provider_id}")))?;
        let group = group_of(&place, &machine);
        Ok(machine.to_claim(group.as_ref()))
    }

    fn list() -> Result<Vec<NodeClaim>, ProviderError> {
        let (place, machines) = find_machines(CLAIM_LABEL)?;
        // Each claim with its MachineDeployment's node labels (garbage collection matches the
        // host's selector against them); one read per MachineDeployment.
        let mut groups: BTreeMap<(String, String), Option<NodeGroup>> = BTreeMap::new();
        Ok(machines
            .iter()
            .filter(|m| !m.is_leaving())
            .map(|m| {
                let key = (
                    m.metadata.namespace.clone(),
                    m.owner()
                        .map(|(_, name)| name)
                        .unwrap_or_default()
                        .to_owned(),
                );
                let group = groups
                    .entry(key)
                    .or_insert_with(|| group_of(&place.in_namespace(&m.metadata.namespace), m));
                m.to_claim(group.as_ref())
            })
            .collect())
    }

    fn is_drifted(claim: NodeClaim, class: NodeClass) -> Result<Option<String>, ProviderError> {
        Parameters::parse(&class.parameters)?;
        let Some((place, machine)) =
            claimed_machine(Some(&claim.name), claim.provider_id.as_deref())?
        else {
            return Ok(None);
        };
        let Some(recorded) = machine.metadata.annotations.get(HASH_ANNOTATION) else {
            return Ok(None);
        };
        let place = Place {
            namespace: Some(machine.metadata.namespace.clone()),
            ..place
        };
        Ok(group_of(&place, &machine)
            .filter(|group| &group.template_hash != recorded)
            .map(|_| "MachineTemplateChanged".to_string()))
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        capstan_provider_sdk::ready_repair_policies(30 * 60)
    }

    fn validate_node_class(class: NodeClass) -> Result<(), ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        let place = Place::of(&params);
        let (groups, errors) = load_groups(&place, &params, false)?;
        if !errors.is_empty() {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return Err(ProviderError::Invalid(list.join("; ")));
        }
        if groups.is_empty() {
            return Err(ProviderError::NodeClassNotReady(format!(
                "no MachineDeployment labelled {MEMBER_LABEL} (and matching the selector) in {} of the {} cluster",
                if params.all_namespaces {
                    "any namespace".to_owned()
                } else {
                    format!("namespace {}", params.namespace)
                },
                match params.cluster.cluster() {
                    Cluster::Management => "management",
                    Cluster::Workload => "workload",
                }
            )));
        }
        Ok(())
    }
}
