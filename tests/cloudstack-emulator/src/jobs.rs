//! Async jobs: pending (status 0) until their latency has passed, then success (1) with the
//! result object or failure (2) with `errorcode`/`errortext`. Completing a job changes the
//! state (a VM boots, errors, reboots, is destroyed or expunged; tags apply) and yields the Node
//! work that follows.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::api::error::{ApiError, INTERNAL_ERROR, PARAM_ERROR};
use crate::api::vms::{not_running_text, vm_gone_text, vm_json};
use crate::catalog::Tag;
use crate::faults::{JobFailure, JobLatency};
use crate::nodes::NodeAction;
use crate::state::{State, VmState, timestamp};

/// What a job does when it completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobWork {
    Deploy {
        vm_id: String,
    },
    Destroy {
        vm_id: String,
        expunge: bool,
    },
    Reboot {
        vm_id: String,
    },
    CreateTags {
        resource_ids: Vec<String>,
        tags: Vec<Tag>,
    },
    /// Tags with an empty value match any value.
    DeleteTags {
        resource_ids: Vec<String>,
        tags: Vec<Tag>,
    },
}

/// A job's status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum JobStatus {
    Pending,
    Succeeded(Value),
    Failed(JobFailure),
}

/// An async job.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub id: String,
    pub command: String,
    pub work: JobWork,
    pub created: String,
    pub started: Instant,
    pub queries: u32,
    pub latency: JobLatency,
    pub planned_failure: Option<JobFailure>,
    pub status: JobStatus,
    pub completed: Option<String>,
}

/// A job as tests see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSnapshot {
    /// UUID.
    pub id: String,
    /// The command that started it.
    pub command: String,
    /// 0 pending, 1 succeeded, 2 failed.
    pub status: u8,
    /// The VM it works on, if any.
    pub instance_id: Option<String>,
    /// `queryAsyncJobResult` calls for it so far.
    pub queries: u32,
    /// The failure's `errorcode` and `errortext`.
    pub error: Option<(u16, String)>,
}

impl Job {
    fn instance_id(&self) -> Option<&str> {
        match &self.work {
            JobWork::Deploy { vm_id }
            | JobWork::Destroy { vm_id, .. }
            | JobWork::Reboot { vm_id } => Some(vm_id),
            _ => None,
        }
    }

    /// The fully qualified class CloudStack reports as the job's `cmd`.
    fn cmd_class(&self) -> &'static str {
        match self.work {
            JobWork::Deploy { .. } => "org.apache.cloudstack.api.command.user.vm.DeployVMCmd",
            JobWork::Destroy { .. } => "org.apache.cloudstack.api.command.user.vm.DestroyVMCmd",
            JobWork::Reboot { .. } => "org.apache.cloudstack.api.command.user.vm.RebootVMCmd",
            JobWork::CreateTags { .. } => {
                "org.apache.cloudstack.api.command.user.tag.CreateTagsCmd"
            }
            JobWork::DeleteTags { .. } => {
                "org.apache.cloudstack.api.command.user.tag.DeleteTagsCmd"
            }
        }
    }

    pub fn snapshot(&self) -> JobSnapshot {
        JobSnapshot {
            id: self.id.clone(),
            command: self.command.clone(),
            status: self.status_code(),
            instance_id: self.instance_id().map(str::to_string),
            queries: self.queries,
            error: match &self.status {
                JobStatus::Failed(f) => Some((f.errorcode, f.errortext.clone())),
                _ => None,
            },
        }
    }

    fn status_code(&self) -> u8 {
        match self.status {
            JobStatus::Pending => 0,
            JobStatus::Succeeded(_) => 1,
            JobStatus::Failed(_) => 2,
        }
    }

    /// The `queryAsyncJobResult` / `listAsyncJobs` object.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "accountid": crate::api::ACCOUNT_ID,
            "userid": crate::api::USER_ID,
            "cmd": self.cmd_class(),
            "jobstatus": self.status_code(),
            "jobprocstatus": 0,
            "jobresultcode": 0,
            "jobresulttype": "object",
            "created": self.created,
            "jobid": self.id,
        });
        if let Some(instance) = self.instance_id() {
            v["jobinstancetype"] = json!("VirtualMachine");
            v["jobinstanceid"] = json!(instance);
        }
        match &self.status {
            JobStatus::Pending => {}
            JobStatus::Succeeded(result) => {
                v["jobresult"] = result.clone();
            }
            JobStatus::Failed(f) => {
                v["jobresultcode"] = json!(INTERNAL_ERROR);
                v["jobresult"] = json!({
                    "errorcode": f.errorcode,
                    "cserrorcode": ApiError::cs_code_for(f.errorcode),
                    "errortext": f.errortext,
                });
            }
        }
        if let Some(completed) = &self.completed {
            v["completed"] = json!(completed);
        }
        v
    }
}

/// Starts a job for `command` (CloudStack's spelling); returns its UUID. Tag jobs have no
/// latency; VM jobs the configured one.
pub(crate) fn start(
    state: &mut State,
    command: &str,
    work: JobWork,
    planned_failure: Option<JobFailure>,
) -> String {
    let id = state.new_id();
    let latency = match work {
        JobWork::Deploy { .. } | JobWork::Destroy { .. } | JobWork::Reboot { .. } => {
            state.job_latency
        }
        JobWork::CreateTags { .. } | JobWork::DeleteTags { .. } => JobLatency::polls(0),
    };
    state.jobs.push(Job {
        id: id.clone(),
        command: command.to_string(),
        work,
        created: timestamp(),
        started: Instant::now(),
        queries: 0,
        latency,
        planned_failure,
        status: JobStatus::Pending,
        completed: None,
    });
    id
}

fn is_due(state: &State, job: &Job, now: Instant) -> bool {
    // `polls` pending answers first (when set), and `millis` since the start.
    if (job.latency.polls > 0 && job.queries <= job.latency.polls)
        || now.duration_since(job.started) < Duration::from_millis(job.latency.millis)
    {
        return false;
    }
    // Work on a VM waits for the VM's deploy job.
    match &job.work {
        JobWork::Destroy { vm_id, .. } | JobWork::Reboot { vm_id } => {
            state.vm(vm_id).is_none_or(|vm| {
                state
                    .jobs
                    .iter()
                    .find(|j| j.id == vm.deploy_job_id)
                    .is_none_or(|j| j.status != JobStatus::Pending)
            })
        }
        _ => true,
    }
}

/// Completes every job that is due; returns the Node work that follows, in order.
pub(crate) fn advance(state: &mut State, now: Instant) -> Vec<NodeAction> {
    let mut actions = Vec::new();
    // A job completing can make a later one due (a destroy waiting for a deploy): loop until
    // nothing changes.
    loop {
        let due: Vec<usize> = (0..state.jobs.len())
            .filter(|&i| {
                state.jobs[i].status == JobStatus::Pending && is_due(state, &state.jobs[i], now)
            })
            .collect();
        if due.is_empty() {
            return actions;
        }
        for i in due {
            let job = state.jobs[i].clone();
            let status = complete(state, &job, &mut actions);
            let done = &mut state.jobs[i];
            done.status = status;
            done.completed = Some(timestamp());
        }
    }
}

fn complete(state: &mut State, job: &Job, actions: &mut Vec<NodeAction>) -> JobStatus {
    // A planned failure changes nothing, except that a failed deploy leaves its VM in Error.
    if let (Some(failure), false) = (
        &job.planned_failure,
        matches!(job.work, JobWork::Deploy { .. }),
    ) {
        return JobStatus::Failed(failure.clone());
    }
    match &job.work {
        JobWork::Deploy { vm_id } => {
            let failed = job.planned_failure.clone();
            let Some(vm) = state.vm_mut(vm_id) else {
                return JobStatus::Failed(JobFailure {
                    command: None,
                    errorcode: INTERNAL_ERROR,
                    errortext: format!("VM {vm_id} no longer exists"),
                });
            };
            if let Some(failure) = failed {
                vm.state = VmState::Error;
                return JobStatus::Failed(failure);
            }
            vm.state = VmState::Running;
            let Some(vm) = state.vm(vm_id) else {
                return JobStatus::Succeeded(json!({}));
            };
            if let Some(action) = NodeAction::register(state, vm) {
                actions.push(action);
            }
            JobStatus::Succeeded(json!({ "virtualmachine": vm_json(state, vm) }))
        }
        JobWork::Destroy { vm_id, expunge } => {
            let Some(index) = state.vms.iter().position(|vm| &vm.id == vm_id) else {
                return JobStatus::Failed(JobFailure {
                    command: None,
                    errorcode: INTERNAL_ERROR,
                    errortext: "Unable to find a virtual machine with specified vmId".into(),
                });
            };
            let was_running = state.vms[index].state == VmState::Running;
            state.vms[index].state = VmState::Destroyed;
            let mut json = vm_json(state, &state.vms[index]);
            if was_running {
                actions.push(NodeAction::Remove(state.vms[index].name.to_lowercase()));
            }
            if *expunge {
                json["state"] = json!("Expunging");
                let vm = state.vms.remove(index);
                state.removed_vms.insert(vm.id);
            }
            JobStatus::Succeeded(json!({ "virtualmachine": json }))
        }
        JobWork::Reboot { vm_id } => {
            // The VM may have left Running (or been expunged) while the job waited.
            let Some(vm) = state.vm(vm_id) else {
                return JobStatus::Failed(JobFailure {
                    command: None,
                    errorcode: PARAM_ERROR,
                    errortext: vm_gone_text(vm_id),
                });
            };
            if vm.state != VmState::Running {
                return JobStatus::Failed(JobFailure {
                    command: None,
                    errorcode: PARAM_ERROR,
                    errortext: not_running_text(vm),
                });
            }
            let boot_id = state.new_id();
            let Some(vm) = state.vm_mut(vm_id) else {
                return JobStatus::Succeeded(json!({}));
            };
            vm.boot_id = boot_id;
            vm.reboots += 1;
            let Some(vm) = state.vm(vm_id) else {
                return JobStatus::Succeeded(json!({}));
            };
            actions.push(NodeAction::reboot(vm));
            JobStatus::Succeeded(json!({ "virtualmachine": vm_json(state, vm) }))
        }
        JobWork::CreateTags { resource_ids, tags } => {
            for id in resource_ids {
                if let Some(vm) = state.vm_mut(id) {
                    for tag in tags {
                        if !vm.tags.iter().any(|t| t.key == tag.key) {
                            vm.tags.push(tag.clone());
                        }
                    }
                }
            }
            JobStatus::Succeeded(json!({ "success": true }))
        }
        JobWork::DeleteTags { resource_ids, tags } => {
            for id in resource_ids {
                if let Some(vm) = state.vm_mut(id) {
                    vm.tags.retain(|t| {
                        !tags.is_empty()
                            && !tags.iter().any(|d| {
                                d.key == t.key && (d.value.is_empty() || d.value == t.value)
                            })
                    });
                }
            }
            JobStatus::Succeeded(json!({ "success": true }))
        }
    }
}
