"""Drives the CloudStack emulator with the `cs` client (PyPI) and prints what it got as JSON.

Usage: cs_drive.py ENDPOINT API_KEY SECRET_KEY

The test (tests/cloudstack-emulator/tests/emulator/cs_client.rs) starts the emulator with zone-b
at capacity 0, runs this script and checks its output. Every step records the client's own
result or exception; nothing here decides pass or fail.
"""

import base64
import json
import sys
import time

from cs import CloudStack, CloudStackApiException, CloudStackException

ZONE_A = "a1b2c3d4-0000-4000-8000-00000000000a"
ZONE_B = "a1b2c3d4-0000-4000-8000-00000000000b"
TAG = {"key": "capstan.dev/cluster", "value": "wire test"}


def error_of(exc):
    """What the client raised, as data."""
    out = {"type": type(exc).__name__, "message": str(exc.args[0]) if exc.args else ""}
    response = getattr(exc, "response", None)
    if response is not None:
        out["status"] = response.status_code
        out["contentType"] = response.headers.get("Content-Type", "")
    if isinstance(exc, CloudStackApiException):
        out["error"] = exc.error
    return out


def step(results, name, call):
    try:
        results[name] = {"ok": call()}
    except CloudStackException as exc:
        results[name] = {"error": error_of(exc)}


def poll_job(cs, jobid):
    """queryAsyncJobResult until the job is done (the client's own polling hides the raw job)."""
    for _ in range(300):
        job = cs.queryAsyncJobResult(jobid=jobid)
        if job.get("jobstatus") != 0:
            return job
        time.sleep(0.1)
    return job


def main():
    endpoint, key, secret = sys.argv[1:4]
    cs = CloudStack(endpoint=endpoint, key=key, secret=secret, poll_interval=0.1, job_timeout=30)
    post = CloudStack(endpoint=endpoint, key=key, secret=secret, method="post", poll_interval=0.1, job_timeout=30)
    results = {}

    step(results, "zones", lambda: cs.listZones(fetch_list=True))
    step(results, "offerings", lambda: cs.listServiceOfferings(zoneid=ZONE_A, fetch_list=True))
    step(results, "templates", lambda: cs.listTemplates(templatefilter="executable", zoneid=ZONE_A, fetch_list=True))
    step(results, "featured", lambda: cs.listTemplates(templatefilter="featured", fetch_list=True))
    step(results, "networks", lambda: cs.listNetworks(zoneid=ZONE_A, tags=[{"key": "capstan", "value": "nodes"}], fetch_list=True))
    step(results, "diskOfferings", lambda: cs.listDiskOfferings(fetch_list=True))
    step(results, "keypairs", lambda: cs.listSSHKeyPairs(fetch_list=True))
    step(results, "missingFilter", lambda: cs.listTemplates())

    offering = next(o for o in results["offerings"]["ok"] if o["name"] == "medium")
    template = next(t for t in results["templates"]["ok"] if t["arch"] == "x86_64")
    network = results["networks"]["ok"][0]
    user_data = base64.b64encode(b"#cloud-config\nhostname: cs-wire-1\n").decode()

    step(results, "deploy", lambda: cs.deployVirtualMachine(
        zoneid=ZONE_A, serviceofferingid=offering["id"], templateid=template["id"],
        networkids=[network["id"]], name="cs-wire-1", displayname="cs wire: 1 + 1 = 2 / é & co",
        userdata=user_data, rootdisksize=20, keypair="capstan", fetch_result=True))
    vm = results["deploy"].get("ok", {}).get("virtualmachine", {})
    vm_id = vm.get("id", "none")
    step(results, "duplicate", lambda: cs.deployVirtualMachine(
        zoneid=ZONE_A, serviceofferingid=offering["id"], templateid=template["id"], name="cs-wire-1"))
    step(results, "tag", lambda: cs.createTags(resourceids=[vm_id], resourcetype="UserVm", tags=[TAG], fetch_result=True))
    step(results, "byTag", lambda: cs.listVirtualMachines(tags=[TAG], listall=True, fetch_list=True))
    step(results, "byOtherTag", lambda: cs.listVirtualMachines(tags=[{"key": TAG["key"], "value": "other"}], listall=True))
    step(results, "tags", lambda: cs.listTags(resourcetype="UserVm", resourceid=vm_id))

    # Reboot: the client polls the job and returns its result; the raw answer is the job alone.
    step(results, "reboot", lambda: cs.rebootVirtualMachine(id=vm_id, fetch_result=True))
    step(results, "rebootStart", lambda: cs.rebootVirtualMachine(id=vm_id))
    reboot_job = results["rebootStart"].get("ok", {}).get("jobid", "none")
    step(results, "rebootJob", lambda: poll_job(cs, reboot_job))
    step(results, "rebootUnknown", lambda: cs.rebootVirtualMachine(id="00000000-0000-4000-8000-000000000000"))

    big = base64.b64encode(b"#cloud-config\n" + b"# padding\n" * 600).decode()
    step(results, "bigUserDataGet", lambda: cs.deployVirtualMachine(
        zoneid=ZONE_A, serviceofferingid=offering["id"], templateid=template["id"], name="cs-wire-get", userdata=big))
    step(results, "bigUserDataPost", lambda: post.deployVirtualMachine(
        zoneid=ZONE_A, serviceofferingid=offering["id"], templateid=template["id"], name="cs-wire-post",
        userdata=big, fetch_result=True))
    post_vm = results["bigUserDataPost"].get("ok", {}).get("virtualmachine", {}).get("id", "none")

    step(results, "noCapacity", lambda: cs.deployVirtualMachine(
        zoneid=ZONE_B, serviceofferingid=offering["id"], templateid=template["id"], name="cs-wire-full",
        fetch_result=True))

    step(results, "destroy", lambda: cs.destroyVirtualMachine(id=vm_id, expunge=True, fetch_result=True))
    step(results, "destroyPost", lambda: post.destroyVirtualMachine(id=post_vm, expunge=True, fetch_result=True))
    step(results, "afterDestroy", lambda: cs.listVirtualMachines(id=vm_id))
    step(results, "destroyAgain", lambda: cs.destroyVirtualMachine(id=vm_id, expunge=True))
    step(results, "rebootExpunged", lambda: cs.rebootVirtualMachine(id=vm_id, fetch_result=True))
    step(results, "unknownId", lambda: cs.listVirtualMachines(id="00000000-0000-4000-8000-000000000000"))

    wrong = CloudStack(endpoint=endpoint, key=key, secret="not-the-secret")
    step(results, "wrongSecret", lambda: wrong.listZones())
    expired = CloudStack(endpoint=endpoint, key=key, secret=secret, expiration=-1)
    # A negative expiration sends no signatureVersion/expires: the legacy signature still works.
    step(results, "unversioned", lambda: expired.listZones())
    step(results, "expired", lambda: cs.listZones(expires="2020-01-01T00:00:00+0000", signatureVersion="3"))

    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
