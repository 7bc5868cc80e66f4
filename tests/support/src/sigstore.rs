//! Sigstore's own services on loopback, so the keyless-signature tests verify bundles made by the
//! real tools and never hand-assembled ones: [`Sigstore::start`] runs
//!
//! - an OIDC issuer (here: the discovery document and a JWKS over plain HTTP, and ES256 ID tokens
//!   minted for any email) — the one part Sigstore does not ship, a stand-in for an identity
//!   provider such as Dex or a CI system's;
//! - Fulcio with an ephemeral CA, trusting that issuer and logging to no CT log;
//! - the timestamp authority, its signer in memory;
//! - Rekor v2 (rekor-tiles) on its POSIX backend, with a fresh ECDSA key;
//!
//! each built from its pinned Go module (`tests/control-plane/cp supply-chain`), and writes with
//! cosign the trust root (`cosign trusted-root create`) and the signing config (`cosign
//! signing-config create`) that name them. [`Sigstore::sign_keyless`] then signs as a release
//! pipeline does: `cosign sign-blob` with an ID token, a Fulcio certificate, an RFC 3161
//! timestamp and a Rekor v2 entry.
//!
//! One set of services per test process ([`Sigstore::shared`]): the timestamp authority serves
//! its metrics on port 2112, always, so two cannot run at once. Each service runs under a shell
//! that stops it when the test process's end closes its standard input, so none outlives the
//! tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use crate::supply_chain::{Workdir, tool};
use crate::{Error, Result};

/// The validity window a trust-root entry is given (`start-time`, `end-time`, RFC 3339).
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// When the authority starts being trusted (none: from the epoch).
    pub start: Option<String>,
    /// When it stops (none: still trusted).
    pub end: Option<String>,
}

/// What a trust root made by [`Sigstore::trusted_root`] names.
#[derive(Debug, Clone, Default)]
pub struct RootSpec {
    /// Fulcio's CA, over this window; none: left out.
    pub fulcio: Option<Window>,
    /// The timestamp authority, over this window; none: left out.
    pub tsa: Option<Window>,
    /// The Rekor v2 log; false: left out.
    pub rekor: bool,
}

impl RootSpec {
    /// Every service, each trusted from the epoch on.
    pub fn all() -> Self {
        Self {
            fulcio: Some(Window::default()),
            tsa: Some(Window::default()),
            rekor: true,
        }
    }
}

/// Fulcio, the timestamp authority, Rekor v2 and an OIDC issuer, on loopback for one test;
/// stopped on drop.
pub struct Sigstore {
    work: Workdir,
    oidc: OidcIssuer,
    children: Vec<(String, Child)>,
    fulcio_port: u16,
    tsa_port: u16,
    rekor_port: u16,
}

const EPOCH: &str = "1970-01-01T00:00:00Z";

static SHARED: OnceLock<Result<Sigstore, String>> = OnceLock::new();

impl Sigstore {
    /// The services of this test process, started by the first caller.
    pub fn shared() -> Result<&'static Sigstore> {
        SHARED
            .get_or_init(|| Sigstore::start().map_err(|err| err.to_string()))
            .as_ref()
            .map_err(|err| Error::Start(err.clone()))
    }

    /// Starts every service and writes `signing_config.json` and `trusted_root.json` (all of
    /// them trusted) in [`Sigstore::dir`].
    pub fn start() -> Result<Self> {
        let work = Workdir::new("sigstore")?;
        let oidc = OidcIssuer::start()?;
        let mut sigstore = Self {
            work,
            oidc,
            children: Vec::new(),
            fulcio_port: free_port()?,
            tsa_port: free_port()?,
            rekor_port: free_port()?,
        };
        sigstore.start_fulcio()?;
        sigstore.start_tsa()?;
        sigstore.start_rekor()?;
        for (name, port, path) in [
            ("fulcio", sigstore.fulcio_port, "/healthz"),
            ("timestamp-server", sigstore.tsa_port, "/ping"),
            ("rekor-server", sigstore.rekor_port, "/healthz"),
        ] {
            sigstore.wait_serving(name, port, path)?;
        }
        let fulcio_chain = http_get(sigstore.fulcio_port, "/api/v1/rootCert")?;
        sigstore.work.write("fulcio.pem", fulcio_chain.as_bytes())?;
        let tsa_chain = http_get(sigstore.tsa_port, "/api/v1/timestamp/certchain")?;
        sigstore.work.write("tsa.pem", tsa_chain.as_bytes())?;
        sigstore.trusted_root("trusted_root.json", &RootSpec::all())?;
        let service = |url: String, version: u32| {
            format!("url={url},api-version={version},start-time={EPOCH},operator=capstan-tests")
        };
        sigstore.work.run(
            "cosign",
            &[
                "signing-config",
                "create",
                "--fulcio",
                &service(sigstore.fulcio_url(), 1),
                "--tsa",
                &service(sigstore.tsa_url(), 1),
                "--rekor",
                &service(sigstore.rekor_url(), 2),
                "--oidc-provider",
                &service(sigstore.issuer().to_owned(), 1),
                "--tsa-config",
                "ANY",
                "--rekor-config",
                "ANY",
                "--out",
                "signing_config.json",
            ],
        )?;
        Ok(sigstore)
    }

    fn start_fulcio(&mut self) -> Result<()> {
        let issuer = self.issuer().to_owned();
        let config = serde_json::json!({
            "OIDCIssuers": {
                issuer.clone(): {"IssuerURL": issuer, "ClientID": "sigstore", "Type": "email"}
            }
        });
        self.work
            .write("fulcio.json", config.to_string().as_bytes())?;
        let grpc = free_port()?.to_string();
        let metrics = free_port()?.to_string();
        let socket = format!(
            "@capstan-fulcio-{}-{}",
            std::process::id(),
            self.fulcio_port
        );
        let port = self.fulcio_port.to_string();
        let config_path = self.work.path().join("fulcio.json");
        let config_path = config_path.display().to_string();
        self.spawn(
            "fulcio",
            &[
                "serve",
                "--ca",
                "ephemeralca",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--grpc-host",
                "127.0.0.1",
                "--grpc-port",
                &grpc,
                "--metrics-port",
                &metrics,
                "--ct-log-url",
                "",
                "--config-path",
                &config_path,
                "--legacy-unix-domain-socket",
                &socket,
            ],
        )
    }

    fn start_tsa(&mut self) -> Result<()> {
        let port = self.tsa_port.to_string();
        self.spawn(
            "timestamp-server",
            &[
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--timestamp-signer",
                "memory",
                "--disable-ntp-monitoring",
            ],
        )
    }

    fn start_rekor(&mut self) -> Result<()> {
        // Rekor v2's checkpoints are signed notes named by the log's origin, which verifiers
        // take from the log's URL: the host name, here 127.0.0.1.
        let key = rcgen::KeyPair::generate().map_err(|err| Error::Tool(format!("key: {err}")))?;
        self.work
            .write("rekor.key", key.serialize_pem().as_bytes())?;
        self.work
            .write("rekor.pub", key.public_key_pem().as_bytes())?;
        let storage = self.work.path().join("rekor-storage");
        std::fs::create_dir_all(&storage).map_err(|source| Error::Io {
            path: storage.clone(),
            source,
        })?;
        let (http, grpc, metrics) = (
            self.rekor_port.to_string(),
            free_port()?.to_string(),
            free_port()?.to_string(),
        );
        let (storage, key) = (
            storage.display().to_string(),
            self.work.path().join("rekor.key").display().to_string(),
        );
        self.spawn(
            "rekor-server",
            &[
                "serve",
                "--hostname",
                "127.0.0.1",
                "--storage-dir",
                &storage,
                "--signer-filepath",
                &key,
                "--http-port",
                &http,
                "--grpc-port",
                &grpc,
                "--http-metrics-port",
                &metrics,
                "--checkpoint-interval",
                "1s",
            ],
        )
    }

    fn spawn(&mut self, name: &str, args: &[&str]) -> Result<()> {
        let path = tool(name)?;
        let log_path = self.work.path().join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).map_err(|source| Error::Io {
            path: log_path.clone(),
            source,
        })?;
        // `sh` runs the service and stops it once its standard input (this process's pipe)
        // closes: when the test process ends, or on drop.
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#""$0" "$@" & service=$!; cat >/dev/null; kill "$service" 2>/dev/null; wait "$service""#)
            .arg(&path)
            .args(args)
            .current_dir(self.work.path())
            .env("HOME", self.work.path())
            .stdin(Stdio::piped())
            .stdout(log.try_clone().map_err(|source| Error::Io {
                path: log_path.clone(),
                source,
            })?)
            .stderr(log)
            .spawn()
            .map_err(|source| Error::Io { path, source })?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    fn wait_serving(&mut self, name: &str, port: u16, path: &str) -> Result<()> {
        let at = Instant::now();
        loop {
            if http_get(port, path).is_ok() {
                return Ok(());
            }
            if let Some((_, child)) = self.children.iter_mut().find(|(n, _)| n == name)
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(Error::Start(format!(
                    "{name} exited with {status}: {}",
                    self.log_tail(name)
                )));
            }
            if at.elapsed() > Duration::from_secs(60) {
                return Err(Error::Start(format!(
                    "{name} not serving {path} after 60s: {}",
                    self.log_tail(name)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines of service `name`'s log.
    pub fn log_tail(&self, name: &str) -> String {
        let log = self.work.read(&format!("{name}.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The directory holding the trust roots, signing config, keys and bundles.
    pub fn dir(&self) -> &Path {
        self.work.path()
    }

    /// The work directory, to run cosign in.
    pub fn work(&self) -> &Workdir {
        &self.work
    }

    /// The OIDC issuer's URL (what Fulcio writes in the certificate's issuer extension).
    pub fn issuer(&self) -> &str {
        &self.oidc.url
    }

    fn fulcio_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.fulcio_port)
    }

    fn tsa_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/timestamp", self.tsa_port)
    }

    fn rekor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.rekor_port)
    }

    /// Writes a trust root naming what `spec` says to `name` with `cosign trusted-root create`;
    /// its JSON.
    pub fn trusted_root(&self, name: &str, spec: &RootSpec) -> Result<String> {
        let window = |window: &Window| {
            let mut text = String::new();
            if let Some(start) = &window.start {
                text.push_str(&format!(",start-time={start}"));
            }
            if let Some(end) = &window.end {
                text.push_str(&format!(",end-time={end}"));
            }
            text
        };
        let mut args: Vec<String> = vec!["trusted-root".into(), "create".into()];
        if let Some(fulcio) = &spec.fulcio {
            args.push("--fulcio".into());
            args.push(format!(
                "url={},certificate-chain=fulcio.pem{}",
                self.fulcio_url(),
                window(fulcio)
            ));
        }
        if let Some(tsa) = &spec.tsa {
            args.push("--tsa".into());
            args.push(format!(
                "url={},certificate-chain=tsa.pem{}",
                self.tsa_url(),
                window(tsa)
            ));
        }
        if spec.rekor {
            args.push("--rekor".into());
            args.push(format!(
                "url={},public-key=rekor.pub,start-time={EPOCH},origin=127.0.0.1",
                self.rekor_url()
            ));
        }
        args.push("--out".into());
        args.push(name.into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.work.run("cosign", &args)?;
        self.work.read(name)
    }

    /// Signs `bytes` keyless as `email` (an ID token from the issuer, a Fulcio certificate, a
    /// timestamp, a Rekor v2 entry), with `extra` cosign flags; the bundle's JSON.
    pub fn sign_keyless(&self, email: &str, bytes: &[u8], extra: &[&str]) -> Result<String> {
        let token = format!("{}.token", crate::unique_name("id"));
        self.work
            .write(&token, self.oidc.token(email)?.as_bytes())?;
        let token = self.work.path().join(token).display().to_string();
        let mut args = vec!["--identity-token", token.as_str()];
        args.extend_from_slice(extra);
        self.sign_blob(bytes, &args)
    }

    /// Signs `bytes` with cosign key `<prefix>.key` (made by [`Workdir::cosign_key`] in
    /// [`Sigstore::work`]), timestamped and logged; the bundle's JSON.
    pub fn sign_with_key(&self, prefix: &str, bytes: &[u8]) -> Result<String> {
        let key = format!("{prefix}.key");
        self.sign_blob(bytes, &["--key", &key])
    }

    fn sign_blob(&self, bytes: &[u8], extra: &[&str]) -> Result<String> {
        let blob = crate::unique_name("blob");
        let (artifact, bundle) = (format!("{blob}.wasm"), format!("{blob}.sigstore.json"));
        self.work.write(&artifact, bytes)?;
        let mut args = vec![
            "sign-blob",
            "--signing-config",
            "signing_config.json",
            "--trusted-root",
            "trusted_root.json",
            "--bundle",
            &bundle,
            "--yes",
        ];
        args.extend_from_slice(extra);
        args.push(&artifact);
        self.work.run("cosign", &args)?;
        self.work.read(&bundle)
    }
}

impl Drop for Sigstore {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| Error::Io {
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })
}

/// `GET path` on a loopback port; the body of a 200 answer.
fn http_get(port: u16, path: &str) -> Result<String> {
    let fail = |what: String| Error::Tool(format!("GET 127.0.0.1:{port}{path}: {what}"));
    let mut stream =
        TcpStream::connect(("127.0.0.1", port)).map_err(|err| fail(err.to_string()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|err| fail(err.to_string()))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|err| fail(err.to_string()))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|err| fail(err.to_string()))?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| fail("no HTTP answer".into()))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(fail(head.lines().next().unwrap_or_default().to_owned()));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Ok(dechunk(body));
    }
    Ok(body.to_owned())
}

/// The body of a chunked HTTP/1.1 answer.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// A minimal OpenID Connect issuer: the discovery document, its JWKS (one P-256 key) and ES256
/// ID tokens for any email, as Fulcio's `email` issuer type expects them (`email`,
/// `email_verified`, audience `sigstore`).
struct OidcIssuer {
    url: String,
    key: Arc<EcdsaKeyPair>,
}

impl OidcIssuer {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|source| Error::Io {
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })?;
        let port = listener
            .local_addr()
            .map_err(|source| Error::Io {
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })?
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let rng = SystemRandom::new();
        let key_error = |err: ring::error::Unspecified| Error::Tool(format!("OIDC key: {err}"));
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(key_error)?;
        let key = Arc::new(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .map_err(|err| Error::Tool(format!("OIDC key: {err}")))?,
        );
        // The public key is the uncompressed point 04 || x || y.
        let point = key.public_key().as_ref();
        let jwks = serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": "capstan",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]})
        .to_string();
        let discovery = serde_json::json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/auth"),
            "token_endpoint": format!("{url}/token"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
        .to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(stream, &discovery, &jwks);
            }
        });
        Ok(Self { url, key })
    }

    /// An ID token for `email`, valid for ten minutes.
    fn token(&self, email: &str) -> Result<String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": "capstan"});
        let claims = serde_json::json!({
            "iss": self.url, "sub": email, "aud": "sigstore", "email": email,
            "email_verified": true, "iat": now, "nbf": now, "exp": now + 600,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|err| Error::Tool(format!("OIDC token: {err}")))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }
}

/// Answers one HTTP request: the discovery document, the JWKS, or 404.
fn serve(mut stream: TcpStream, discovery: &str, jwks: &str) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buffer = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request);
    let path = request.split_whitespace().nth(1).unwrap_or_default();
    let (status, body) = if path.starts_with("/.well-known/openid-configuration") {
        ("200 OK", discovery)
    } else if path.starts_with("/jwks") {
        ("200 OK", jwks)
    } else {
        ("404 Not Found", "{}")
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}
