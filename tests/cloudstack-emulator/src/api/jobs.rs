//! `queryAsyncJobResult` and `listAsyncJobs`.

use serde_json::Value;

use super::error::ApiError;
use super::list;
use super::params::Params;
use crate::jobs;
use crate::state::State;

/// `queryAsyncJobResult`: `jobid`. Each call counts against the job's latency in polls; the
/// job completes here as soon as it is due.
pub fn query(
    state: &mut State,
    params: &Params,
) -> Result<(Value, Vec<crate::nodes::NodeAction>), ApiError> {
    let id = params.required("jobid")?;
    let job = state
        .jobs
        .iter_mut()
        .find(|j| j.id == id)
        .ok_or_else(|| ApiError::invalid_id(params.command(), "jobid", id))?;
    job.queries += 1;
    let actions = jobs::advance(state, std::time::Instant::now());
    let job = state
        .jobs
        .iter()
        .find(|j| j.id == id)
        .ok_or_else(|| ApiError::invalid_id(params.command(), "jobid", id))?;
    Ok((job.json(), actions))
}

/// `listAsyncJobs`: every job, newest last.
pub fn list_jobs(state: &State, params: &Params) -> Result<Value, ApiError> {
    let items = state.jobs.iter().map(|j| j.json()).collect();
    list(params, "asyncjobs", items)
}
