//! The `cloud-provider` export: glue between the WIT calls, the pure modules and the `kube` import.
//! Every kube call targets `v1/Node` (cluster-scoped) in the workload cluster, but the list of the
//! DRA KWOK driver's `DRAConfig`s that gives the instance types their devices ([`devices`]).

use capstan_provider_sdk::catalog::DeviceTemplates;
use capstan_provider_sdk::kube::{self, Cluster, KubeError, ListOptions, ObjectRef, Target};
use capstan_provider_sdk::{
    Guest, InstanceTypes, NodeClaim, NodeClass, NodePool, ProviderError, RebootError, Registration,
    RepairAction, RepairRule, Requirements, ResourceList, clock, lookup, timestamp,
};
use serde::Deserialize;
use serde_json::Value;

use crate::catalog;
use crate::devices::{self, DraConfig};
use crate::drift::{self, Recorded};
use crate::errors::{self, from_kube};
use crate::node::{self, HASH_ANNOTATION, IMAGE_ANNOTATION, Node, Provenance};
use crate::params::Parameters;
use crate::reboot;
use crate::selection::{self, NoLaunch};

/// A node condition that simulates a fault (Karpenter's kwok provider's name): a node with it
/// `True` for 30 seconds is replaced. kwok's heartbeats never touch it.
pub const UNHEALTHY_CONDITION: &str = "KWOKUnhealthy";

/// A node condition that simulates a fault a reboot cures (Karpenter's kwok provider's name): a
/// node with it `True` for 30 seconds is rebooted.
pub const REBOOT_REQUIRED_CONDITION: &str = "KWOKRebootRequired";

/// The kwok provider.
pub struct Kwok;

/// How long a list of the `DRAConfig`s is reused (`get-instance-types` is called often).
const DRA_CONFIGS_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// The DRA KWOK driver's configurations, listed at most every [`DRA_CONFIGS_TTL`]. None when
/// the driver's CRD is not installed or the grants do not reach it (then no type has devices;
/// that answer is cached too, so a provider without the grant is not refused on every call).
fn dra_configs() -> Vec<DraConfig> {
    let listed =
        capstan_provider_sdk::cache::get_or_insert_with("dra-configs", DRA_CONFIGS_TTL, || {
            match kube::list::<DraConfig>(
                &Target::new(Cluster::Workload, devices::API_VERSION, devices::KIND),
                &ListOptions::default(),
            ) {
                Ok(configs) => Ok(configs),
                Err(err)
                    if err.is_not_found()
                        || matches!(err.kube_error(), Some(KubeError::PermissionDenied(_))) =>
                {
                    capstan_provider_sdk::debug!("no DRAConfigs, so no devices: {err}");
                    Ok(Vec::new())
                }
                Err(err) => Err(err),
            }
        });
    listed.unwrap_or_else(|err| {
        capstan_provider_sdk::warn!("listing DRAConfigs failed, no devices this time: {err}");
        Vec::new()
    })
}

fn nodes() -> Target {
    Target::new(Cluster::Workload, "v1", "Node")
}

fn node_ref(name: &str) -> ObjectRef {
    nodes().object(name)
}

/// The node named by a kwok provider ID, or `not-found` for any other ID.
fn node_name(provider_id: &str) -> Result<&str, ProviderError> {
    node::name_from_provider_id(provider_id).ok_or_else(|| {
        ProviderError::NotFound(format!("{provider_id:?} is not a kwok provider ID"))
    })
}

/// A node this provider manages, or `None` if it is absent or someone else's (the host refuses
/// to show another's under an `owned` grant).
fn managed_node(name: &str, launch: bool) -> Result<Option<Node>, ProviderError> {
    let node: Option<Node> = match kube::get_opt(&node_ref(name)) {
        Ok(node) => node,
        Err(e) if errors::not_owned(&e) => None,
        Err(e) => return Err(from_kube(e, launch)),
    };
    Ok(node.filter(Node::is_managed))
}

fn invalid(e: impl std::fmt::Display) -> ProviderError {
    ProviderError::Invalid(e.to_string())
}

/// The claim for a node that already exists under the claim's name (a retried `create`).
fn existing(name: &str, claim: &NodeClaim) -> Result<Option<NodeClaim>, ProviderError> {
    let taken = || {
        ProviderError::create_failed(
            "NodeNameTaken",
            format!("a Node named {name} exists and is not managed by the kwok provider"),
        )
    };
    let node: Option<Node> = match kube::get_opt(&node_ref(name)) {
        Ok(node) => node,
        // Under an `owned` grant the host refuses to show another's Node.
        Err(e) if errors::not_owned(&e) => return Err(taken()),
        Err(e) => return Err(from_kube(e, true)),
    };
    match node {
        None => Ok(None),
        Some(node) if !node.is_managed() => Err(taken()),
        Some(node) if node.is_deleting() => Err(ProviderError::Retryable(format!(
            "the Node {name} from an earlier launch is still being deleted"
        ))),
        Some(node) => Ok(Some(node::launched_claim(&node, claim))),
    }
}

impl Guest for Kwok {
    fn name() -> String {
        "kwok".to_string()
    }

    fn get_instance_types(
        _pool: NodePool,
        class: NodeClass,
    ) -> Result<InstanceTypes, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        let entries = catalog::build(&params)?;
        let configs = dra_configs();
        let mut templates = DeviceTemplates::new();
        if !configs.is_empty() {
            for (i, entry) in entries.iter().enumerate() {
                templates.add(
                    i as u32,
                    &devices::templates(&configs, &entry.node_labels()),
                );
            }
        }
        Ok(templates.answer(catalog::to_catalog(&entries), Vec::new()))
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<NodeClaim, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        if let Some(launched) = existing(&claim.name, &claim)? {
            return Ok(launched);
        }
        let entries = catalog::build(&params)?;
        let requirements = Requirements::from_slice(&claim.requirements).map_err(invalid)?;
        let requests = ResourceList::from_resources(&claim.requests).map_err(invalid)?;
        let launch = selection::cheapest(&entries, &requirements, &requests).map_err(|e| {
            ProviderError::InsufficientCapacity(match &e {
                NoLaunch::Incompatible(m) | NoLaunch::Unavailable(m) => m.clone(),
            })
        })?;
        let delay = params.launch_delay_millis();
        if delay > 0 {
            clock::sleep_millis(delay);
        }
        let hash = params.hash();
        let body = node::build(
            &claim,
            &launch,
            Provenance {
                node_class: &class.name,
                hash: &hash,
                image_id: params.image_id(),
                created_at: clock::now_millis(),
            },
        );
        let created: Node = match kube::create(&nodes(), &body) {
            Ok(created) => created,
            Err(e) if matches!(e.kube_error(), Some(kube::KubeError::Conflict(_))) => {
                // Another attempt created it first: return that one.
                return existing(&claim.name, &claim)?.ok_or_else(|| {
                    ProviderError::Retryable(format!("Node {} conflicted and vanished", claim.name))
                });
            }
            Err(e) if errors::registration_refused(&e) => {
                // The instance is up; its Node cannot register (an admission policy refuses it),
                // as a kubelet's registration can fail on a real cloud. The claim is launched and
                // stays unregistered until the registration timeout removes it.
                capstan_provider_sdk::warn!(
                    "launched {} as {}, but its Node cannot register: {e}",
                    claim.name,
                    launch.entry.name
                );
                return Ok(node::launched_claim(&body, &claim));
            }
            Err(e) => return Err(from_kube(e, true)),
        };
        let created = if created.status.capacity.is_empty() {
            // The API server kept no status: write it through the status subresource.
            let patch = serde_json::json!({ "status": body.status });
            match kube::patch_merge::<_, Node>(&node_ref(&claim.name).subresource("status"), &patch)
            {
                Ok(patched) => patched,
                Err(e) => {
                    capstan_provider_sdk::warn!("could not set status of Node {}: {e}", claim.name);
                    Node {
                        status: body.status.clone(),
                        ..created
                    }
                }
            }
        } else {
            created
        };
        capstan_provider_sdk::info!(
            "launched {} as {} in {} ({})",
            claim.name,
            launch.entry.name,
            launch.offer.zone,
            launch.offer.capacity_type
        );
        Ok(node::launched_claim(&created, &claim))
    }

    fn delete(claim: NodeClaim) -> Result<(), ProviderError> {
        let name = match &claim.provider_id {
            Some(id) => node_name(id)?.to_string(),
            None => claim
                .node_name
                .clone()
                .unwrap_or_else(|| claim.name.clone()),
        };
        let Some(node) = managed_node(&name, false)? else {
            return Err(ProviderError::NotFound(format!("Node {name} is gone")));
        };
        if node.is_deleting() {
            return Ok(());
        }
        match kube::delete(&node_ref(&name)) {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => {
                Err(ProviderError::NotFound(format!("Node {name} is gone")))
            }
            Err(e) => Err(from_kube(e, false)),
        }
    }

    fn get(provider_id: String) -> Result<NodeClaim, ProviderError> {
        let name = node_name(&provider_id)?;
        managed_node(name, false)?
            .map(|n| n.to_claim())
            .ok_or_else(|| ProviderError::NotFound(format!("no kwok Node {name}")))
    }

    fn list() -> Result<Vec<NodeClaim>, ProviderError> {
        let selector = node::PROVIDER_LABEL.to_string();
        let nodes: Vec<Node> = kube::list(&nodes(), &ListOptions::labels(&selector))
            .map_err(|e| from_kube(e, false))?;
        Ok(nodes
            .iter()
            .filter(|n| n.is_managed())
            .map(Node::to_claim)
            .collect())
    }

    fn is_drifted(claim: NodeClaim, class: NodeClass) -> Result<Option<String>, ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        let (hash, image) = (params.hash(), params.image_id().to_string());
        // The claim carries what `create` recorded when the host kept its annotations; otherwise
        // ask the node.
        if lookup(&claim.annotations, HASH_ANNOTATION).is_some() {
            let recorded = Recorded {
                hash: lookup(&claim.annotations, HASH_ANNOTATION),
                image: lookup(&claim.annotations, IMAGE_ANNOTATION).or(claim.image_id.as_deref()),
            };
            return Ok(drift::reason(recorded, &hash, &image).map(str::to_string));
        }
        let Some(provider_id) = &claim.provider_id else {
            return Ok(None);
        };
        let Some(node) = managed_node(node_name(provider_id)?, false)? else {
            return Ok(None);
        };
        let recorded = Recorded {
            hash: node.annotation(HASH_ANNOTATION),
            image: node.annotation(IMAGE_ANNOTATION),
        };
        Ok(drift::reason(recorded, &hash, &image).map(str::to_string))
    }

    fn repair_policies() -> Vec<RepairRule> {
        repair_rules()
    }

    fn reboot(claim: NodeClaim, operation_id: String) -> Result<(), RebootError> {
        let Some(provider_id) = &claim.provider_id else {
            return Err(RebootError::NotFound(format!(
                "NodeClaim {} has no provider ID",
                claim.name
            )));
        };
        let name = node_name(provider_id).map_err(|e| RebootError::NotFound(format!("{e:?}")))?;
        let node: Option<Value> = match kube::get_opt(&node_ref(name)) {
            Ok(node) => node,
            Err(e) if errors::not_owned(&e) => None,
            Err(e) => return Err(reboot_error(e)),
        };
        let managed = node.as_ref().is_some_and(|n| {
            Node::deserialize(n).is_ok_and(|n| n.is_managed() && !n.is_deleting())
        });
        let (Some(node), true) = (node, managed) else {
            return Err(RebootError::NotFound(format!("no kwok Node {name}")));
        };
        let now = timestamp::format_millis(clock::now_millis());
        let Some(ops) = reboot::patch(&node, &operation_id, &now) else {
            return Ok(());
        };
        kube::patch_json::<_, Value>(&node_ref(name).subresource("status"), &ops)
            .map_err(reboot_error)?;
        capstan_provider_sdk::info!("rebooting {name} (operation {operation_id})");
        Ok(())
    }

    fn registered(_claim: NodeClaim) -> Result<Registration, ProviderError> {
        // A kwok Node has nothing to wait for once it has joined.
        Ok(Registration::Ready)
    }

    fn validate_node_class(class: NodeClass) -> Result<(), ProviderError> {
        let params = Parameters::parse(&class.parameters)?;
        catalog::build(&params).map(drop)
    }
}

/// Karpenter's kwok provider's repair rules: `Ready=False` (the default) or `Unknown` for 10
/// minutes replaces the node without draining it; a simulated fault ([`UNHEALTHY_CONDITION`]) for
/// 30 seconds replaces it, draining for at most 45 seconds; [`REBOOT_REQUIRED_CONDITION`] for 30
/// seconds reboots it, draining for at most a minute.
pub fn repair_rules() -> Vec<RepairRule> {
    let rule = |condition: &str, status: &str, regex: &str, toleration, grace, action| RepairRule {
        condition_type: condition.to_string(),
        condition_status: status.to_string(),
        reason_regex: regex.to_string(),
        toleration_seconds: toleration,
        termination_grace_seconds: Some(grace),
        priority: 0,
        action,
    };
    vec![
        rule("Ready", "False", "", 600, 0, RepairAction::Replace),
        rule("Ready", "Unknown", ".*", 600, 0, RepairAction::Replace),
        rule(
            UNHEALTHY_CONDITION,
            "True",
            ".*",
            30,
            45,
            RepairAction::Replace,
        ),
        rule(
            REBOOT_REQUIRED_CONDITION,
            "True",
            ".*",
            30,
            60,
            RepairAction::Reboot,
        ),
    ]
}

/// A `kube` failure of a reboot: a missing permission cannot be retried away.
fn reboot_error(e: kube::Error) -> RebootError {
    match e.kube_error() {
        Some(kube::KubeError::NotFound(m)) => RebootError::NotFound(m.clone()),
        Some(kube::KubeError::PermissionDenied(m)) => RebootError::Failed(m.clone()),
        _ => RebootError::Retryable(e.to_string()),
    }
}
