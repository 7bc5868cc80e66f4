//! The API driven with the project's signer: the VM lifecycle, CloudStack's list and error
//! shapes, signature checks, async job latency and failures.

use std::time::Duration;

use anyhow::{Context, Result};
use capstan_cloudstack_emulator::catalog::sample;
use capstan_cloudstack_emulator::{
    Config, Credentials, Emulator, JobFailure, JobLatency, VmState, provider_id,
};
use serde_json::json;

use super::http::{call, now_seconds, ok, send, wait_job};

async fn emulator() -> Result<capstan_cloudstack_emulator::EmulatorHandle> {
    Ok(Emulator::start(Config::default()).await?)
}

fn deploy_params<'a>(name: &'a str, zone: &'a str, network: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("zoneid", zone),
        ("serviceofferingid", sample::MEDIUM),
        ("templateid", sample::UBUNTU),
        ("networkids", network),
        ("name", name),
        ("userdata", "I2Nsb3VkLWNvbmZpZwo="),
    ]
}

#[tokio::test]
async fn deploy_tag_list_and_expunge_with_the_project_signer() -> Result<()> {
    let cs = emulator().await?;
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("node-1", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let vm_id = deployed["id"].as_str().unwrap_or_default().to_string();
    let job_id = deployed["jobid"].as_str().unwrap_or_default().to_string();
    assert!(!vm_id.is_empty() && !job_id.is_empty(), "{deployed}");
    // Listed as Starting while the job runs.
    let listed = ok(&cs, "listVirtualMachines", &[("id", &vm_id)]).await?;
    assert_eq!(listed["count"], 1);
    assert_eq!(listed["virtualmachine"][0]["state"], "Starting");

    let job = wait_job(&cs, &job_id).await?;
    assert_eq!(job["jobstatus"], 1, "{job}");
    assert_eq!(job["jobresultcode"], 0);
    assert_eq!(job["jobinstanceid"], vm_id.as_str());
    let vm = &job["jobresult"]["virtualmachine"];
    assert_eq!(vm["state"], "Running");
    assert_eq!(vm["name"], "node-1");
    assert_eq!(vm["zonename"], "zone-a");
    assert_eq!(vm["serviceofferingname"], "medium");
    assert_eq!(vm["cpunumber"], 2);
    assert_eq!(vm["memory"], 4096);
    assert_eq!(vm["nic"][0]["networkid"], sample::NET_A);
    assert!(
        vm["nic"][0]["ipaddress"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.1.1.")),
        "{vm}"
    );

    let tagged = ok(
        &cs,
        "createTags",
        &[
            ("resourceids", &vm_id),
            ("resourcetype", "UserVm"),
            ("tags[0].key", "capstan.dev/nodeclaim"),
            ("tags[0].value", "node-1"),
            ("tags[1].key", "capstan.dev/cluster"),
            ("tags[1].value", "test"),
        ],
    )
    .await?;
    let job = wait_job(&cs, tagged["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobresult"], json!({"success": true}));

    let by_tags = ok(
        &cs,
        "listVirtualMachines",
        &[
            ("listall", "true"),
            ("tags[0].key", "capstan.dev/cluster"),
            ("tags[0].value", "test"),
        ],
    )
    .await?;
    assert_eq!(by_tags["count"], 1, "{by_tags}");
    assert_eq!(
        by_tags["virtualmachine"][0]["tags"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    let other = ok(
        &cs,
        "listVirtualMachines",
        &[
            ("tags[0].key", "capstan.dev/cluster"),
            ("tags[0].value", "prod"),
        ],
    )
    .await?;
    assert_eq!(
        other,
        json!({}),
        "an empty list is an empty object, as CloudStack answers"
    );
    // CloudStack's name filter is a substring match.
    let by_name = ok(&cs, "listVirtualMachines", &[("name", "NODE")]).await?;
    assert_eq!(by_name["count"], 1);

    let destroyed = ok(
        &cs,
        "destroyVirtualMachine",
        &[("id", &vm_id), ("expunge", "true")],
    )
    .await?;
    let job = wait_job(&cs, destroyed["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 1, "{job}");
    assert_eq!(
        ok(&cs, "listVirtualMachines", &[("id", &vm_id)]).await?,
        json!({})
    );
    assert!(cs.vm(&vm_id).is_none());
    // Every request verified with signature version 3.
    let requests = cs.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.status == 200 && r.signature_version.as_deref() == Some("3")),
        "{requests:?}"
    );
    assert_eq!(provider_id("z", "v"), "cloudstack://z/v");
    Ok(())
}

#[tokio::test]
async fn requests_are_verified_as_cloudstack_does() -> Result<()> {
    let cs = emulator().await?;
    let good = cs.credentials().unwrap_or_else(|| Credentials::new("", ""));
    let list = [("command", "listZones"), ("response", "json")];

    let expired = cloudstack_sign::sign(&list, &good, now_seconds() - 1);
    let response = send(cs.addr(), "GET", &format!("/client/api?{expired}"), None).await?;
    assert_eq!(response.status, 401);
    assert_eq!(
        response.json()?,
        json!({"listzonesresponse": {
        "uuidList": [], "errorcode": 401,
        "errortext": "unable to verify user credentials and/or request signature"}})
    );

    let wrong = Credentials::new(good.api_key.clone(), "wrong");
    assert_eq!(call(&cs, &wrong, "listZones", &[]).await?.status, 401);
    let unsigned = send(
        cs.addr(),
        "GET",
        "/client/api?command=listZones&response=json",
        None,
    )
    .await?;
    assert_eq!(unsigned.status, 401);
    // A tampered value after signing.
    let signed = cloudstack_sign::sign(
        &[
            ("command", "listZones"),
            ("response", "json"),
            ("name", "zone-a"),
        ],
        &good,
        now_seconds() + 60,
    );
    let tampered = signed.replace("name=zone-a", "name=zone-b");
    assert_eq!(
        send(cs.addr(), "GET", &format!("/client/api?{tampered}"), None)
            .await?
            .status,
        401
    );
    // POST with the parameters in a form body.
    let body = cloudstack_sign::sign(&list, &good, now_seconds() + 60);
    let posted = send(cs.addr(), "POST", "/client/api", Some(&body)).await?;
    assert_eq!(posted.status, 200, "{}", posted.body);
    assert_eq!(posted.json()?["listzonesresponse"]["count"], 2);

    // A rotated key: the old one stops working, the new one works.
    let rotated = Credentials::new(good.api_key.clone(), "rotated");
    cs.set_accounts(vec![rotated.clone()]);
    assert_eq!(call(&cs, &good, "listZones", &[]).await?.status, 401);
    assert_eq!(call(&cs, &rotated, "listZones", &[]).await?.status, 200);
    Ok(())
}

#[tokio::test]
async fn bad_parameters_answer_431_in_cloudstacks_format() -> Result<()> {
    let cs = emulator().await?;
    let creds = cs.credentials().unwrap_or_else(|| Credentials::new("", ""));
    let missing = call(
        &cs,
        &creds,
        "deployVirtualMachine",
        &[
            ("serviceofferingid", sample::SMALL),
            ("templateid", sample::UBUNTU),
        ],
    )
    .await?;
    assert_eq!(missing.status, 431);
    assert_eq!(
        missing.json()?,
        json!({"deployvirtualmachineresponse": {
        "uuidList": [], "errorcode": 431, "cserrorcode": 4350,
        "errortext": "Unable to execute API command deployvirtualmachine due to missing parameter zoneid"}})
    );

    let unknown = call(
        &cs,
        &creds,
        "deployVirtualMachine",
        &[
            ("zoneid", sample::ZONE_A),
            ("serviceofferingid", sample::SMALL),
            ("templateid", "7e000000-0000-4000-8000-0000000000ff"),
        ],
    )
    .await?;
    assert_eq!(unknown.status, 431);
    assert!(
        unknown
            .body
            .contains("Invalid parameter templateid value=7e000000-0000-4000-8000-0000000000ff"),
        "{}",
        unknown.body
    );

    // An offering not offered in the zone, a bad host name, a duplicate name.
    let elsewhere = call(
        &cs,
        &creds,
        "deployVirtualMachine",
        &[
            ("zoneid", sample::ZONE_B),
            ("serviceofferingid", sample::LARGE),
            ("templateid", sample::UBUNTU),
        ],
    )
    .await?;
    assert_eq!(elsewhere.status, 431, "{}", elsewhere.body);
    let bad_name = call(
        &cs,
        &creds,
        "deployVirtualMachine",
        &deploy_params("9lives", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    assert_eq!(bad_name.status, 431);
    ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("twice", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let again = call(
        &cs,
        &creds,
        "deployVirtualMachine",
        &deploy_params("twice", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    assert_eq!(again.status, 431);
    assert!(again.body.contains("already exists"), "{}", again.body);
    // The same name in the other zone is fine.
    ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("twice", sample::ZONE_B, sample::NET_B),
    )
    .await?;

    let no_filter = call(&cs, &creds, "listTemplates", &[]).await?;
    assert_eq!(no_filter.status, 431);
    let not_emulated = call(&cs, &creds, "listVolumes", &[]).await?;
    assert_eq!(not_emulated.status, 432);
    assert_eq!(not_emulated.json()?["errorresponse"]["errorcode"], 432);
    Ok(())
}

#[tokio::test]
async fn catalog_lists_filter_and_page() -> Result<()> {
    let cs = emulator().await?;
    let zone_b = ok(&cs, "listServiceOfferings", &[("zoneid", sample::ZONE_B)]).await?;
    let names: Vec<&str> = zone_b["serviceoffering"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(names, ["small", "medium", "gpu-a10"]);
    let gpu = &zone_b["serviceoffering"][2];
    assert_eq!(gpu["gpucount"], 1);
    assert_eq!(gpu["serviceofferingdetails"]["pciDevice"], "NVIDIA A10");

    let templates = ok(&cs, "listTemplates", &[("templatefilter", "executable")]).await?;
    // One entry per zone: the x86 template in two zones, the arm one in one.
    assert_eq!(templates["count"], 3);
    let arm = ok(
        &cs,
        "listTemplates",
        &[
            ("templatefilter", "self"),
            ("tags[0].key", "capstan"),
            ("tags[0].value", "node-image"),
        ],
    )
    .await?;
    assert_eq!(arm["count"], 1);
    assert_eq!(arm["template"][0]["arch"], "aarch64");
    assert_eq!(arm["template"][0]["ostypename"], "Ubuntu 24.04 LTS");

    let page = ok(
        &cs,
        "listTemplates",
        &[("templatefilter", "all"), ("page", "2"), ("pagesize", "2")],
    )
    .await?;
    assert_eq!(page["count"], 3);
    assert_eq!(page["template"].as_array().map(Vec::len), Some(1));
    let networks = ok(&cs, "listNetworks", &[("zoneid", sample::ZONE_B)]).await?;
    assert_eq!(networks["network"][0]["id"], sample::NET_B);
    assert_eq!(networks["network"][0]["netmask"], "255.255.255.0");
    Ok(())
}

#[tokio::test]
async fn jobs_stay_pending_for_the_configured_polls_then_fail_as_told() -> Result<()> {
    let cs = Emulator::start(Config {
        job_latency: JobLatency::polls(3),
        ..Config::default()
    })
    .await?;
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("slow", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let job_id = deployed["jobid"].as_str().unwrap_or_default().to_string();
    for poll in 1..=3 {
        let job = ok(&cs, "queryAsyncJobResult", &[("jobid", &job_id)]).await?;
        assert_eq!(job["jobstatus"], 0, "poll {poll}: {job}");
        assert!(job.get("jobresult").is_none());
    }
    let job = ok(&cs, "queryAsyncJobResult", &[("jobid", &job_id)]).await?;
    assert_eq!(job["jobstatus"], 1, "{job}");

    // A failing job: status 2, jobresultcode 530, the error in jobresult; the VM is in Error
    // and keeps its name.
    cs.set_job_latency(JobLatency::duration(Duration::from_millis(50)));
    cs.fail_next_job(JobFailure::deploy(
        534,
        "Unable to start VM: host unavailable",
    ));
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("doomed", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let job = wait_job(&cs, deployed["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 2);
    assert_eq!(job["jobresultcode"], 530);
    assert_eq!(
        job["jobresult"],
        json!({"errorcode": 534, "cserrorcode": 4380, "errortext": "Unable to start VM: host unavailable"})
    );
    assert_eq!(
        cs.vm_named("doomed").map(|vm| vm.state),
        Some(VmState::Error)
    );
    // Any job can be made to fail; a failed createTags tags nothing.
    cs.fail_next_job(JobFailure {
        command: Some("createTags".into()),
        errorcode: 530,
        errortext: "tagging failed".into(),
    });
    let doomed = cs.vm_named("doomed").map(|vm| vm.id).unwrap_or_default();
    let tagged = ok(
        &cs,
        "createTags",
        &[
            ("resourceids", &doomed),
            ("resourcetype", "UserVm"),
            ("tags[0].key", "k"),
            ("tags[0].value", "v"),
        ],
    )
    .await?;
    let job = wait_job(&cs, tagged["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 2, "{job}");
    assert_eq!(job["jobresult"]["errortext"], "tagging failed");
    assert_eq!(cs.vm(&doomed).map(|vm| vm.tags.len()), Some(0));

    // A full zone: insufficient capacity (533) from the job.
    assert!(cs.set_zone_capacity(sample::ZONE_B, Some(1)));
    let first = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("fits", sample::ZONE_B, sample::NET_B),
    )
    .await?;
    let second = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("no-room", sample::ZONE_B, sample::NET_B),
    )
    .await?;
    assert_eq!(
        wait_job(&cs, first["jobid"].as_str().unwrap_or_default()).await?["jobstatus"],
        1
    );
    let job = wait_job(&cs, second["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 2);
    assert_eq!(job["jobresult"]["errorcode"], 533);
    assert_eq!(cs.jobs().iter().filter(|j| j.status == 2).count(), 3);

    // A destroy waits for the deploy it follows.
    cs.set_job_latency(JobLatency::duration(Duration::from_millis(300)));
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("brief", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let vm_id = deployed["id"].as_str().unwrap_or_default().to_string();
    let destroyed = ok(
        &cs,
        "destroyVirtualMachine",
        &[("id", &vm_id), ("expunge", "true")],
    )
    .await?;
    let destroy_job = wait_job(&cs, destroyed["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(destroy_job["jobstatus"], 1);
    let deploy_job = ok(
        &cs,
        "queryAsyncJobResult",
        &[("jobid", deployed["jobid"].as_str().unwrap_or_default())],
    )
    .await?;
    assert_eq!(
        deploy_job["jobstatus"], 1,
        "the deploy finished first: {deploy_job}"
    );
    let again = call(
        &cs,
        &cs.credentials().unwrap_or_else(|| Credentials::new("", "")),
        "destroyVirtualMachine",
        &[("id", &vm_id)],
    )
    .await?;
    assert_eq!(again.status, 431);
    assert!(
        again
            .body
            .contains("Unable to find a virtual machine with specified vmId")
    );
    Ok(())
}

/// `rebootVirtualMachine` as CloudStack answers it: the request queues a job (`{"jobid"}`); the
/// job reboots a Running VM (still Running, a new boot ID, `{"virtualmachine"}`) and fails with
/// 431 and CloudStack's text for one that is not Running or was expunged.
#[tokio::test]
async fn reboot_is_an_async_job_that_needs_a_running_vm() -> Result<()> {
    let cs = Emulator::start(Config {
        job_latency: JobLatency::duration(Duration::from_millis(100)),
        ..Config::default()
    })
    .await?;
    let creds = cs.credentials().unwrap_or_else(|| Credentials::new("", ""));
    let deployed = ok(
        &cs,
        "deployVirtualMachine",
        &deploy_params("rebooted", sample::ZONE_A, sample::NET_A),
    )
    .await?;
    let vm_id = deployed["id"].as_str().unwrap_or_default().to_string();

    // Still Starting: the job refuses it.
    let early = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job = wait_job(&cs, early["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 2, "{job}");
    assert_eq!(job["jobresultcode"], 530);
    assert_eq!(
        job["jobresult"],
        json!({"errorcode": 431, "cserrorcode": 4350,
            "errortext": format!("The Instance {vm_id} (rebooted) is not running, unable to reboot it")})
    );
    wait_job(&cs, deployed["jobid"].as_str().unwrap_or_default()).await?;
    let booted = cs.vm(&vm_id).map(|vm| vm.boot_id).unwrap_or_default();
    assert_eq!(cs.vm(&vm_id).map(|vm| vm.reboots), Some(0));

    // Running: the answer is the job alone; the job's result is the VM, Running, with a new boot.
    let rebooted = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job_id = rebooted["jobid"].as_str().unwrap_or_default().to_string();
    assert_eq!(rebooted.as_object().map(|o| o.len()), Some(1), "{rebooted}");
    let pending = ok(&cs, "queryAsyncJobResult", &[("jobid", &job_id)]).await?;
    assert_eq!(pending["jobstatus"], 0, "{pending}");
    assert_eq!(
        pending["cmd"],
        "org.apache.cloudstack.api.command.user.vm.RebootVMCmd"
    );
    assert_eq!(pending["jobinstancetype"], "VirtualMachine");
    assert_eq!(pending["jobinstanceid"], vm_id.as_str());
    let job = wait_job(&cs, &job_id).await?;
    assert_eq!(job["jobstatus"], 1, "{job}");
    assert_eq!(job["jobresult"]["virtualmachine"]["id"], vm_id.as_str());
    assert_eq!(job["jobresult"]["virtualmachine"]["state"], "Running");
    let vm = cs.vm(&vm_id).context("the VM")?;
    assert_eq!(vm.state, VmState::Running);
    assert_eq!(vm.reboots, 1);
    assert_ne!(vm.boot_id, booted, "a reboot is a new boot");
    let jobs: Vec<_> = cs
        .jobs()
        .into_iter()
        .filter(|j| j.command == "rebootVirtualMachine")
        .collect();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[1].instance_id.as_deref(), Some(vm_id.as_str()));

    // An injected failure fails the job and reboots nothing.
    cs.fail_next_job(JobFailure {
        command: Some("rebootVirtualMachine".into()),
        errorcode: 530,
        errortext: "Failed to reboot vm instance".into(),
    });
    let failed = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job = wait_job(&cs, failed["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(
        job["jobresult"]["errortext"],
        "Failed to reboot vm instance"
    );
    assert_eq!(cs.vm(&vm_id).map(|vm| vm.reboots), Some(1));

    // Parameters: `id` is required and must name a VM.
    let missing = call(&cs, &creds, "rebootVirtualMachine", &[]).await?;
    assert_eq!(missing.status, 431);
    assert_eq!(
        missing.json()?["rebootvirtualmachineresponse"]["errortext"],
        "Unable to execute API command rebootvirtualmachine due to missing parameter id"
    );
    let unknown = call(
        &cs,
        &creds,
        "rebootVirtualMachine",
        &[("id", "00000000-0000-4000-8000-000000000000")],
    )
    .await?;
    assert_eq!(unknown.status, 431);
    assert!(
        unknown.body.contains("Invalid parameter id value="),
        "{}",
        unknown.body
    );

    // Destroyed (not expunged): the job refuses it; expunged: the VM is not found.
    let destroyed = ok(&cs, "destroyVirtualMachine", &[("id", &vm_id)]).await?;
    wait_job(&cs, destroyed["jobid"].as_str().unwrap_or_default()).await?;
    let refused = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job = wait_job(&cs, refused["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobstatus"], 2);
    assert_eq!(job["jobresult"]["errorcode"], 431);
    assert!(
        job["jobresult"]["errortext"]
            .as_str()
            .is_some_and(|t| t.ends_with("is not running, unable to reboot it")),
        "{job}"
    );
    let expunged = ok(
        &cs,
        "destroyVirtualMachine",
        &[("id", &vm_id), ("expunge", "true")],
    )
    .await?;
    wait_job(&cs, expunged["jobid"].as_str().unwrap_or_default()).await?;
    let gone = ok(&cs, "rebootVirtualMachine", &[("id", &vm_id)]).await?;
    let job = wait_job(&cs, gone["jobid"].as_str().unwrap_or_default()).await?;
    assert_eq!(job["jobresult"]["errorcode"], 431);
    assert_eq!(
        job["jobresult"]["errortext"],
        format!("Unable to find a virtual machine with id {vm_id}")
    );
    Ok(())
}
