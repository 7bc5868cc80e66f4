//! The API at `/client/api`: verify the request as CloudStack's API server does, dispatch the
//! command, shape the answer (`{"<command>response": {...}}`, lists as `{"count": n, "<item>":
//! [...]}` and an empty object when nothing matches, errors with the HTTP status equal to
//! `errorcode`).

pub(crate) mod catalog;
pub mod error;
pub(crate) mod jobs;
pub(crate) mod params;
pub(crate) mod tags;
pub(crate) mod vms;

use serde_json::{Value, json};

use self::error::ApiError;
use self::params::Params;
use crate::nodes::NodeAction;
use crate::state::{State, now_millis};

/// The account every resource belongs to.
pub const ACCOUNT: &str = "admin";
/// Its UUID.
pub const ACCOUNT_ID: &str = "ac000000-0000-4000-8000-000000000002";
/// The user's UUID.
pub const USER_ID: &str = "05e00000-0000-4000-8000-000000000002";
/// The domain.
pub const DOMAIN: &str = "ROOT";
/// Its UUID.
pub const DOMAIN_ID: &str = "d0000000-0000-4000-8000-000000000001";

/// The commands the emulator implements, in CloudStack's spelling (command names are
/// case-sensitive in CloudStack).
pub const COMMANDS: &[&str] = &[
    "listZones",
    "listServiceOfferings",
    "listTemplates",
    "listNetworks",
    "listDiskOfferings",
    "listSSHKeyPairs",
    "deployVirtualMachine",
    "destroyVirtualMachine",
    "rebootVirtualMachine",
    "listVirtualMachines",
    "createTags",
    "deleteTags",
    "listTags",
    "queryAsyncJobResult",
    "listAsyncJobs",
];

/// A list answer: `{}` when `items` is empty, else `{"count": <all>, key: <this page>}`.
pub(crate) fn list(params: &Params, key: &str, items: Vec<Value>) -> Result<Value, ApiError> {
    let count = items.len();
    if count == 0 {
        return Ok(json!({}));
    }
    let page = params.page(items)?;
    let mut out = json!({ "count": count });
    if !page.is_empty() {
        out[key] = Value::Array(page);
    }
    Ok(out)
}

/// An answered request.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Value,
    pub node_actions: Vec<NodeAction>,
    pub signature_version: Option<String>,
}

/// The response object name of `command`.
pub fn response_name(command: &str) -> String {
    format!("{}response", command.to_lowercase())
}

/// Answers one request with decoded parameters `pairs`.
pub(crate) fn handle(
    state: &mut State,
    method_is_get: bool,
    pairs: Vec<(String, String)>,
) -> Answer {
    let mut node_actions = crate::jobs::advance(state, std::time::Instant::now());
    let command = pairs
        .iter()
        .find(|(n, _)| n == "command")
        .map(|(_, v)| v.clone());
    let Some(command) = command else {
        return error_answer(
            "errorresponse",
            ApiError::param("Invalid request: no command specified"),
            node_actions,
        );
    };
    let name = if COMMANDS.contains(&command.as_str()) {
        response_name(&command)
    } else {
        "errorresponse".to_string()
    };
    let verified = cloudstack_sign::verify(&pairs, now_millis(), |key| state.secret_for(key));
    let verified = match verified {
        Ok(v) => v,
        Err(e) => {
            tracing::info!(%command, reason = %e, "request does not verify");
            return error_answer(&name, ApiError::unauthorized(), node_actions);
        }
    };
    let params = Params::new(&command, pairs);
    if !params
        .get("response")
        .is_some_and(|r| r.eq_ignore_ascii_case("json"))
    {
        return error_answer(
            &name,
            ApiError::param(
                "The CloudStack emulator answers only JSON: send response=json (CloudStack's default is XML)",
            ),
            node_actions,
        );
    }
    let result = match command.as_str() {
        "listZones" => catalog::list_zones(state, &params),
        "listServiceOfferings" => catalog::list_service_offerings(state, &params),
        "listTemplates" => catalog::list_templates(state, &params),
        "listNetworks" => catalog::list_networks(state, &params),
        "listDiskOfferings" => catalog::list_disk_offerings(state, &params),
        "listSSHKeyPairs" => catalog::list_ssh_key_pairs(state, &params),
        "deployVirtualMachine" => vms::deploy(state, &params, method_is_get),
        "destroyVirtualMachine" => vms::destroy(state, &params),
        "rebootVirtualMachine" => vms::reboot(state, &params),
        "listVirtualMachines" => vms::list_vms(state, &params),
        "createTags" => tags::create(state, &params),
        "deleteTags" => tags::delete(state, &params),
        "listTags" => tags::list_tags(state, &params),
        "queryAsyncJobResult" => jobs::query(state, &params).map(|(body, actions)| {
            node_actions.extend(actions);
            body
        }),
        "listAsyncJobs" => jobs::list_jobs(state, &params),
        other => Err(ApiError::unsupported(other)),
    };
    // Jobs without latency (tags) complete at once.
    node_actions.extend(crate::jobs::advance(state, std::time::Instant::now()));
    match result {
        Ok(body) => Answer {
            status: 200,
            body: json!({ name: body }),
            node_actions,
            signature_version: verified.signature_version,
        },
        Err(e) => Answer {
            signature_version: verified.signature_version,
            ..error_answer(&name, e, node_actions)
        },
    }
}

fn error_answer(name: &str, error: ApiError, node_actions: Vec<NodeAction>) -> Answer {
    Answer {
        status: error.code,
        body: error.document(name),
        node_actions,
        signature_version: None,
    }
}
