"""The ``cloud-provider`` export: glue between the contract, the pure modules and the ``kube``
import. Every kube call targets ``v1/Node`` (cluster-scoped) in the workload cluster, but the list
of the DRA KWOK driver's ``DRAConfig``\\ s that gives the instance types their devices
(:mod:`.devices`)."""

from __future__ import annotations

from typing import Any

from capstan_provider import devices as sdk_devices
from capstan_provider import errors, host, kube, lifecycle
from capstan_provider.devices import DeviceTemplates
from capstan_provider.provider import Provider, lookup
from capstan_provider.quantity import QuantityError
from capstan_provider.requirements import RequirementError, Requirements
from capstan_provider.resources import parse_resources
from capstan_provider.types import NodeClaim, NodeClass, NodePool

from . import catalog, devices, drift, node, reboot, repair
from .params import Parameters
from .selection import NoLaunch, cheapest

NODES = kube.Target.workload("v1", "Node")
DRA_CONFIGS = kube.Target.workload(devices.API_VERSION, devices.KIND)
DRA_CONFIGS_CACHE_KEY = "dra-configs"
DRA_CONFIGS_TTL_MILLIS = 10_000
"""How long a list of the ``DRAConfig``\\ s is reused (``get-instance-types`` is called often)."""


def dra_configs() -> list[devices.DraConfig]:
    """The DRA KWOK driver's configurations, listed at most every :data:`DRA_CONFIGS_TTL_MILLIS`.
    None when the driver's CRD is not installed or the grants do not reach it (then no type has
    devices; that answer is cached too, so a provider without the grant is not refused on every
    call). Any other failure, or a config that does not decode, is logged and means no devices
    this time (not cached), as in the Rust kwok."""
    cached = host.cache_get(DRA_CONFIGS_CACHE_KEY)
    if isinstance(cached, list):
        try:
            return devices.parse_list(cached)
        except devices.DraConfigError:
            pass  # listed again, as a cached value that does not decode
    try:
        items = kube.list_items(DRA_CONFIGS)
        configs = devices.parse_list(items)
    except kube.KubeCallError as e:
        if e.is_not_found() or e.kind == "permission-denied":
            host.debug(f"no DRAConfigs, so no devices: {e}")
            host.cache_set(DRA_CONFIGS_CACHE_KEY, [], DRA_CONFIGS_TTL_MILLIS)
            return []
        host.warn(f"listing DRAConfigs failed, no devices this time: {e}")
        return []
    except devices.DraConfigError as e:
        host.warn(f"listing DRAConfigs failed, no devices this time: {e}")
        return []
    # What is read of them, their specs, is what the cache keeps.
    host.cache_set(DRA_CONFIGS_CACHE_KEY, [{"spec": item.get("spec")} for item in items], DRA_CONFIGS_TTL_MILLIS)
    return configs


def registration_refused(error: kube.KubeCallError) -> bool:
    """Whether creating a Node failed because an admission policy or webhook denied it (a Node
    that cannot register), not because the call failed."""
    message = str(error).lower()
    return error.kind in ("invalid", "other") and "admission" in message and "denied" in message


def _node_name(pid: str) -> str:
    name = node.name_from_provider_id(pid)
    if name is None:
        raise errors.not_found(f"{pid!r} is not a kwok provider ID")
    return name


def _not_owned(e: kube.KubeCallError) -> bool:
    """Whether the host refused the call because the object is not this provider's."""
    return e.kind == "permission-denied" and "capstan.dev/provider" in str(e)


def _managed_node(name: str, launch: bool) -> dict[str, Any] | None:
    try:
        found = kube.get_opt(NODES.object(name))
    except kube.KubeCallError as e:
        if _not_owned(e):
            return None
        raise e.provider_error(launch) from None
    return found if found is not None and node.is_managed(found) else None


def _existing(claim: NodeClaim) -> NodeClaim | None:
    """The claim for a node that already exists under the claim's name (a retried ``create``)."""
    taken = f"a Node named {claim.name} exists and is not managed by the kwok provider"
    try:
        found = kube.get_opt(NODES.object(claim.name))
    except kube.KubeCallError as e:
        if _not_owned(e):
            raise errors.create_failed("NodeNameTaken", taken) from None
        raise e.provider_error(True) from None
    if found is None:
        return None
    if not node.is_managed(found):
        raise errors.create_failed("NodeNameTaken", taken)
    if node.is_deleting(found):
        raise errors.retryable(f"the Node {claim.name} from an earlier launch is still being deleted")
    return node.launched_claim(found, claim)


class Kwok(Provider):
    """The kwok provider, in Python."""

    def name(self) -> str:
        return node.PROVIDER_NAME

    def get_instance_types(self, pool: NodePool, class_: NodeClass) -> sdk_devices.InstanceTypes:
        entries = catalog.build(Parameters.parse(class_.parameters))
        # Devices need contract 0.5; built against an older one, kwok lists no DRAConfigs.
        configs = dra_configs() if sdk_devices.V0_5 else []
        templates = DeviceTemplates()
        if configs:
            for i, entry in enumerate(entries):
                templates.add(i, devices.templates(configs, entry.node_labels()))
        return templates.answer(catalog.to_catalog(entries))

    def create(self, claim: NodeClaim, class_: NodeClass) -> NodeClaim:
        params = Parameters.parse(class_.parameters)
        launched = _existing(claim)
        if launched is not None:
            return launched
        entries = catalog.build(params)
        try:
            requirements = Requirements.of(claim.requirements)
            requests = parse_resources(claim.requests)
        except (RequirementError, QuantityError) as e:
            raise errors.invalid(str(e)) from None
        try:
            launch = cheapest(entries, requirements, requests)
        except NoLaunch as e:
            raise errors.insufficient_capacity(str(e)) from None
        if params.launch_delay() > 0:
            host.sleep_millis(params.launch_delay())
        body = node.build(claim, launch, node.Provenance(class_.name, params.hash(), params.image(), host.now_millis()))
        try:
            created = kube.create(NODES, body)
        except kube.KubeCallError as e:
            if registration_refused(e):
                # The instance is up; its Node cannot register (an admission policy refuses it),
                # as a kubelet's registration can fail on a real cloud. The claim is launched and
                # stays unregistered until the registration timeout removes it.
                host.warn(f"launched {claim.name} as {launch.entry.name}, but its Node cannot register: {e}")
                return node.launched_claim(body, claim)
            if not e.is_conflict():
                raise e.provider_error(True) from None
            # Another attempt created it first: return that one.
            again = _existing(claim)
            if again is None:
                raise errors.retryable(f"Node {claim.name} conflicted and vanished") from None
            return again
        if not node.has_status(created):
            # The API server kept no status: write it through the status subresource.
            try:
                created = kube.patch_merge(NODES.object(claim.name, "status"), {"status": body["status"]})
            except kube.KubeCallError as e:
                host.warn(f"could not set status of Node {claim.name}: {e}")
                created = {**created, "status": body["status"]}
        host.info(f"launched {claim.name} as {launch.entry.name} in {launch.offer.zone} ({launch.offer.capacity_type})")
        return node.launched_claim(created, claim)

    def delete(self, claim: NodeClaim) -> None:
        if claim.provider_id is not None:
            name = _node_name(claim.provider_id)
        else:
            name = claim.node_name or claim.name
        found = _managed_node(name, False)
        if found is None:
            raise errors.not_found(f"Node {name} is gone")
        if node.is_deleting(found):
            return
        try:
            kube.delete(NODES.object(name))
        except kube.KubeCallError as e:
            if e.is_not_found():
                raise errors.not_found(f"Node {name} is gone") from None
            raise e.provider_error(False) from None

    def get(self, provider_id: str) -> NodeClaim:
        name = _node_name(provider_id)
        found = _managed_node(name, False)
        if found is None:
            raise errors.not_found(f"no kwok Node {name}")
        return node.to_claim(found)

    def list(self) -> list[NodeClaim]:
        try:
            items = kube.list_items(NODES, label_selector=node.PROVIDER_LABEL)
        except kube.KubeCallError as e:
            raise e.provider_error(False) from None
        return [node.to_claim(n) for n in items if node.is_managed(n)]

    def is_drifted(self, claim: NodeClaim, class_: NodeClass) -> str | None:
        params = Parameters.parse(class_.parameters)
        current_hash, current_image = params.hash(), params.image()
        # The claim carries what `create` recorded when the host kept its annotations; otherwise
        # ask the node.
        if lookup(claim.annotations, node.HASH_ANNOTATION) is not None:
            image = lookup(claim.annotations, node.IMAGE_ANNOTATION) or claim.image_id
            return drift.reason(lookup(claim.annotations, node.HASH_ANNOTATION), image, current_hash, current_image)
        if claim.provider_id is None:
            return None
        found = _managed_node(_node_name(claim.provider_id), False)
        if found is None:
            return None
        return drift.reason(node.annotation(found, node.HASH_ANNOTATION), node.annotation(found, node.IMAGE_ANNOTATION), current_hash, current_image)

    def repair_policies(self) -> list[lifecycle.RepairRule]:
        return repair.rules()

    def reboot(self, claim: NodeClaim, operation_id: str) -> None:
        if claim.provider_id is None:
            raise lifecycle.reboot_not_found(f"NodeClaim {claim.name} has no provider ID")
        name = node.name_from_provider_id(claim.provider_id)
        if name is None:
            raise lifecycle.reboot_not_found(f"{claim.provider_id!r} is not a kwok provider ID")
        try:
            found = kube.get_opt(NODES.object(name))
        except kube.KubeCallError as e:
            if not _not_owned(e):
                raise e.reboot_error() from None
            found = None
        if found is None or not node.is_managed(found) or node.is_deleting(found):
            raise lifecycle.reboot_not_found(f"no kwok Node {name}")
        ops = reboot.patch(found, operation_id, node.format_timestamp_millis(host.now_millis()))
        if ops is None:
            return
        try:
            kube.patch_json(NODES.object(name, "status"), ops)
        except kube.KubeCallError as e:
            raise e.reboot_error() from None
        host.info(f"rebooting {name} (operation {operation_id})")

    def registered(self, claim: NodeClaim) -> lifecycle.Registration:
        # A kwok Node has nothing to wait for once it has joined.
        return lifecycle.ready()

    def validate_node_class(self, class_: NodeClass) -> None:
        catalog.build(Parameters.parse(class_.parameters))
