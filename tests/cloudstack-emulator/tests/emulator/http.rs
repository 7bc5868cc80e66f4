//! A minimal HTTP/1.1 client for the tests (one request per connection), and signed calls.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use capstan_cloudstack_emulator::{Credentials, EmulatorHandle};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.body).with_context(|| format!("not JSON: {}", self.body))
    }
}

/// Sends `method target` (path and query) with an optional form body.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    target: &str,
    form: Option<&str>,
) -> Result<Response> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(body) = form {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut raw)).await??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("no header end in {text:?}");
    };
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .context("status line")?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Response {
        status,
        headers,
        body: body.to_string(),
    })
}

pub fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A signed GET of `command` with `params` (and `response=json`), expiring in 5 minutes.
pub async fn call(
    emulator: &EmulatorHandle,
    credentials: &Credentials,
    command: &str,
    params: &[(&str, &str)],
) -> Result<Response> {
    let mut all = vec![("command", command), ("response", "json")];
    all.extend_from_slice(params);
    let query = cloudstack_sign::sign(&all, credentials, now_seconds() + 300);
    send(
        emulator.addr(),
        "GET",
        &format!("/client/api?{query}"),
        None,
    )
    .await
}

/// A signed call that must answer 200; the object under `<command>response`.
pub async fn ok(
    emulator: &EmulatorHandle,
    command: &str,
    params: &[(&str, &str)],
) -> Result<Value> {
    let credentials = emulator.credentials().context("credentials")?;
    let response = call(emulator, &credentials, command, params).await?;
    if response.status != 200 {
        bail!("{command}: HTTP {}: {}", response.status, response.body);
    }
    let mut json = response.json()?;
    let key = format!("{}response", command.to_lowercase());
    Ok(json[key.as_str()].take())
}

/// Polls `queryAsyncJobResult` until the job is done; the job object.
pub async fn wait_job(emulator: &EmulatorHandle, job_id: &str) -> Result<Value> {
    for _ in 0..300 {
        let job = ok(emulator, "queryAsyncJobResult", &[("jobid", job_id)]).await?;
        if job["jobstatus"] != 0 {
            return Ok(job);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("job {job_id} still pending")
}
