//! The `cloudstack-emulator` binary: serves the API and its admin endpoints.

use std::process::Stdio;

use anyhow::{Context, Result};
use capstan_cloudstack_emulator::{Credentials, DEFAULT_API_KEY, DEFAULT_SECRET_KEY};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::http::{now_seconds, send};

#[tokio::test]
async fn the_binary_serves_the_api_and_the_admin_endpoints() -> Result<()> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cloudstack-emulator"))
        .args(["--listen", "127.0.0.1:0", "--job-latency-ms", "0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let url = BufReader::new(stdout)
        .lines()
        .next_line()
        .await?
        .context("the URL line")?;
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/client/api"))
        .context("a /client/api URL")?
        .parse()?;
    let creds = Credentials::new(DEFAULT_API_KEY, DEFAULT_SECRET_KEY);
    let query = cloudstack_sign::sign(
        &[("command", "listZones"), ("response", "json")],
        &creds,
        now_seconds() + 60,
    );
    let zones = send(addr, "GET", &format!("/client/api?{query}"), None).await?;
    assert_eq!(zones.status, 200, "{}", zones.body);
    assert_eq!(zones.json()?["listzonesresponse"]["count"], 2);
    let state = send(addr, "GET", "/admin/state", None).await?.json()?;
    assert_eq!(state["requests"][0]["command"], "listZones");
    child.kill().await?;
    Ok(())
}
