//! Response faults and the admin endpoints.

use std::time::{Duration, Instant};

use anyhow::Result;
use capstan_cloudstack_emulator::{Config, Credentials, Emulator, FaultRule, HttpFault};
use serde_json::Value;

use super::http::{call, send};

#[tokio::test]
async fn injected_faults_answer_what_broken_endpoints_do() -> Result<()> {
    let cs = Emulator::start(Config::default()).await?;
    let creds = cs.credentials().unwrap_or_else(|| Credentials::new("", ""));

    cs.inject(FaultRule::for_command(
        "listZones",
        HttpFault::MalformedJson,
        1,
    ));
    let malformed = call(&cs, &creds, "listZones", &[]).await?;
    assert_eq!(malformed.status, 200);
    assert!(
        malformed
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"))
    );
    assert!(
        serde_json::from_str::<Value>(&malformed.body).is_err(),
        "{}",
        malformed.body
    );
    // Counted down: the next one is normal, and other commands were never affected.
    assert_eq!(call(&cs, &creds, "listZones", &[]).await?.status, 200);

    cs.inject(FaultRule::for_command(
        "listZones",
        HttpFault::HtmlError { status: 502 },
        1,
    ));
    let html = call(&cs, &creds, "listZones", &[]).await?;
    assert_eq!(html.status, 502);
    assert!(
        html.header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
    );
    assert!(html.body.contains("<html"));

    cs.inject(FaultRule::for_command(
        "listZones",
        HttpFault::Huge { bytes: 5 << 20 },
        1,
    ));
    let huge = call(&cs, &creds, "listZones", &[]).await?;
    assert!(huge.body.len() >= 5 << 20, "{} bytes", huge.body.len());
    assert!(huge.json()?["listzonesresponse"].is_object());

    cs.inject(FaultRule::for_command(
        "listZones",
        HttpFault::Slow { millis: 700 },
        1,
    ));
    let start = Instant::now();
    let slow = call(&cs, &creds, "listZones", &[]).await?;
    assert!(start.elapsed() >= Duration::from_millis(700));
    assert_eq!(slow.status, 200);

    cs.inject(FaultRule::always(HttpFault::Redirect {
        location: "http://elsewhere.invalid:8080/client/api".into(),
    }));
    let redirect = call(&cs, &creds, "listTemplates", &[("templatefilter", "all")]).await?;
    assert_eq!(redirect.status, 302);
    assert_eq!(
        redirect.header("location"),
        Some("http://elsewhere.invalid:8080/client/api")
    );
    assert_eq!(
        call(&cs, &creds, "listZones", &[]).await?.status,
        302,
        "until cleared"
    );
    cs.clear_faults();
    assert_eq!(call(&cs, &creds, "listZones", &[]).await?.status, 200);
    Ok(())
}

#[tokio::test]
async fn the_admin_endpoints_turn_the_same_knobs() -> Result<()> {
    let off = Emulator::start(Config::default()).await?;
    assert_eq!(
        send(off.addr(), "GET", "/admin/state", None).await?.status,
        404,
        "off unless asked"
    );

    let cs = Emulator::start(Config {
        admin: true,
        ..Config::default()
    })
    .await?;
    let creds = cs.credentials().unwrap_or_else(|| Credentials::new("", ""));
    let json = |body: &str| body.to_string();
    let put = |path: &'static str, body: String| {
        let addr = cs.addr();
        async move {
            let request = format!(
                "PUT {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            tokio::io::AsyncWriteExt::write_all(&mut stream, request.as_bytes()).await?;
            let mut out = String::new();
            tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut out).await?;
            anyhow::Ok(out)
        }
    };
    let fault = send(
        cs.addr(),
        "POST",
        "/admin/faults",
        Some(&json(
            r#"{"command":"listZones","fault":{"kind":"htmlError","status":503},"times":1}"#,
        )),
    )
    .await?;
    assert_eq!(fault.status, 204, "{}", fault.body);
    assert_eq!(call(&cs, &creds, "listZones", &[]).await?.status, 503);

    let out = put(
        "/admin/accounts",
        json(r#"[{"apiKey":"k2","secretKey":"s2"}]"#),
    )
    .await?;
    assert!(out.starts_with("HTTP/1.1 204"), "{out}");
    assert_eq!(call(&cs, &creds, "listZones", &[]).await?.status, 401);
    assert_eq!(
        call(&cs, &Credentials::new("k2", "s2"), "listZones", &[])
            .await?
            .status,
        200
    );

    let out = put(
        "/admin/capacity",
        json(r#"{"zoneId":"no-such-zone","capacity":1}"#),
    )
    .await?;
    assert!(out.starts_with("HTTP/1.1 404"), "{out}");

    let state = send(cs.addr(), "GET", "/admin/state", None).await?.json()?;
    let statuses: Vec<u64> = state["requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["status"].as_u64())
        .collect();
    assert_eq!(statuses, [503, 401, 200]);
    assert!(
        state["requests"].to_string().find("signature\"").is_none(),
        "signatures are not recorded"
    );
    Ok(())
}
