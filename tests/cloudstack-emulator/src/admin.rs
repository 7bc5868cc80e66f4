//! The binary's knobs over HTTP (`--admin`), the same as the handle's:
//!
//! | request | body | effect |
//! | --- | --- | --- |
//! | `GET /admin/state` | | VMs, jobs, requests, Node errors (JSON) |
//! | `POST /admin/faults` | a [`FaultRule`] | adds a response fault |
//! | `POST /admin/job-failures` | a [`JobFailure`] | the next matching job fails |
//! | `DELETE /admin/faults` | | clears response faults and planned job failures |
//! | `PUT /admin/capacity` | `{"zoneId": "...", "capacity": 2}` (`null`: unlimited) | a zone's capacity |
//! | `PUT /admin/job-latency` | a [`JobLatency`] | latency of later VM jobs |
//! | `PUT /admin/accounts` | `[{"apiKey": "...", "secretKey": "..."}]` | the accepted credentials |

use http::{Method, Request, Response};
use hyper::body::Incoming;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::faults::{FaultRule, JobFailure, JobLatency};
use crate::server::{Body, Shared, json_response, read_body, respond};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Capacity {
    zone_id: String,
    capacity: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Account {
    api_key: String,
    secret_key: String,
}

async fn body<T: DeserializeOwned>(request: Request<Incoming>) -> Result<T, Response<Body>> {
    let bytes = read_body(request.into_body())
        .await
        .map_err(|e| respond(400, "text/plain", e))?;
    serde_json::from_slice(&bytes).map_err(|e| respond(400, "text/plain", format!("bad JSON: {e}")))
}

fn done() -> Response<Body> {
    respond(204, "text/plain", "")
}

/// Answers one admin request.
pub(crate) async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let result = match (method, path.as_str()) {
        (Method::GET, "/admin/state") => {
            let snapshot = shared.state().snapshot();
            match serde_json::to_value(&snapshot) {
                Ok(v) => Ok(json_response(200, &v)),
                Err(e) => Ok(respond(500, "text/plain", e.to_string())),
            }
        }
        (Method::POST, "/admin/faults") => body::<FaultRule>(request).await.map(|rule| {
            shared.state().faults.rules.push(rule);
            done()
        }),
        (Method::POST, "/admin/job-failures") => body::<JobFailure>(request).await.map(|f| {
            shared.state().faults.job_failures.push(f);
            done()
        }),
        (Method::DELETE, "/admin/faults") => {
            let mut state = shared.state();
            state.faults.rules.clear();
            state.faults.job_failures.clear();
            Ok(done())
        }
        (Method::PUT, "/admin/capacity") => body::<Capacity>(request).await.map(|c| {
            if shared.state().set_zone_capacity(&c.zone_id, c.capacity) {
                done()
            } else {
                respond(404, "text/plain", format!("no zone {}", c.zone_id))
            }
        }),
        (Method::PUT, "/admin/job-latency") => body::<JobLatency>(request).await.map(|l| {
            shared.state().job_latency = l;
            done()
        }),
        (Method::PUT, "/admin/accounts") => body::<Vec<Account>>(request).await.map(|a| {
            shared.state().accounts = a
                .into_iter()
                .map(|a| cloudstack_sign::Credentials::new(a.api_key, a.secret_key))
                .collect();
            done()
        }),
        _ => Ok(respond(404, "text/plain", "no such admin endpoint")),
    };
    result.unwrap_or_else(|e| e)
}
