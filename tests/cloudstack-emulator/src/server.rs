//! The HTTP server: `/client/api` (GET with a query string, POST with a form body too, as the
//! servlet merges them), response faults, the admin endpoints when enabled, and the ticker that
//! completes due jobs whether or not anyone polls.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::mpsc;

use crate::api;
use crate::faults::HttpFault;
use crate::nodes::NodeAction;
use crate::state::{RequestRecord, State};

/// The largest request body read (a deploy's user data is at most 32 KiB in Base64).
const MAX_BODY: usize = 1024 * 1024;
/// How often due jobs are completed without a poll.
const TICK: Duration = Duration::from_millis(25);
/// CloudStack's JSON content type.
const JSON_TYPE: &str = "application/json; charset=UTF-8";

/// What the server, the ticker, the Node worker and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    node_tx: Mutex<Option<mpsc::UnboundedSender<NodeAction>>>,
    node_pending: AtomicUsize,
    pub admin: bool,
}

impl Shared {
    pub fn new(state: State, admin: bool) -> Self {
        Self {
            state: Mutex::new(state),
            node_tx: Mutex::new(None),
            node_pending: AtomicUsize::new(0),
            admin,
        }
    }

    pub fn set_node_sender(&self, tx: mpsc::UnboundedSender<NodeAction>) {
        *self.node_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// The state, even if a panicking thread poisoned the lock (the state stays consistent:
    /// every change is made whole under it).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues Node work.
    pub fn send_nodes(&self, actions: Vec<NodeAction>) {
        if actions.is_empty() {
            return;
        }
        let tx = self.node_tx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = tx.as_ref() else {
            return;
        };
        for action in actions {
            self.node_pending.fetch_add(1, Ordering::SeqCst);
            if tx.send(action).is_err() {
                self.node_pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Queues Node work after `delay` (a rebooted VM's boot); counted as pending meanwhile, so
    /// [`crate::EmulatorHandle::settle`] waits for it.
    pub fn send_node_after(shared: &Arc<Self>, action: NodeAction, delay: Duration) {
        shared.node_pending.fetch_add(1, Ordering::SeqCst);
        let weak = Arc::downgrade(shared);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(shared) = weak.upgrade() {
                shared.send_nodes(vec![action]);
                shared.node_done(None);
            }
        });
    }

    /// One piece of Node work finished (with an error, if it failed).
    pub fn node_done(&self, error: Option<String>) {
        if let Some(error) = error {
            tracing::warn!(%error, "Node work failed");
            self.state().node_errors.push(error);
        }
        self.node_pending.fetch_sub(1, Ordering::SeqCst);
    }

    /// Node work queued or running.
    pub fn node_pending(&self) -> usize {
        self.node_pending.load(Ordering::SeqCst)
    }

    /// Completes due jobs and queues their Node work.
    pub fn tick(&self) {
        let actions = crate::jobs::advance(&mut self.state(), std::time::Instant::now());
        self.send_nodes(actions);
    }
}

pub(crate) type Body = Full<Bytes>;

pub(crate) fn respond(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(value) = HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

pub(crate) fn json_response(status: u16, body: &serde_json::Value) -> Response<Body> {
    respond(status, JSON_TYPE, body.to_string())
}

fn html_page(status: u16) -> Response<Body> {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    respond(
        status,
        "text/html;charset=utf-8",
        format!(
            "<!doctype html><html lang=\"en\"><head><title>HTTP Status {status} – {reason}</title></head>\
             <body><h1>HTTP Status {status} – {reason}</h1><hr class=\"line\" /><p><b>Type</b> Status Report</p>\
             <p><b>Description</b> The server is temporarily unable to service your request.</p>\
             <hr class=\"line\" /><h3>Apache Tomcat</h3></body></html>"
        ),
    )
}

/// Reads a request body, at most [`MAX_BODY`] bytes.
pub(crate) async fn read_body(body: Incoming) -> Result<Bytes, String> {
    Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| format!("cannot read the request body: {e}"))
}

async fn api_request(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let method = request.method().clone();
    if method != Method::GET && method != Method::POST {
        return html_page(405);
    }
    let mut pairs = cloudstack_sign::parse_query(request.uri().query().unwrap_or(""));
    if method == Method::POST {
        let is_form = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        match read_body(request.into_body()).await {
            Ok(body) if is_form => {
                pairs.extend(cloudstack_sign::parse_query(&String::from_utf8_lossy(
                    &body,
                )));
            }
            Ok(_) => {}
            Err(e) => return respond(400, "text/plain", e),
        }
    }
    let command = pairs
        .iter()
        .find(|(n, _)| n == "command")
        .map(|(_, v)| v.clone());
    let recorded: Vec<(String, String)> = pairs
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(cloudstack_sign::SIGNATURE))
        .cloned()
        .collect();
    let record = |status: u16, signature_version: Option<String>| RequestRecord {
        method: method.to_string(),
        command: command.clone(),
        params: recorded.clone(),
        signature_version,
        status,
    };
    let fault = {
        let mut state = shared.state();
        let fault = state.faults.take_http(command.as_deref());
        let status = match &fault {
            Some(HttpFault::MalformedJson | HttpFault::Huge { .. }) => Some(200),
            Some(HttpFault::HtmlError { status }) => Some(*status),
            Some(HttpFault::Redirect { .. }) => Some(302),
            Some(HttpFault::Slow { .. }) | None => None,
        };
        if let Some(status) = status {
            state.requests.push(record(status, None));
        }
        fault
    };
    let response_name = command
        .as_deref()
        .map(api::response_name)
        .unwrap_or_else(|| "errorresponse".into());
    match fault {
        Some(HttpFault::Slow { millis }) => tokio::time::sleep(Duration::from_millis(millis)).await,
        Some(HttpFault::MalformedJson) => {
            return respond(
                200,
                JSON_TYPE,
                format!("{{ \"{response_name}\" : {{ \"count\":1 ,\"zone\" : [  {{\"id\":\"a1b2"),
            );
        }
        Some(HttpFault::HtmlError { status }) => return html_page(status),
        Some(HttpFault::Huge { bytes }) => {
            let overhead = format!(r#"{{"{response_name}":{{"count":0,"padding":""}}}}"#).len();
            let padding = "x".repeat(bytes.saturating_sub(overhead));
            return json_response(
                200,
                &serde_json::json!({ response_name: { "count": 0, "padding": padding } }),
            );
        }
        Some(HttpFault::Redirect { location }) => {
            let mut response = respond(302, "text/plain", "Found");
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            return response;
        }
        None => {}
    }
    let is_get = method == Method::GET;
    let answer = {
        let mut state = shared.state();
        let answer = api::handle(&mut state, is_get, pairs);
        state
            .requests
            .push(record(answer.status, answer.signature_version.clone()));
        answer
    };
    shared.send_nodes(answer.node_actions);
    json_response(answer.status, &answer.body)
}

async fn route(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    match path.as_str() {
        "/client/api" | "/client/api/" => api_request(&shared, request).await,
        p if shared.admin && p.starts_with("/admin/") => {
            crate::admin::handle(&shared, request).await
        }
        _ => html_page(404),
    }
}

/// Serves `listener` until the task is aborted.
pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(route(shared, request).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}

/// Completes due jobs every [`TICK`].
pub(crate) async fn tick(shared: std::sync::Weak<Shared>) {
    let mut interval = tokio::time::interval(TICK);
    loop {
        interval.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.tick();
    }
}
