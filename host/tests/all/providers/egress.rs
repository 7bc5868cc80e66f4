//! Contract 0.2 against the real API server: outbound HTTP under the Provider's egress grants
//! (allowed, denied with an Event and a count, wildcard rules, size cap, timeouts, redirects not
//! followed), configuration and credentials from Secrets (rotation without a restart, a missing
//! Secret or key as `Ready=False`, values never in the log), HTTPS with a private CA, with the
//! `egress` fixture guest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan::api::provider::{LocalObjectKey, ProviderConfigEntry, ProviderLimits, ProviderSpec};
use capstan::runtime::types::{NodeClaim, ProviderError};
use capstan::runtime::{CallError, ProviderPre};
use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Setup;
use crate::fixtures::wasm;

/// A plain HTTP/1.1 server on 127.0.0.1 for one test: `/ok` answers `hello-egress`, `/big` 4 KiB
/// (over the test's 1 KiB cap) without a length, `/big-length` the same with a length, `/slow`
/// waits 5 s before answering, `/stall` sends half a body then waits, `/redirect` is a 302 to
/// another port. Counts the connections it accepted.
struct TestServer {
    port: u16,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request);
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let reply = |status: &str, headers: &str, body: &str| {
                        format!("HTTP/1.1 {status}\r\n{headers}connection: close\r\n\r\n{body}")
                    };
                    let big = "x".repeat(4096);
                    let response = match path.as_str() {
                        "/ok" => reply("200 OK", "content-length: 12\r\n", "hello-egress"),
                        "/big" => reply("200 OK", "", &big),
                        "/big-length" => reply("200 OK", "content-length: 4096\r\n", &big),
                        "/slow" => {
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            reply("200 OK", "content-length: 4\r\n", "slow")
                        }
                        "/stall" => {
                            let head = reply("200 OK", "content-length: 10\r\n", "hello");
                            let _ = stream.write_all(head.as_bytes()).await;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                            "world".to_owned()
                        }
                        "/redirect" => reply(
                            "302 Found",
                            "location: http://127.0.0.1:9/elsewhere\r\ncontent-length: 0\r\n",
                            "",
                        ),
                        _ => reply("404 Not Found", "content-length: 0\r\n", ""),
                    };
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self {
            port,
            connections,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// The log lines the host writes while a test runs (this thread's subscriber: the test runs on
/// a current-thread runtime, so the controller's tasks log here too).
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

async fn put_secret(setup: &Setup, name: &str, data: &[(&str, &str)]) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(setup.namespace.clone()),
            ..ObjectMeta::default()
        },
        string_data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    };
    let mut value = serde_json::to_value(&secret).unwrap();
    value["apiVersion"] = "v1".into();
    value["kind"] = "Secret".into();
    Api::<Secret>::namespaced(setup.client.clone(), &setup.namespace)
        .patch(
            name,
            &PatchParams::apply("capstan-tests").force(),
            &Patch::Apply(&value),
        )
        .await
        .expect("apply Secret");
}

fn secret_entry(name: &str, secret: &str, key: &str) -> ProviderConfigEntry {
    ProviderConfigEntry {
        name: name.to_owned(),
        value: None,
        secret_key_ref: Some(LocalObjectKey {
            name: secret.to_owned(),
            key: key.to_owned(),
        }),
    }
}

fn value_entry(name: &str, value: &str) -> ProviderConfigEntry {
    ProviderConfigEntry {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        secret_key_ref: None,
    }
}

/// `get(provider-id)` of the fixture: the probe's annotations, or the provider's error message.
async fn probe(pre: &ProviderPre, id: &str) -> Result<BTreeMap<String, String>, String> {
    match pre.get(id).await {
        Ok(NodeClaim { annotations, .. }) => Ok(annotations
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect()),
        Err(CallError::Provider { error, .. }) => Err(match error {
            ProviderError::Retryable(m) | ProviderError::NotFound(m) => m,
            other => format!("{other:?}"),
        }),
        Err(other) => panic!("{id}: the call itself failed: {other}"),
    }
}

fn ready_message(provider: capstan::api::provider::Provider) -> String {
    provider
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.message)
        .unwrap_or_default()
}

fn spec_with(setup: &Setup, egress: Vec<String>, config: Vec<ProviderConfigEntry>) -> ProviderSpec {
    let mut spec = setup.spec("egress", "provider.wasm");
    spec.egress = egress;
    spec.config = config;
    spec.limits = Some(ProviderLimits {
        http_first_byte_timeout: Some("1s".into()),
        http_between_bytes_timeout: Some("1s".into()),
        http_max_response_body: Some(capstan::api::shared::Quantity::new("1Ki")),
        ..ProviderLimits::default()
    });
    spec
}

/// Allowed requests succeed; requests elsewhere are denied with the typed error, counted and
/// reported as an Event, and never reach the network; limits fail a request, not the host;
/// redirects come back unfollowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_grants_are_enforced_on_the_real_authority() {
    let setup = Setup::start("egress", |_| {}).await;
    let name = setup.names.name("egress");
    let allowed = TestServer::start().await;
    let other = TestServer::start().await;
    let bytes = wasm("egress");
    let digest = capstan::provider::source::sha256_hex(&bytes);
    setup.put_source("egress", "provider.wasm", &bytes).await;
    let rules = vec![
        format!("http://127.0.0.1:{}", allowed.port),
        "https://*.example.invalid:8443".to_owned(),
    ];
    setup
        .put_provider(&name, spec_with(&setup, rules, Vec::new()))
        .await;
    let pre = setup.wait_serving(&name, &digest).await;
    let loaded = setup.wait_loaded(&name, &digest).await;
    assert_eq!(
        loaded.status.and_then(|s| s.wit_version).as_deref(),
        Some("0.2.0")
    );

    let ok = probe(&pre, &allowed.url("/ok"))
        .await
        .expect("allowed request");
    assert_eq!(ok["status"], "200");
    assert_eq!(ok["body"], "hello-egress");

    // Another port of the same host, the same port under another name, another scheme: denied
    // before any connection.
    for url in [
        other.url("/ok"),
        format!("http://localhost:{}/ok", allowed.port),
        format!("https://127.0.0.1:{}/ok", allowed.port),
        "https://example.invalid:8443/".to_owned(),
    ] {
        let err = probe(&pre, &url).await.expect_err(&url);
        assert!(err.contains("HttpRequestDenied"), "{url}: {err}");
    }
    assert_eq!(
        other.connections(),
        0,
        "a denied request reached the network"
    );
    let counters = pre.capabilities().metrics().snapshot();
    assert_eq!(counters.http_denied, 4, "{counters:?}");
    setup.wait_event(&name, "PermissionDenied").await;
    let wanted = format!("GET http://127.0.0.1:{}", other.port);
    let notes = wait_until(Duration::from_secs(30), "the denial Event", || async {
        let notes: Vec<String> = setup
            .events(&name, "PermissionDenied")
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        Ok::<_, String>(notes.iter().any(|n| n.contains(&wanted)).then_some(notes))
    })
    .await
    .expect("denial Event");
    assert!(
        notes.iter().all(|n| !n.contains("/ok")),
        "Events name the endpoint only: {notes:?}"
    );
    let metrics = capstan::serve::metrics_text(&setup.registry).expect("metrics");
    assert!(
        metrics.contains(&format!(
            r#"capstan_provider_http_denied_total{{provider="{name}"}} 4"#
        )),
        "{metrics}"
    );

    // The wildcard rule lets a subdomain through the grants (the name does not resolve here, so
    // the request then fails, but not as denied).
    let err = probe(&pre, "https://api.example.invalid:8443/")
        .await
        .expect_err("unresolvable");
    assert!(!err.contains("HttpRequestDenied"), "{err}");

    // Limits: each a clear error to the guest, the host and the provider keep serving. Before
    // the body, the wasi:http error code; while reading the body, wasmtime-wasi-http 48 hands the
    // stream error over as `internal-error` carrying the host's message.
    for (path, code) in [
        ("/big", "HTTP response body size exceeds limit"),
        ("/big-length", "HttpResponseBodySize"),
        ("/slow", "ConnectionReadTimeout"),
        ("/stall", "connection read timeout"),
    ] {
        let started = std::time::Instant::now();
        let err = probe(&pre, &allowed.url(path)).await.expect_err(path);
        assert!(err.contains(code), "{path}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{path} took {:?}",
            started.elapsed()
        );
    }
    let redirect = probe(&pre, &allowed.url("/redirect"))
        .await
        .expect("redirect");
    assert_eq!(redirect["status"], "302");
    assert_eq!(redirect["location"], "http://127.0.0.1:9/elsewhere");
    assert_eq!(
        probe(&pre, &allowed.url("/ok"))
            .await
            .expect("still serving")["body"],
        "hello-egress"
    );
    // big, big-length, slow, stall and the unresolvable name.
    assert!(pre.capabilities().metrics().snapshot().http_failed >= 5);
}

/// 0.2 guests read `spec.config`: literal values and Secret keys; a rotated Secret reaches the
/// next call without a reload; a missing Secret or key is `Ready=False` with its reason while the
/// last good values keep serving; the values never reach the host's log.
#[tokio::test(flavor = "current_thread")]
async fn config_comes_from_secrets_and_follows_rotation() {
    let log = CapturedLog::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let setup = Setup::start("egress-config", |_| {}).await;
    let name = setup.names.name("egress");
    let name2 = setup.names.name("egress-2");
    let first = format!("first-{}", setup.names.run);
    let second = format!("second-{}", setup.names.run);
    put_secret(&setup, "creds", &[("api-key", &first)]).await;
    let bytes = wasm("egress");
    let digest = capstan::provider::source::sha256_hex(&bytes);
    setup.put_source("egress", "provider.wasm", &bytes).await;
    let config = vec![
        secret_entry("api-key", "creds", "api-key"),
        value_entry("zone", "zone-a"),
    ];
    setup
        .put_provider(&name, spec_with(&setup, Vec::new(), config.clone()))
        .await;
    let pre = setup.wait_serving(&name, &digest).await;
    assert_eq!(probe(&pre, "config:api-key").await.unwrap()["value"], first);
    assert_eq!(probe(&pre, "config:zone").await.unwrap()["value"], "zone-a");
    let missing = probe(&pre, "config:nope").await.expect_err("undefined key");
    assert!(missing.contains("nope"), "{missing}");

    // Rotation: the same loaded version, the next call sees the new value.
    put_secret(&setup, "creds", &[("api-key", &second)]).await;
    wait_until(Duration::from_secs(30), "the rotated Secret", || {
        let pre = Arc::clone(&pre);
        let second = second.clone();
        async move {
            let value = probe(&pre, "config:api-key").await?;
            Ok::<_, String>((value["value"] == second).then_some(()))
        }
    })
    .await
    .unwrap_or_else(|err| {
        let text = log.text();
        let tail: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("capstan") || l.contains("Secret") || l.contains("secret"))
            .rev()
            .take(40)
            .collect();
        panic!("rotation: {err:?}\n{}", tail.join("\n"))
    });
    let serving = setup.registry.get(&name).expect("serving");
    assert!(
        Arc::ptr_eq(&serving, &pre),
        "rotation reloaded the provider"
    );

    // A key the Secret lacks: Ready=False naming it; the last good values keep serving.
    let mut bad = config.clone();
    bad[0] = secret_entry("api-key", "creds", "missing-key");
    setup
        .put_provider(&name, spec_with(&setup, Vec::new(), bad))
        .await;
    let message = ready_message(
        setup
            .wait_condition(&name, "Ready", "False", "SecretKeyNotFound")
            .await,
    );
    assert!(message.contains("missing-key"), "{message}");
    assert!(
        message.contains("api-key"),
        "the Secret's keys are named: {message}"
    );
    let serving = setup.registry.get(&name).expect("still serving");
    assert_eq!(
        probe(&serving, "config:api-key").await.unwrap()["value"],
        second
    );

    // A Secret that does not exist: not loaded at all, Ready=False; creating it fixes it (the
    // Secret watch).
    setup.put_source("egress", "provider.wasm", &bytes).await;
    setup
        .put_provider(
            &name2,
            spec_with(
                &setup,
                Vec::new(),
                vec![secret_entry("token", "later", "token")],
            ),
        )
        .await;
    let message = ready_message(
        setup
            .wait_condition(&name2, "Ready", "False", "SecretNotFound")
            .await,
    );
    assert!(message.contains("later"), "{message}");
    assert!(setup.registry.get(&name2).is_none());
    put_secret(&setup, "later", &[("token", &first)]).await;
    let pre2 = setup.wait_serving(&name2, &digest).await;
    assert_eq!(probe(&pre2, "config:token").await.unwrap()["value"], first);

    let text = log.text();
    assert!(
        text.contains("egress"),
        "the capture saw the host's log:\n{text}"
    );
    for secret in [&first, &second] {
        assert!(
            !text.contains(secret.as_str()),
            "a Secret value is in the log"
        );
    }
}

/// An HTTPS server on 127.0.0.1 whose certificate (for IP 127.0.0.1) is signed by nobody the
/// system trusts; answers `hello-tls` to anything. Returns the port, the certificate (PEM) and the
/// server task.
async fn tls_server() -> (u16, String, tokio::task::JoinHandle<()>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = std::env::temp_dir().join(format!(
        "capstan-egress-tls-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=capstan-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("openssl");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let cert_pem = std::fs::read_to_string(dir.join("cert.pem")).unwrap();
    let key_pem = std::fs::read(dir.join("key.pem")).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let certs = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&key_pem).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let reply =
                    "HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nhello-tls";
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, cert_pem, task)
}

/// HTTPS trusts the system's roots plus the Provider's CA bundle: a server with a private
/// certificate is refused until `egressCABundle` names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_trusts_the_providers_ca_bundle() {
    let setup = Setup::start("egress-tls", |_| {}).await;
    let name = setup.names.name("egress");
    let (port, cert_pem, server) = tls_server().await;
    let bytes = wasm("egress");
    let digest = capstan::provider::source::sha256_hex(&bytes);
    setup.put_source("egress", "provider.wasm", &bytes).await;
    let url = format!("https://127.0.0.1:{port}/");
    let mut spec = spec_with(
        &setup,
        vec![format!("https://127.0.0.1:{port}")],
        Vec::new(),
    );
    setup.put_provider(&name, spec.clone()).await;
    let pre = setup.wait_serving(&name, &digest).await;
    let err = probe(&pre, &url).await.expect_err("untrusted certificate");
    assert!(err.contains("Tls"), "{err}");

    setup
        .put_config_map("private-ca", None, Some(("ca.crt", &cert_pem)))
        .await;
    spec.egress_ca_bundle = Some(LocalObjectKey {
        name: "private-ca".into(),
        key: "ca.crt".into(),
    });
    setup.put_provider(&name, spec).await;
    let registry = Arc::clone(&setup.registry);
    let answer = wait_until(Duration::from_secs(60), "HTTPS with the CA bundle", || {
        let registry = Arc::clone(&registry);
        let url = url.clone();
        let name = name.as_str();
        async move {
            let Some(pre) = registry.get(name) else {
                return Ok::<_, String>(None);
            };
            Ok(probe(&pre, &url).await.ok())
        }
    })
    .await
    .expect("trusted");
    assert_eq!(answer["status"], "200");
    assert_eq!(answer["body"], "hello-tls");
    server.abort();
}
