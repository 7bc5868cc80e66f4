//! The exports' logic against a small stateful fake cloud (the real emulator is exercised by the
//! host's e2e tests): VMs that start through async jobs, zone capacity, tags, expunge, reboots.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use capstan_provider_sdk::{KeyValue, Requirement, Resource};
use serde_json::{Value, json};

use super::*;
use crate::api::response::Raw;
use crate::catalog::tests::{PARAMS, cloud};
use crate::client::TransportError;
use crate::client::fake::{Params, client, error, get, ok};

type Answer = Box<dyn FnMut(&str, &Params) -> Result<Raw, TransportError>>;
type Job = (u32, Result<Value, (u16, String)>, Effect);

#[derive(Default)]
struct Sim {
    vms: Vec<Value>,
    /// job id -> (polls left, result: Ok(value) or Err((code, text)), effect on completion)
    jobs: HashMap<String, Job>,
    capacity: HashMap<String, usize>,
    fail_next_deploy: Option<(u16, String)>,
    /// The next `rebootVirtualMachine`'s job fails with this.
    fail_next_reboot: Option<(u16, String)>,
    /// The next `rebootVirtualMachine` is refused at once with this.
    refuse_next_reboot: Option<(u16, String)>,
    /// Reboots done, per VM.
    reboots: HashMap<String, u32>,
    next: u32,
}

#[derive(Clone)]
enum Effect {
    None,
    Run(String),
    Error(String),
    Expunge(String),
    Reboot(String),
}

#[derive(Default)]
struct Store(RefCell<BTreeMap<String, Vec<u8>>>);

impl super::Store for Store {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.0.borrow().get(key).cloned()
    }
    fn set(&self, key: &str, value: &[u8], _ttl: Duration) {
        self.0.borrow_mut().insert(key.to_string(), value.to_vec());
    }
}

fn tags_of(p: &Params) -> Vec<(String, String)> {
    let mut out = BTreeMap::new();
    for (k, v) in p {
        if let Some(rest) = k.strip_prefix("tags[")
            && let Some((i, field)) = rest.split_once("].")
        {
            let e = out
                .entry(i.parse::<u32>().unwrap())
                .or_insert((String::new(), String::new()));
            if field == "key" {
                e.0 = v.clone();
            } else {
                e.1 = v.clone();
            }
        }
    }
    out.into_values().collect()
}

impl Sim {
    fn id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}-{}", self.next)
    }

    fn complete(&mut self, effect: &Effect) {
        match effect {
            Effect::None => {}
            Effect::Run(id) | Effect::Error(id) => {
                let state = if matches!(effect, Effect::Run(_)) {
                    "Running"
                } else {
                    "Error"
                };
                if let Some(vm) = self.vms.iter_mut().find(|v| v["id"] == *id) {
                    vm["state"] = json!(state);
                }
            }
            Effect::Expunge(id) => self.vms.retain(|v| v["id"] != *id),
            Effect::Reboot(id) => *self.reboots.entry(id.clone()).or_default() += 1,
        }
    }

    fn answer(&mut self, cmd: &str, p: &Params) -> Result<Raw, TransportError> {
        let c = cloud();
        match cmd {
            "listZones" => ok(cmd, json!({"count": 2, "zone": c.zones})),
            "listServiceOfferings" => ok(
                cmd,
                json!({"count": 5, "serviceoffering": c.service_offerings}),
            ),
            "listTemplates" => ok(cmd, json!({"count": 5, "template": c.templates})),
            "listNetworks" => ok(cmd, json!({"count": 3, "network": c.networks})),
            "deployVirtualMachine" => {
                let zone = get(p, "zoneid").unwrap().to_string();
                let name = get(p, "name").unwrap().to_string();
                if self
                    .vms
                    .iter()
                    .any(|v| v["name"] == name && v["zoneid"] == zone)
                {
                    return error(cmd, 431, "The vm with hostName already exists");
                }
                let id = self.id("vm");
                let offering = c
                    .service_offerings
                    .iter()
                    .find(|o| Some(o.id.as_str()) == get(p, "serviceofferingid"))
                    .unwrap();
                let zone_name = c.zones.iter().find(|z| z.id == zone).unwrap().name.clone();
                self.vms.push(json!({
                    "id": id, "name": name, "state": "Starting", "zoneid": zone, "zonename": zone_name,
                    "templateid": get(p, "templateid"), "serviceofferingid": offering.id,
                    "serviceofferingname": offering.name, "cpunumber": offering.cpu_number,
                    "memory": offering.memory, "nic": [{"networkid": get(p, "networkids")}],
                    "tags": [], "created": "2026-01-02T03:04:05+0000",
                }));
                let running = self
                    .vms
                    .iter()
                    .filter(|v| v["zoneid"] == zone && v["state"] != "Error")
                    .count()
                    - 1;
                let full = self.capacity.get(&zone).is_some_and(|c| running >= *c);
                let failure = if full {
                    Some((533, "Unable to create a deployment for VM".to_string()))
                } else {
                    self.fail_next_deploy.take()
                };
                let job = self.id("job");
                let entry = match failure {
                    Some(f) => (1, Err(f), Effect::Error(id.clone())),
                    None => (1, Ok(json!({})), Effect::Run(id.clone())),
                };
                self.jobs.insert(job.clone(), entry);
                ok(cmd, json!({"id": id, "jobid": job}))
            }
            "createTags" => {
                let id = get(p, "resourceids").unwrap();
                let tags = tags_of(p);
                let vm = self.vms.iter_mut().find(|v| v["id"] == id).unwrap();
                // As CloudStack: a key the VM has already is refused.
                if let Some((k, _)) = tags.iter().find(|(k, _)| {
                    vm["tags"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|t| t["key"] == *k)
                }) {
                    return error(cmd, 431, &format!("tag {k} already on UserVm with id {id}"));
                }
                for (k, v) in tags {
                    vm["tags"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"key": k, "value": v}));
                }
                let job = self.id("job");
                self.jobs
                    .insert(job.clone(), (0, Ok(json!({"success": true})), Effect::None));
                ok(cmd, json!({"jobid": job}))
            }
            "deleteTags" => {
                let id = get(p, "resourceids").unwrap();
                let tags = tags_of(p);
                let vm = self.vms.iter_mut().find(|v| v["id"] == id).unwrap();
                vm["tags"].as_array_mut().unwrap().retain(|t| {
                    !tags
                        .iter()
                        .any(|(k, v)| t["key"] == *k && (v.is_empty() || t["value"] == *v))
                });
                let job = self.id("job");
                self.jobs
                    .insert(job.clone(), (0, Ok(json!({"success": true})), Effect::None));
                ok(cmd, json!({"jobid": job}))
            }
            "rebootVirtualMachine" => {
                let id = get(p, "id").unwrap().to_string();
                if let Some((code, text)) = self.refuse_next_reboot.take() {
                    return error(cmd, code, &text);
                }
                let Some(running) = self
                    .vms
                    .iter()
                    .find(|v| v["id"] == id)
                    .map(|vm| vm["state"] == "Running")
                else {
                    return error(cmd, 431, "entity does not exist");
                };
                let job = self.id("job");
                let entry = if !running {
                    (
                        1,
                        Err((431, "is not running, unable to reboot it".into())),
                        Effect::None,
                    )
                } else if let Some(failure) = self.fail_next_reboot.take() {
                    (1, Err(failure), Effect::None)
                } else {
                    (1, Ok(json!({})), Effect::Reboot(id))
                };
                self.jobs.insert(job.clone(), entry);
                ok(cmd, json!({"jobid": job}))
            }
            "destroyVirtualMachine" => {
                assert_eq!(get(p, "expunge"), Some("true"));
                let id = get(p, "id").unwrap().to_string();
                if !self.vms.iter().any(|v| v["id"] == id) {
                    return error(cmd, 431, "entity does not exist");
                }
                let job = self.id("job");
                self.jobs
                    .insert(job.clone(), (1, Ok(json!({})), Effect::Expunge(id)));
                ok(cmd, json!({"jobid": job}))
            }
            "queryAsyncJobResult" => {
                let id = get(p, "jobid").unwrap().to_string();
                let (left, result, effect) = self.jobs.get_mut(&id).unwrap();
                if *left > 0 {
                    *left -= 1;
                    return ok(cmd, json!({"jobstatus": 0}));
                }
                let (result, effect) = (result.clone(), effect.clone());
                self.complete(&effect);
                self.jobs.get_mut(&id).unwrap().2 = Effect::None;
                match result {
                    Ok(mut v) => {
                        if let Effect::Run(vm) | Effect::Reboot(vm) = &effect {
                            v = json!({"virtualmachine": self.vms.iter().find(|x| x["id"] == *vm).unwrap()});
                        }
                        ok(cmd, json!({"jobstatus": 1, "jobresult": v}))
                    }
                    Err((code, text)) => ok(
                        cmd,
                        json!({"jobstatus": 2, "jobresult": {"errorcode": code, "errortext": text}}),
                    ),
                }
            }
            "listVirtualMachines" => {
                let wanted = tags_of(p);
                let items: Vec<&Value> = self
                    .vms
                    .iter()
                    .filter(|v| get(p, "id").is_none_or(|id| v["id"] == id))
                    .filter(|v| {
                        get(p, "name").is_none_or(|n| v["name"].as_str().unwrap().contains(n))
                    })
                    .filter(|v| {
                        wanted.iter().all(|(k, val)| {
                            v["tags"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|t| t["key"] == *k && t["value"] == *val)
                        })
                    })
                    .collect();
                if items.is_empty() {
                    ok(cmd, json!({}))
                } else {
                    ok(cmd, json!({"count": items.len(), "virtualmachine": items}))
                }
            }
            other => panic!("unexpected command {other}"),
        }
    }
}

fn claim(name: &str, reqs: Vec<Requirement>, requests: Vec<Resource>) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        node_pool_name: Some("default".into()),
        labels: vec![KeyValue::new("karpenter.sh/nodepool", "default")],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: reqs,
        requests,
        provider_id: None,
        image_id: None,
        node_name: None,
        capacity: vec![],
        allocatable: vec![],
        created_at: None,
    }
}

struct World {
    sim: Rc<RefCell<Sim>>,
    store: Store,
}

impl World {
    fn new() -> Self {
        Self {
            sim: Rc::new(RefCell::new(Sim::default())),
            store: Store::default(),
        }
    }

    /// Runs `f` with fresh Ops (a fresh call), returning its result and the commands it sent.
    fn call<R>(
        &self,
        f: impl FnOnce(
            &mut Ops<
                '_,
                crate::client::fake::FakeCloud<Answer>,
                crate::client::fake::FakeClock,
                Store,
            >,
        ) -> R,
    ) -> (R, Vec<String>) {
        let sim = Rc::clone(&self.sim);
        let answer: Answer = Box::new(move |cmd, p| sim.borrow_mut().answer(cmd, p));
        let (mut c, log) = client(answer);
        let mut ops = Ops {
            client: &mut c,
            store: &self.store,
            scope: "endpoint key".into(),
            cluster: "prod".into(),
        };
        let r = f(&mut ops);
        let cmds = log.borrow().iter().map(|(c, _)| c.clone()).collect();
        (r, cmds)
    }
}

fn params() -> Parameters {
    Parameters::parse(PARAMS).unwrap()
}

#[test]
fn create_deploys_the_cheapest_fitting_offering_tags_it_and_is_idempotent() {
    let w = World::new();
    let c = claim("default-abc12", vec![], vec![Resource::new("cpu", "1500m")]);
    let (launched, cmds) = w.call(|ops| ops.create(&params(), "cs", &c));
    let launched = launched.unwrap();
    assert_eq!(
        lookup(&launched.labels, labels::INSTANCE_TYPE),
        Some("medium")
    );
    assert_eq!(lookup(&launched.labels, labels::ZONE), Some("zone-a"));
    let pid = launched.provider_id.clone().unwrap();
    assert!(pid.starts_with("cloudstack://za-id/vm-"), "{pid}");
    assert_eq!(
        cmds,
        vec![
            "listZones",
            "listServiceOfferings",
            "listTemplates",
            "listNetworks",
            "listVirtualMachines",
            "deployVirtualMachine",
            "createTags",
            "queryAsyncJobResult",
            "queryAsyncJobResult",
            "queryAsyncJobResult",
        ]
    );
    {
        let sim = w.sim.borrow();
        let vm = &sim.vms[0];
        let tags = vm["tags"].as_array().unwrap();
        let tag = |k: &str| {
            tags.iter()
                .find(|t| t["key"] == k)
                .map(|t| t["value"].as_str().unwrap().to_string())
        };
        assert_eq!(tag(tags::NODE_CLAIM).as_deref(), Some("default-abc12"));
        assert_eq!(tag(tags::NODE_POOL).as_deref(), Some("default"));
        assert_eq!(tag(tags::CLUSTER).as_deref(), Some("prod"));
    }
    // A second create (a retry) finds the VM: the cloud is cached, no deploy.
    let (again, cmds) = w.call(|ops| ops.create(&params(), "cs", &c));
    assert_eq!(again.unwrap().provider_id.unwrap(), pid);
    assert_eq!(cmds, vec!["listVirtualMachines"]);
    assert_eq!(w.sim.borrow().vms.len(), 1);

    // get, list, drift.
    let (got, _) = w.call(|ops| ops.get(&pid));
    assert_eq!(got.unwrap().name, "default-abc12");
    let (all, cmds) = w.call(|ops| ops.list());
    assert_eq!(all.unwrap().len(), 1);
    assert_eq!(cmds, vec!["listVirtualMachines"], "one call, no listTags");
    let (drifted, _) = w.call(|ops| ops.is_drifted(&params(), &launched));
    assert_eq!(drifted.unwrap(), None);
    let changed = Parameters::parse(&PARAMS.replacen('{', r#"{"userData":"new","#, 1)).unwrap();
    let (drifted, _) = w.call(|ops| ops.is_drifted(&changed, &launched));
    assert_eq!(drifted.unwrap().as_deref(), Some(drift::NODE_CLASS_DRIFTED));

    // delete expunges, then reports not-found.
    let (deleted, cmds) = w.call(|ops| ops.delete(&launched));
    assert!(
        matches!(deleted, Err(ProviderError::NotFound(_))),
        "{deleted:?}"
    );
    assert!(cmds.contains(&"destroyVirtualMachine".to_string()));
    assert!(w.sim.borrow().vms.is_empty());
    let (again, _) = w.call(|ops| ops.delete(&launched));
    assert!(matches!(again, Err(ProviderError::NotFound(_))));
    let (got, _) = w.call(|ops| ops.get(&pid));
    assert!(matches!(got, Err(ProviderError::NotFound(_))));
}

#[test]
fn insufficient_capacity_in_one_zone_falls_to_the_next() {
    let w = World::new();
    w.sim.borrow_mut().capacity.insert("za-id".into(), 0);
    let c = claim("default-x1", vec![], vec![]);
    let (launched, cmds) = w.call(|ops| ops.create(&params(), "cs", &c));
    let launched = launched.unwrap();
    assert_eq!(lookup(&launched.labels, labels::ZONE), Some("zone-b"));
    assert_eq!(
        lookup(&launched.labels, labels::INSTANCE_TYPE),
        Some("small")
    );
    assert_eq!(lookup(&launched.labels, labels::ARCH), Some("amd64"));
    let deploys = cmds.iter().filter(|c| *c == "deployVirtualMachine").count();
    assert_eq!(
        deploys, 2,
        "zone-a once (its arm64 template is not tried there again), then zone-b"
    );
    assert_eq!(
        w.sim.borrow().vms.len(),
        1,
        "the failed VM in zone-a was expunged"
    );
    // The host sees small in zone-a as unavailable for a while.
    let (catalog, _) = w.call(|ops| ops.catalog(&params()));
    let all = capstan_provider_sdk::catalog::expand(&catalog.unwrap()).unwrap();
    let small = all.iter().find(|t| t.name == "small").unwrap();
    assert!(!small.offerings[0].available && small.offerings[1].available);

    // Both zones full: insufficient capacity naming the attempts.
    w.sim.borrow_mut().capacity.insert("zb-id".into(), 1);
    let (err, _) = w.call(|ops| {
        ops.create(
            &params(),
            "cs",
            &claim(
                "default-x2",
                vec![Requirement::in_(labels::INSTANCE_TYPE, ["small", "medium"])],
                vec![],
            ),
        )
    });
    match err {
        Err(ProviderError::InsufficientCapacity(m)) => assert!(m.contains("533"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.sim.borrow().vms.len(), 1, "nothing leaked");
}

#[test]
fn a_failed_job_is_a_create_failure_with_its_reason_and_leaks_nothing() {
    let w = World::new();
    w.sim.borrow_mut().fail_next_deploy = Some((530, "Host lost during deployment".into()));
    let (err, _) = w.call(|ops| ops.create(&params(), "cs", &claim("default-f1", vec![], vec![])));
    match err {
        Err(ProviderError::CreateFailed(f)) => {
            assert_eq!(f.reason, "CloudStackJobFailed");
            assert!(
                f.message.contains("Host lost during deployment"),
                "{}",
                f.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(w.sim.borrow().vms.is_empty());
    // The retry launches.
    let (ok, _) = w.call(|ops| ops.create(&params(), "cs", &claim("default-f1", vec![], vec![])));
    assert!(ok.is_ok());
}

#[test]
fn nothing_fitting_is_insufficient_capacity() {
    let w = World::new();
    let (err, _) = w.call(|ops| {
        ops.create(
            &params(),
            "cs",
            &claim("default-big", vec![], vec![Resource::new("cpu", "64")]),
        )
    });
    assert!(
        matches!(err, Err(ProviderError::InsufficientCapacity(_))),
        "{err:?}"
    );
}

/// A launched VM's claim (as the host holds it) in a fresh world.
fn launched(w: &World, name: &str) -> NodeClaim {
    let (launched, _) = w.call(|ops| ops.create(&params(), "cs", &claim(name, vec![], vec![])));
    launched.unwrap()
}

fn reboot_tag(w: &World) -> Option<String> {
    let sim = w.sim.borrow();
    sim.vms[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == tags::REBOOT_OPERATION)
        .map(|t| t["value"].as_str().unwrap().to_string())
}

fn reboots(w: &World) -> u32 {
    let sim = w.sim.borrow();
    let id = sim.vms[0]["id"].as_str().unwrap().to_string();
    sim.reboots.get(&id).copied().unwrap_or(0)
}

#[test]
fn reboot_tags_the_operation_first_and_reboots_once_per_operation() {
    let w = World::new();
    let c = launched(&w, "default-r1");
    let (rebooted, cmds) = w.call(|ops| ops.reboot(&c, "op-1"));
    assert_eq!(rebooted, Ok(()));
    assert_eq!(
        cmds,
        vec![
            "listVirtualMachines",
            "createTags",
            "queryAsyncJobResult",
            "rebootVirtualMachine",
            "queryAsyncJobResult",
            "queryAsyncJobResult",
        ],
        "the tag before the reboot"
    );
    assert_eq!(reboots(&w), 1);
    assert_eq!(reboot_tag(&w).as_deref(), Some("op-1"));

    // The same operation again (a retry after a timeout): no second reboot.
    let (again, cmds) = w.call(|ops| ops.reboot(&c, "op-1"));
    assert_eq!(again, Ok(()));
    assert_eq!(cmds, vec!["listVirtualMachines"]);
    assert_eq!(reboots(&w), 1);

    // Another operation reboots again, replacing the recorded one.
    let (other, cmds) = w.call(|ops| ops.reboot(&c, "op-2"));
    assert_eq!(other, Ok(()));
    assert_eq!(
        &cmds[..4],
        [
            "listVirtualMachines",
            "deleteTags",
            "queryAsyncJobResult",
            "createTags"
        ]
    );
    assert_eq!(reboots(&w), 2);
    assert_eq!(reboot_tag(&w).as_deref(), Some("op-2"));
}

#[test]
fn a_reboot_that_did_not_start_may_be_asked_again() {
    let w = World::new();
    let c = launched(&w, "default-r2");
    // The job fails on CloudStack's side: retryable, and the tag is gone.
    w.sim.borrow_mut().fail_next_reboot = Some((530, "Failed to reboot vm instance".into()));
    let (failed, _) = w.call(|ops| ops.reboot(&c, "op"));
    match failed {
        Err(RebootError::Retryable(m)) => {
            assert!(m.contains("Failed to reboot vm instance"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(reboot_tag(&w), None);
    assert_eq!(reboots(&w), 0);
    // Throttled at once: retryable, nothing started.
    w.sim.borrow_mut().refuse_next_reboot = Some((429, "too many requests".into()));
    let (throttled, _) = w.call(|ops| ops.reboot(&c, "op"));
    assert!(
        matches!(throttled, Err(RebootError::Retryable(_))),
        "{throttled:?}"
    );
    assert_eq!(reboot_tag(&w), None);
    // The same operation now reboots.
    let (ok, _) = w.call(|ops| ops.reboot(&c, "op"));
    assert_eq!(ok, Ok(()));
    assert_eq!(reboots(&w), 1);
    // CloudStack refusing it (431) is final.
    w.sim.borrow_mut().refuse_next_reboot =
        Some((431, "is not running, unable to reboot it".into()));
    let (refused, _) = w.call(|ops| ops.reboot(&c, "op-3"));
    match refused {
        Err(RebootError::Failed(m)) => {
            assert!(m.starts_with("CloudStackInvalidParameter: "), "{m}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_a_running_vm_reboots_and_a_gone_one_is_not_found() {
    let w = World::new();
    let c = launched(&w, "default-r3");
    for (state, retryable) in [
        ("Stopped", false),
        ("Error", false),
        ("Destroyed", false),
        ("Starting", true),
    ] {
        w.sim.borrow_mut().vms[0]["state"] = json!(state);
        let (answer, cmds) = w.call(|ops| ops.reboot(&c, "op"));
        match (answer, retryable) {
            (Err(RebootError::Retryable(m)), true) | (Err(RebootError::Failed(m)), false) => {
                assert!(m.contains(state), "{m}")
            }
            (other, _) => panic!("{state}: {other:?}"),
        }
        assert_eq!(
            cmds,
            vec!["listVirtualMachines"],
            "{state}: nothing tagged or rebooted"
        );
    }
    assert_eq!(reboot_tag(&w), None);
    w.sim.borrow_mut().vms[0]["state"] = json!("Running");

    // Expunged: not found; so is a claim without a (CloudStack) provider ID.
    let (deleted, _) = w.call(|ops| ops.delete(&c));
    assert!(matches!(deleted, Err(ProviderError::NotFound(_))));
    let (gone, _) = w.call(|ops| ops.reboot(&c, "op"));
    assert!(matches!(gone, Err(RebootError::NotFound(_))), "{gone:?}");
    let bare = claim("default-r3", vec![], vec![]);
    let (none, cmds) = w.call(|ops| ops.reboot(&bare, "op"));
    assert!(matches!(none, Err(RebootError::NotFound(_))), "{none:?}");
    assert!(cmds.is_empty());
    let other = NodeClaim {
        provider_id: Some("kwok://node-1".into()),
        ..bare
    };
    let (foreign, _) = w.call(|ops| ops.reboot(&other, "op"));
    assert!(
        matches!(foreign, Err(RebootError::NotFound(_))),
        "{foreign:?}"
    );
}

#[test]
fn reboot_errors_say_whether_asking_again_can_help() {
    let cs = |code| ApiError::CloudStack {
        command: "rebootVirtualMachine".into(),
        code,
        cs_code: None,
        text: "t".into(),
    };
    for code in [401, 431, 432] {
        assert!(
            matches!(reboot_error(cs(code)), RebootError::Failed(_)),
            "{code}"
        );
    }
    for code in [429, 530, 534] {
        assert!(
            matches!(reboot_error(cs(code)), RebootError::Retryable(_)),
            "{code}"
        );
    }
    let denied = ApiError::Denied {
        authority: "evil:443".into(),
        detail: "HTTP-request-denied".into(),
    };
    assert!(matches!(reboot_error(denied), RebootError::Failed(_)));
    let unreachable = ApiError::Transport {
        command: "rebootVirtualMachine".into(),
        authority: "cs:8080".into(),
        detail: "connection refused".into(),
    };
    assert!(matches!(
        reboot_error(unreachable),
        RebootError::Retryable(_)
    ));
    assert!(matches!(
        reboot_error(ApiError::Config("no api-key".into())),
        RebootError::Retryable(_)
    ));
}
