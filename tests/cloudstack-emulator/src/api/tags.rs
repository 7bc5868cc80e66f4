//! `createTags` and `deleteTags` (async) and `listTags`, for resource type `UserVm`.

use serde_json::{Value, json};

use super::catalog::tag_json;
use super::error::ApiError;
use super::list;
use super::params::Params;
use crate::jobs::{self, JobWork};
use crate::state::State;

/// The one resource type the emulator tags.
pub const USER_VM: &str = "UserVm";

fn resource_ids(state: &State, params: &Params) -> Result<Vec<String>, ApiError> {
    let cmd = params.command();
    let kind = params.required("resourcetype")?;
    if !kind.eq_ignore_ascii_case(USER_VM) {
        return Err(ApiError::param(format!(
            "The CloudStack emulator tags only resources of type {USER_VM}, not {kind}"
        )));
    }
    let ids = params.list("resourceids");
    if ids.is_empty() {
        return Err(ApiError::missing(cmd, "resourceids"));
    }
    for id in &ids {
        if state.vm(id).is_none() {
            return Err(ApiError::param(format!(
                "Unable to find resource by id {id} and type {USER_VM}"
            )));
        }
    }
    Ok(ids)
}

/// `createTags`: `resourceids`, `resourcetype=UserVm`, `tags[n].key`/`tags[n].value`.
pub fn create(state: &mut State, params: &Params) -> Result<Value, ApiError> {
    let ids = resource_ids(state, params)?;
    let tags = params.map("tags");
    if tags.is_empty() {
        return Err(ApiError::missing(params.command(), "tags"));
    }
    for id in &ids {
        if let Some(vm) = state.vm(id)
            && let Some(dup) = vm
                .tags
                .iter()
                .find(|t| tags.iter().any(|n| n.key.eq_ignore_ascii_case(&t.key)))
        {
            return Err(ApiError::param(format!(
                "tag {} already on {USER_VM} with id {id}",
                dup.key
            )));
        }
    }
    let failure = state.faults.take_job_failure(params.command());
    let job = jobs::start(
        state,
        params.command(),
        JobWork::CreateTags {
            resource_ids: ids,
            tags,
        },
        failure,
    );
    Ok(json!({ "jobid": job }))
}

/// `deleteTags`: `resourceids`, `resourcetype=UserVm`, optional `tags[n].key` (and value);
/// without tags, every tag of the resources.
pub fn delete(state: &mut State, params: &Params) -> Result<Value, ApiError> {
    let ids = resource_ids(state, params)?;
    let tags = params.map("tags");
    let failure = state.faults.take_job_failure(params.command());
    let job = jobs::start(
        state,
        params.command(),
        JobWork::DeleteTags {
            resource_ids: ids,
            tags,
        },
        failure,
    );
    Ok(json!({ "jobid": job }))
}

/// `listTags`: `resourcetype`, `resourceid`, `key`, `value`.
pub fn list_tags(state: &State, params: &Params) -> Result<Value, ApiError> {
    if params
        .get("resourcetype")
        .is_some_and(|k| !k.eq_ignore_ascii_case(USER_VM))
    {
        return list(params, "tag", Vec::new());
    }
    let items = state
        .vms
        .iter()
        .filter(|vm| params.get("resourceid").is_none_or(|id| vm.id == id))
        .flat_map(|vm| vm.tags.iter().map(move |t| (vm, t)))
        .filter(|(_, t)| params.get("key").is_none_or(|k| t.key == k))
        .filter(|(_, t)| params.get("value").is_none_or(|v| t.value == v))
        .map(|(vm, t)| tag_json(t, USER_VM, &vm.id))
        .collect();
    list(params, "tag", items)
}
