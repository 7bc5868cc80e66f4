//! The Jobs hold, live: a NodePool with `capstan.dev/wait-for-jobs` keeps a node while a Job's
//! pod runs on it. The node drifts and stays; its claim names the Job (the `DisruptionBlocked`
//! Event, the `ConsolidationBlocked` verdict `JobRunning`) and `capstan explain` says the same;
//! once the Job's pod completes, the node goes.
//!
//! kwok's default stages complete a Job's pod the moment it runs, so this test runs a control
//! plane of its own whose kwok completes a Job's pod only once the pod no longer has the
//! [`KEEP_RUNNING`] annotation: the test decides when the Job finishes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capstan_test_support::{ControlPlane, Options, bin_dir, repo_root, unique_name, wait_until};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::consolidation::{Scene, on_demand, pool};
use crate::disruption::{GROUP, patch_pool, pods, wait_running};
use crate::lifecycle::{self, Host, Names, RUN_LABEL, events, node_class};
use crate::provisioner::{claims, teardown};
use crate::verdict::{claim_of, explain, wait_verdict};

/// While a pod has this annotation, this test's kwok keeps it running, even a Job's.
const KEEP_RUNNING: &str = "e2e.capstan.dev/keep-running";
const WAIT_FOR_JOBS: &str = "capstan.dev/wait-for-jobs";
const DISRUPTION_ANNOTATION: &str = "capstan.dev/disruption";

/// A kwok that completes a Job's pod only once the pod has no [`KEEP_RUNNING`] annotation: a
/// script in `dir` that adds that requirement to the `pod-complete` Stage of the configuration
/// the control plane hands kwok (the one selector naming `Job`), then runs the control plane's
/// kwok. It refuses to start if it finds no such Stage.
fn kwok_holding_jobs(dir: &Path) -> PathBuf {
    let kwok = bin_dir().expect("control plane binaries").join("kwok");
    let gate = dir.join("keep-running.yaml");
    std::fs::write(
        &gate,
        format!(
            "    - key: '.metadata.annotations[\"{KEEP_RUNNING}\"]'\n      operator: 'DoesNotExist'\n"
        ),
    )
    .unwrap();
    let stages = dir.join("stages.yaml");
    let script = dir.join("kwok");
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/env bash
set -euo pipefail
args=()
while (($#)); do
  if [[ "$1" == --config ]]; then
    sed "/^      - 'Job'\$/r {gate}" "$2" >"{stages}"
    if [[ "$(grep -c '{KEEP_RUNNING}' "{stages}")" != 1 ]]; then
      echo "kwok for job_hold: no single pod-complete Stage selecting Job pods in $2" >&2
      exit 1
    fi
    args+=(--config "{stages}")
    shift 2
    continue
  fi
  args+=("$1")
  shift
done
exec "{kwok}" "${{args[@]}}"
"#,
            gate = gate.display(),
            stages = stages.display(),
            kwok = kwok.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// Stops the test's own control plane when the test ends, passed or not.
struct Stop(&'static ControlPlane);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Err(err) = self.0.stop() {
            eprintln!("stopping the job_hold control plane: {err}");
        }
    }
}

/// The pod `name` of namespace `ns`, if it is there.
async fn pod(client: &Client, ns: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Whether node `node` is there and nothing is taking it away: not deleted, its claim not being
/// disrupted or deleted.
async fn undisturbed(scene: &Scene, node: &str) -> bool {
    let live = Api::<Node>::all(scene.client.clone())
        .get_opt(node)
        .await
        .unwrap()
        .is_some_and(|n| n.metadata.deletion_timestamp.is_none());
    let claim = claim_of(&scene.client, &scene.names, node).await;
    live && claim.is_some_and(|c| !c.annotations().contains_key(DISRUPTION_ANNOTATION))
}

/// A Job's pod runs on a node of a pool with `wait-for-jobs`: the claim's verdict is
/// `JobRunning`, naming the Job and its pod. The pool's template changes: the node drifts, and
/// stays, its claim's `DisruptionBlocked` Event naming the Job; `capstan explain` gives the same
/// verdict and nothing for the host to do next. Once the Job's pod completes, the node goes —
/// never before.
#[tokio::test]
async fn a_running_job_holds_its_drifted_node_until_it_completes() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(unique_name("job-hold"));
    std::fs::create_dir_all(&dir).unwrap();
    let options = Options {
        extra_args: vec![
            "--kwok-bin".into(),
            kwok_holding_jobs(&dir).display().to_string(),
        ],
        ..Options::default()
    };
    let cp: &'static ControlPlane = Box::leak(Box::new(
        ControlPlane::start(options)
            .await
            .expect("a control plane with the Job-holding kwok"),
    ));
    let _stop = Stop(cp);
    cp.install_crds_from_dir(&repo_root().join("crds"))
        .await
        .expect("install CRDs");
    let client = cp.client().unwrap();
    let names = Names::new("jobhold");
    let host = Host::start(
        cp,
        &names,
        &[
            "--batch-idle-duration",
            "500ms",
            "--consolidation-validation-delay",
            "2s",
        ],
    );
    let class = names.name("nc");
    node_class(&client, &names, &class, "kwok", json!({"maxCpu": 2})).await;
    let ns = cp.create_namespace_unique("jobhold").await.unwrap();
    let scene = Scene {
        cp,
        client,
        names,
        host,
        class,
        ns,
    };
    let Scene {
        client,
        names,
        host,
        class,
        ns,
        ..
    } = &scene;
    let p = names.name("p");
    pool(
        client,
        names,
        (&p, class),
        on_demand(),
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s",
               "budgets": [{"nodes": "100%"}]}),
    )
    .await;
    patch_pool(
        client,
        &p,
        json!({"metadata": {"annotations": {WAIT_FOR_JOBS: "true"}}}),
    )
    .await;

    // The Job: one 1500m pod on a 2-cpu node, kept running.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "batch", "labels": {RUN_LABEL: names.run}},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {RUN_LABEL: names.run}, "annotations": {KEEP_RUNNING: "true"}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {GROUP: p},
                "containers": [{"name": "work", "image": "fake",
                                "resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}],
            }}},
    }))
    .unwrap();
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    wait_running(client, host, ns, 1, Duration::from_secs(300)).await;
    let running = pods(client, ns).await;
    let job_pod = running[0].name_any();
    let node = running[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    let (job_named, pod_named) = (format!("Job {ns}/batch"), format!("pod {ns}/{job_pod}"));

    // The verdict names the Job and its pod.
    let message = wait_verdict(&scene, &node, "JobRunning", Duration::from_secs(90)).await;
    assert!(
        message.contains(&job_named) && message.contains(&pod_named),
        "{message}"
    );

    // The template changes: the claim drifts, and the Job holds it.
    patch_pool(
        client,
        &p,
        json!({"spec": {"template": {"metadata": {"labels": {"e2e.capstan.dev/rev": "2"}}}}}),
    )
    .await;
    let claim = wait_until(Duration::from_secs(60), "the claim Drifted", || async {
        host.check_alive();
        let claim = claim_of(client, names, &node).await;
        Ok::<_, kube::Error>(claim.filter(|c| {
            lifecycle::condition(c, "Drifted").is_some_and(|(status, _)| status == "True")
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let claim_name = claim.name_any();
    let note = wait_until(
        Duration::from_secs(60),
        "the claim's DisruptionBlocked Event",
        || async {
            host.check_alive();
            let notes: Vec<String> = events(client, "default", &claim_name, "DisruptionBlocked")
                .await
                .into_iter()
                .filter_map(|e| e.note)
                .collect();
            Ok::<_, kube::Error>(notes.into_iter().find(|n| n.contains(&job_named)))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    assert!(note.contains(&pod_named), "{note}");

    // explain: the same verdict, and nothing for the host to do in the pool.
    let answer = explain(&scene, &["node", &node]);
    assert_eq!(answer["verdict"]["blocked"], true, "{answer}");
    assert_eq!(answer["verdict"]["reason"], "JobRunning", "{answer}");
    let said = answer["verdict"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains(&job_named) && said.contains(&pod_named),
        "{answer}"
    );
    assert!(
        answer["verdict"]["unblock"]
            .as_str()
            .unwrap_or_default()
            .contains(WAIT_FOR_JOBS),
        "{answer}"
    );
    assert_eq!(
        answer["pods"],
        json!([format!("{ns}/{job_pod}")]),
        "{answer}"
    );
    let pool_answer = explain(&scene, &["nodepool", &p]);
    assert_eq!(pool_answer["byReason"]["JobRunning"], 1, "{pool_answer}");
    assert_eq!(pool_answer["next"]["action"], "none", "{pool_answer}");

    // Held: many disruption passes later the drifted node is still there, undisturbed, with no
    // replacement, and the Job's pod still runs on it.
    tokio::time::sleep(Duration::from_secs(15)).await;
    host.check_alive();
    assert!(
        undisturbed(&scene, &node).await,
        "the drifted node of a running Job was disrupted\n{}",
        host.log_tail()
    );
    assert_eq!(claims(client, names).await.len(), 1, "no replacement");
    let still = pod(client, ns, &job_pod).await.unwrap();
    assert_eq!(phase(&still), "Running");
    assert_eq!(
        still.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str())
    );

    // The Job's pod may finish now: the node goes, and not before the pod has.
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(
            &job_pod,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {KEEP_RUNNING: null}}})),
        )
        .await
        .unwrap();
    let released = Instant::now();
    let finished = std::sync::Mutex::new(None);
    let disruption = std::sync::Mutex::new(None);
    wait_until(Duration::from_secs(180), "the Job's node to go", || {
        let (finished, disruption, node, job_pod) = (&finished, &disruption, &node, &job_pod);
        let scene = &scene;
        async move {
            scene.host.check_alive();
            // Read the pod before the node: a node seen going was taken after this reading.
            if let Some(p) = pod(&scene.client, &scene.ns, job_pod).await
                && phase(&p) == "Succeeded"
            {
                finished.lock().unwrap().get_or_insert(released.elapsed());
            }
            if let Some(c) = claim_of(&scene.client, &scene.names, node).await
                && let Some(why) = c.annotations().get(DISRUPTION_ANNOTATION)
            {
                disruption.lock().unwrap().get_or_insert(why.clone());
            }
            if undisturbed(scene, node).await {
                return Ok::<_, kube::Error>(None);
            }
            assert!(
                finished.lock().unwrap().is_some(),
                "the node was taken while the Job's pod still ran\n{}",
                scene.host.log_tail()
            );
            Ok(Some(()))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", host.log_tail()));
    let went = released.elapsed();
    wait_until(Duration::from_secs(30), "the Job succeeded", || async {
        let job = jobs.get("batch").await?;
        Ok::<_, kube::Error>((job.status.and_then(|s| s.succeeded) == Some(1)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "held after drift: {note:?}; the Job's pod finished {:?} after its release, and its node \
         went {:?} after the release ({})",
        finished.lock().unwrap().unwrap_or_default(),
        went,
        disruption
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_else(|| "deleted".into()),
    );
    host.check_alive();
    teardown(client, names, ns).await;
}
