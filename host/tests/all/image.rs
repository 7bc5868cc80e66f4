//! The host's OCI image (`make image`, `image/build.sh`): it holds what the Dockerfile's image holds
//! (the same user, entrypoint and environment, the base from `image/rootfs.sh`) and nothing else,
//! and, run with `runc` as the chart's Deployment runs it (read back from the API server after
//! `helm install` of the packaged chart: its arguments, environment, user, read-only root, dropped
//! capabilities, RuntimeDefault seccomp profile, volumes and memory limit; a ServiceAccount token from the TokenRequest API and the
//! cluster CA where the kubelet mounts them; `KUBERNETES_SERVICE_HOST`/`PORT` at the loopback API
//! server, so the in-cluster configuration is what it uses), it takes the Lease, loads the kwok
//! Provider from its ConfigMap, provisions pods to Running, answers `/healthz` and `/readyz`, and
//! exits 0 on SIGTERM after releasing the Lease.
//!
//! The image is read from `$CAPSTAN_CACHE/image/current` (`make image` and `make chart` write it;
//! `make e2e` runs both first). Running it needs root (runc creates the namespaces and cgroups);
//! the pod network is the host's (the API server listens on 127.0.0.1).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use capstan_test_support::{ControlPlane, repo_root, unique_name, wait_until};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ServiceAccount};
use kube::api::{ListParams, PostParams};
use kube::config::Kubeconfig;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::chart::{assert_nothing_forbidden, install_package, terminate, uninstall};
use crate::leader_election::{holder, http_get, kwok_pool, nodepool_pods};
use crate::lifecycle::{Names, cluster};
use crate::provisioner::{claims, namespace, teardown};

/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The image `make image` built last (`image/build.sh` writes `image.json` beside the layout).
pub struct BuiltImage {
    /// The image's directory: `oci/` (the layout), `image.json`, the packaged chart.
    pub dir: PathBuf,
    pub repository: String,
    pub tag: String,
    /// The manifest's digest, `sha256:...`.
    pub digest: String,
}

/// `$CAPSTAN_CACHE/image` (`CAPSTAN_CACHE` defaults to `~/.cache/capstan`, as in
/// tests/scripts/lib.sh).
fn image_cache() -> PathBuf {
    std::env::var_os("CAPSTAN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME")).join(".cache/capstan")
        })
        .join("image")
}

impl BuiltImage {
    /// `$CAPSTAN_IMAGE_DIR`, else `$CAPSTAN_CACHE/image/current`.
    pub fn current() -> Self {
        let dir = std::env::var_os("CAPSTAN_IMAGE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| image_cache().join("current"));
        let json = dir.join("image.json");
        let text = std::fs::read_to_string(&json).unwrap_or_else(|err| {
            panic!(
                "{}: {err}: build the image first (`make image`, `make chart`; `make e2e` does both)",
                json.display()
            )
        });
        let info: Value = serde_json::from_str(&text).unwrap();
        let field = |k: &str| info[k].as_str().unwrap().to_owned();
        Self {
            dir,
            repository: field("repository"),
            tag: field("tag"),
            digest: field("digest"),
        }
    }

    /// `repository:tag@digest`, as the packaged chart names it.
    pub fn reference(&self) -> String {
        format!("{}:{}@{}", self.repository, self.tag, self.digest)
    }

    /// The chart `make chart` packaged for this image.
    pub fn chart_package(&self) -> PathBuf {
        let mut packages: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("capstan-") && n.ends_with(".tgz"))
            })
            .collect();
        assert_eq!(
            packages.len(),
            1,
            "one packaged chart in {} (`make chart`): {packages:?}",
            self.dir.display()
        );
        packages.remove(0)
    }

    fn layout(&self) -> PathBuf {
        self.dir.join("oci")
    }

    fn blob(&self, digest: &str) -> Vec<u8> {
        let hex = digest.strip_prefix("sha256:").unwrap();
        std::fs::read(self.layout().join("blobs/sha256").join(hex)).unwrap()
    }

    /// The manifest the layout's index tags with `tag`.
    fn manifest(&self) -> Value {
        let index: Value =
            serde_json::from_slice(&std::fs::read(self.layout().join("index.json")).unwrap())
                .unwrap();
        let entry = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == self.tag.as_str())
            .unwrap_or_else(|| panic!("no manifest tagged {} in {index}", self.tag));
        assert_eq!(entry["digest"], self.digest.as_str(), "image.json's digest");
        serde_json::from_slice(&self.blob(&self.digest)).unwrap()
    }

    /// The image configuration (`config` of the config blob: User, Entrypoint, Env, ...).
    fn config(&self) -> Value {
        let manifest = self.manifest();
        let config: Value =
            serde_json::from_slice(&self.blob(manifest["config"]["digest"].as_str().unwrap()))
                .unwrap();
        config["config"].clone()
    }

    /// `tar -tvz` of each layer: (mode string, owner, path) per entry.
    fn listing(&self) -> Vec<(String, String, String)> {
        let manifest = self.manifest();
        let mut entries = Vec::new();
        for layer in manifest["layers"].as_array().unwrap() {
            assert_eq!(
                layer["mediaType"],
                "application/vnd.oci.image.layer.v1.tar+gzip"
            );
            let hex = layer["digest"]
                .as_str()
                .unwrap()
                .strip_prefix("sha256:")
                .unwrap()
                .to_owned();
            let out = Command::new("tar")
                .args(["--numeric-owner", "-tvzf"])
                .arg(self.layout().join("blobs/sha256").join(hex))
                .output()
                .unwrap();
            assert!(out.status.success(), "tar -tvz of a layer");
            for line in String::from_utf8(out.stdout).unwrap().lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                // mode owner size date time path [-> target]
                let path = fields[5].trim_start_matches("./").trim_end_matches('/');
                entries.push((fields[0].to_owned(), fields[1].to_owned(), path.to_owned()));
            }
        }
        entries
    }
}

/// The Dockerfile's final stage: its `USER`, `ENTRYPOINT`, `WORKDIR` and `ENV`, and its lines.
struct DockerfileStage {
    user: String,
    entrypoint: Vec<String>,
    workdir: String,
    env: Vec<String>,
    lines: Vec<String>,
}

fn dockerfile() -> (String, DockerfileStage) {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    // Continuation lines joined, comments dropped.
    let joined = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ");
    let lines: Vec<String> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let stage = &lines[last_from..];
    let arg = |instruction: &str| -> Option<String> {
        stage
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{instruction} ")))
            .map(|v| v.trim().to_owned())
    };
    let env = stage
        .iter()
        .filter_map(|l| l.strip_prefix("ENV "))
        .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let entrypoint = arg("ENTRYPOINT").expect("ENTRYPOINT in the final stage");
    (
        text,
        DockerfileStage {
            user: arg("USER").expect("USER in the final stage"),
            entrypoint: serde_json::from_str(&entrypoint).expect("ENTRYPOINT in exec (JSON) form"),
            workdir: arg("WORKDIR").unwrap_or_else(|| "/".to_owned()),
            env,
            lines: stage.to_vec(),
        },
    )
}

#[test]
fn the_image_and_the_dockerfile_agree_on_base_user_entrypoint_and_environment() {
    let image = BuiltImage::current();
    let config = image.config();
    let (text, stage) = dockerfile();
    assert_eq!(config["User"], stage.user.as_str(), "USER");
    assert_eq!(config["User"], "65532:65532");
    assert_eq!(
        config["Entrypoint"],
        serde_json::to_value(&stage.entrypoint).unwrap(),
        "ENTRYPOINT"
    );
    assert_eq!(config["WorkingDir"], stage.workdir.as_str(), "WORKDIR");
    let mut image_env: Vec<String> = config["Env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let mut docker_env = stage.env.clone();
    image_env.sort();
    docker_env.sort();
    assert_eq!(image_env, docker_env, "ENV");
    assert!(
        config["Cmd"].is_null(),
        "no Cmd: the chart passes only arguments"
    );
    // The same base: the final stage starts from nothing and copies the tree image/rootfs.sh laid
    // out, which is what image/build.sh packs.
    assert_eq!(stage.lines[0], "FROM scratch", "{:?}", stage.lines);
    assert!(
        text.contains("image/rootfs.sh /rootfs"),
        "the Dockerfile builds its root with image/rootfs.sh"
    );
    assert!(
        stage
            .lines
            .iter()
            .any(|l| l.starts_with("COPY --from=") && l.ends_with(" /rootfs /")),
        "{:?}",
        stage.lines
    );
}

#[test]
fn the_image_holds_the_binary_glibc_the_ca_bundle_and_the_nonroot_user_only() {
    let image = BuiltImage::current();
    let entries = image.listing();
    let owner = |path: &str| {
        entries
            .iter()
            .find(|(_, _, p)| p == path)
            .map(|(mode, owner, _)| (mode.as_str(), owner.as_str()))
            .unwrap_or_else(|| panic!("{path} not in the image"))
    };
    assert_eq!(owner("capstan"), ("-rwxr-xr-x", "0/0"));
    assert_eq!(owner("home/nonroot"), ("drwx------", "65532/65532"));
    assert_eq!(owner("tmp"), ("drwxrwxrwt", "0/0"));
    owner("etc/ssl/certs/ca-certificates.crt");
    owner("etc/passwd");
    owner("etc/os-release");
    owner("var/lib/dpkg/status.d/libc6");
    // Nothing but root owns anything else: the running user can write nowhere in the image.
    for (mode, who, path) in &entries {
        assert!(
            who == "0/0" || path == "home/nonroot",
            "{path} is {who} ({mode})"
        );
    }
    let top: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter_map(|(_, _, p)| p.split('/').next())
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    assert_eq!(
        top.into_iter().collect::<Vec<_>>(),
        [
            "capstan", "etc", "home", "lib", "lib64", "tmp", "usr", "var"
        ],
        "top-level entries"
    );
    // No shell, no tools: the only programs are the host and the dynamic loader.
    for (mode, _, path) in &entries {
        let executable = mode.starts_with('-') && mode.contains('x');
        if executable {
            assert!(
                path == "capstan" || path.contains(".so"),
                "{path} is an executable ({mode})"
            );
        }
        assert!(
            !path.starts_with("bin") && !path.starts_with("sbin") && !path.contains("/bin/"),
            "{path}"
        );
    }

    let config = image.config();
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        image.tag.as_str()
    );
    let packages = labels["dev.capstan.image.packages"].as_str().unwrap();
    for pkg in ["libc6=", "libgcc-s1=", "ca-certificates="] {
        assert!(packages.contains(pkg), "{pkg} in {packages}");
    }
}

/// A free TCP port on the loopback interface (the chart binds its ports on 0.0.0.0).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What the kubelet would know of the pod: its name and namespace, the API server's address.
struct PodContext {
    name: String,
    namespace: String,
    api_host: String,
    api_port: String,
}

/// The container's environment as the kubelet sets it: the image's, then the pod's `env` (field
/// references resolved), then the API server's Service variables and `HOSTNAME`.
fn container_env(image_env: &Value, container: &Container, pod: &PodContext) -> Vec<String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for entry in image_env.as_array().into_iter().flatten() {
        let (k, v) = entry.as_str().unwrap().split_once('=').unwrap();
        env.insert(k.to_owned(), v.to_owned());
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(from)) => {
                let field = from
                    .field_ref
                    .as_ref()
                    .unwrap_or_else(|| panic!("{}: only fieldRef is supported", var.name));
                match field.field_path.as_str() {
                    "metadata.name" => pod.name.clone(),
                    "metadata.namespace" => pod.namespace.clone(),
                    other => panic!("{}: fieldRef {other} is not supported here", var.name),
                }
            }
            other => panic!("{}: {other:?}", var.name),
        };
        env.insert(var.name.clone(), value);
    }
    env.insert("HOSTNAME".into(), pod.name.clone());
    env.insert("KUBERNETES_SERVICE_HOST".into(), pod.api_host.clone());
    env.insert("KUBERNETES_SERVICE_PORT".into(), pod.api_port.clone());
    env.insert("KUBERNETES_SERVICE_PORT_HTTPS".into(), pod.api_port.clone());
    env.into_iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// A read-write or read-only bind mount.
fn bind(source: &Path, destination: &str, read_only: bool) -> Value {
    let mut options = vec!["rbind", "nosuid", "nodev"];
    options.push(if read_only { "ro" } else { "rw" });
    json!({"destination": destination, "type": "bind", "source": source, "options": options})
}

/// Quantity in bytes (`1Gi`, `256Mi`, `512M`, plain bytes).
fn bytes(quantity: &str) -> i64 {
    for (suffix, factor) in [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("K", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ] {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<i64>().unwrap() * factor;
        }
    }
    quantity.parse().unwrap()
}

/// CPU shares for a CPU request, as the kubelet computes them (`100m` is 102).
fn cpu_shares(quantity: &str) -> u64 {
    let milli = match quantity.strip_suffix('m') {
        Some(m) => m.parse::<u64>().unwrap(),
        None => quantity.parse::<u64>().unwrap() * 1000,
    };
    (milli * 1024 / 1000).max(2)
}

/// The seccomp filter for `seccompProfile: RuntimeDefault` as CRI-O builds it: containers/common's
/// profile (`tests/scripts/lib.sh` unpacks it from Debian's golang-github-containers-common),
/// its rules kept or dropped by architecture and by the container's `capabilities`, in the
/// runtime spec's form.
fn runtime_default_seccomp(capabilities: &[String]) -> Value {
    let path = image_cache().join("seccomp.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| {
        panic!(
            "{}: {err} (tests/scripts/lib.sh ensure_seccomp_profile; `make e2e` runs it)",
            path.display()
        )
    });
    let profile: Value = serde_json::from_str(&text).unwrap();
    let (arch, scmp_arch) = match std::env::consts::ARCH {
        "x86_64" => ("amd64", "SCMP_ARCH_X86_64"),
        "aarch64" => ("arm64", "SCMP_ARCH_AARCH64"),
        other => panic!("no seccomp architecture for {other}"),
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let architectures: Vec<String> = profile["archMap"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["architecture"] == scmp_arch)
        .flat_map(|a| {
            std::iter::once(a["architecture"].as_str().unwrap().to_owned())
                .chain(strings(&a["subArchitectures"]))
        })
        .collect();
    let has = |cap: &String| capabilities.contains(cap);
    let mut syscalls = Vec::new();
    for rule in profile["syscalls"].as_array().unwrap() {
        let (includes, excludes) = (&rule["includes"], &rule["excludes"]);
        let arches = strings(&includes["arches"]);
        if !arches.is_empty() && !arches.iter().any(|a| a == arch) {
            continue;
        }
        if !strings(&includes["caps"]).iter().all(has) {
            continue;
        }
        if strings(&excludes["arches"]).iter().any(|a| a == arch)
            || strings(&excludes["caps"]).iter().any(has)
        {
            continue;
        }
        assert!(
            includes["minKernel"].is_null() || includes["minKernel"] == "",
            "minKernel rules are not handled: {rule}"
        );
        let mut syscall = json!({"names": rule["names"], "action": rule["action"]});
        if let Some(errno) = rule.get("errnoRet") {
            syscall["errnoRet"] = errno.clone();
        }
        let args: Vec<Value> = rule["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                json!({
                    "index": a["index"],
                    "value": a["value"],
                    "valueTwo": a["valueTwo"],
                    "op": a["op"],
                })
            })
            .collect();
        if !args.is_empty() {
            syscall["args"] = json!(args);
        }
        syscalls.push(syscall);
    }
    json!({
        "defaultAction": profile["defaultAction"],
        "defaultErrnoRet": profile["defaultErrnoRet"],
        "architectures": architectures,
        "syscalls": syscalls,
    })
}

/// Turns umoci's runtime configuration for the image (`umoci unpack`) into the one a kubelet
/// would hand runc for `pod`'s only container, with the host's network. `volumes` maps each of
/// the pod's volume names to a host directory; the ServiceAccount directory is mounted read-only.
fn runtime_config(
    mut config: Value,
    image_config: &Value,
    spec: &PodSpec,
    pod: &PodContext,
    volumes: &BTreeMap<String, PathBuf>,
    service_account: &Path,
    cgroup: &str,
) -> Value {
    assert_eq!(spec.containers.len(), 1, "one container");
    let container = &spec.containers[0];
    let pod_security = spec.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_default();

    // Entrypoint from the image unless the pod sets `command`; then the pod's `args`.
    let mut args: Vec<String> = match &container.command {
        Some(command) => command.clone(),
        None => serde_json::from_value(image_config["Entrypoint"].clone()).unwrap(),
    };
    args.extend(container.args.clone().unwrap_or_default());
    let process = &mut config["process"];
    process["terminal"] = json!(false);
    process["args"] = json!(args);
    process["env"] = json!(container_env(&image_config["Env"], container, pod));

    // The user: the container's, else the pod's, else the image's; fsGroup as a supplementary group.
    let uid = security.run_as_user.or(pod_security.run_as_user);
    let gid = security.run_as_group.or(pod_security.run_as_group);
    if let Some(uid) = uid {
        process["user"]["uid"] = json!(uid);
    }
    if let Some(gid) = gid {
        process["user"]["gid"] = json!(gid);
    }
    let mut groups: Vec<i64> = pod_security.supplemental_groups.clone().unwrap_or_default();
    groups.extend(pod_security.fs_group);
    process["user"]["additionalGids"] = json!(groups);
    if security
        .run_as_non_root
        .or(pod_security.run_as_non_root)
        .unwrap_or(false)
    {
        assert_ne!(process["user"]["uid"], 0, "runAsNonRoot with uid 0");
    }
    process["noNewPrivileges"] = json!(!security.allow_privilege_escalation.unwrap_or(true));
    // Capabilities: the runtime's defaults (umoci's) less `drop`, plus `add`.
    let capabilities = security.capabilities.clone().unwrap_or_default();
    let drop: Vec<String> = capabilities.drop.clone().unwrap_or_default();
    let add: Vec<String> = capabilities
        .add
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| format!("CAP_{c}"))
        .collect();
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        let current: Vec<String> =
            serde_json::from_value(process["capabilities"][set].clone()).unwrap_or_default();
        let mut kept: Vec<String> = if drop.iter().any(|d| d == "ALL") {
            Vec::new()
        } else {
            current
                .into_iter()
                .filter(|c| !drop.iter().any(|d| format!("CAP_{d}") == *c))
                .collect()
        };
        kept.extend(add.iter().cloned());
        process["capabilities"][set] = json!(kept);
    }
    let bounding: Vec<String> =
        serde_json::from_value(process["capabilities"]["bounding"].clone()).unwrap();
    let seccomp = security
        .seccomp_profile
        .clone()
        .or(pod_security.seccomp_profile.clone());
    match seccomp.as_ref().map(|p| p.type_.as_str()) {
        Some("RuntimeDefault") => config["linux"]["seccomp"] = runtime_default_seccomp(&bounding),
        None | Some("Unconfined") => {}
        Some(other) => panic!("seccompProfile {other} is not run here"),
    }

    config["root"]["readonly"] = json!(security.read_only_root_filesystem.unwrap_or(false));
    config["hostname"] = json!(pod.name);

    // The pod's volume mounts, the ServiceAccount's and /etc/hosts, as the kubelet adds them.
    let mounts = config["mounts"].as_array_mut().unwrap();
    for mount in container.volume_mounts.iter().flatten() {
        let source = volumes
            .get(&mount.name)
            .unwrap_or_else(|| panic!("no host directory for volume {}", mount.name));
        mounts.push(bind(
            source,
            &mount.mount_path,
            mount.read_only.unwrap_or(false),
        ));
    }
    if spec.automount_service_account_token.unwrap_or(true) {
        mounts.push(bind(service_account, SERVICE_ACCOUNT_DIR, true));
    }
    mounts.push(bind(Path::new("/etc/hosts"), "/etc/hosts", true));

    // The host's network namespace (hostNetwork); the others are the container's own.
    let linux = &mut config["linux"];
    let namespaces: Vec<Value> = linux["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["type"] != "network")
        .cloned()
        .collect();
    linux["namespaces"] = json!(namespaces);
    // A cgroup below the test's own (a relative path), with the container's limits.
    linux["cgroupsPath"] = json!(cgroup);
    let resources = container.resources.clone().unwrap_or_default();
    if let Some(memory) = resources.limits.as_ref().and_then(|l| l.get("memory")) {
        linux["resources"]["memory"] = json!({"limit": bytes(&memory.0)});
    }
    if let Some(cpu) = resources.requests.as_ref().and_then(|r| r.get("cpu")) {
        linux["resources"]["cpu"] = json!({"shares": cpu_shares(&cpu.0)});
    }
    config
}

/// The image run by `runc` (foreground, its output in a log file); killed and deleted on drop.
struct Runc {
    id: String,
    state: PathBuf,
    child: Option<Child>,
    log: PathBuf,
}

impl Runc {
    fn command(state: &Path) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(state);
        cmd
    }

    fn run(bundle: &Path, id: &str, state: &Path, log: &Path) -> Self {
        let file = std::fs::File::create(log).unwrap();
        let child = Self::command(state)
            .args(["run", "--bundle"])
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("runc (apt-get install runc)");
        Self {
            id: id.to_owned(),
            state: state.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "--- container {} ---\n{}",
            self.id,
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    }

    async fn wait_log(&self, needle: &str, timeout: Duration) {
        let found = wait_until(timeout, &format!("log {needle:?}"), || {
            let found = self.log().contains(needle);
            async move { Ok::<_, kube::Error>(found.then_some(())) }
        })
        .await;
        if let Err(err) = found {
            panic!("{err}\n{}", self.log_tail());
        }
    }

    /// The container's init process, as the host sees it (`runc state`).
    fn pid(&self) -> u32 {
        let out = Self::command(&self.state)
            .args(["state", &self.id])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "runc state: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let state: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(state["status"], "running", "{state}");
        u32::try_from(state["pid"].as_u64().unwrap()).unwrap()
    }

    fn kill(&self, signal: &str) {
        let status = Self::command(&self.state)
            .args(["kill", &self.id, signal])
            .status()
            .unwrap();
        assert!(status.success(), "runc kill {signal}");
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Runc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Self::command(&self.state)
                .args(["kill", &self.id, "KILL"])
                .status();
            let _ = child.wait();
        }
        let _ = Self::command(&self.state)
            .args(["delete", "--force", &self.id])
            .stderr(Stdio::null())
            .status();
    }
}

/// Removes a directory tree on drop (the unpacked image and the pod's volumes).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `/proc/<pid>/status` lines named `key`.
fn proc_status(pid: u32, key: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The memory cgroup in a `/proc/<pid>/cgroup` file: cgroup v1's memory hierarchy, else v2's.
fn memory_cgroup(file: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let path = |controllers: &str| {
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            (names.split(',').any(|n| n == controllers)
                || (controllers.is_empty() && names.is_empty()))
            .then(|| path.to_owned())
        })
    };
    path("memory")
        .or_else(|| path(""))
        .expect("a memory cgroup")
}

/// A token for the ServiceAccount, from the TokenRequest API (as the kubelet gets one).
async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("TokenRequest status")
        .token
}

/// The cluster CA (PEM) and the API server's host and port, from the control plane's kubeconfig.
fn api_server(cp: &ControlPlane) -> (Vec<u8>, String, String) {
    let kubeconfig = Kubeconfig::read_from(cp.kubeconfig_path()).unwrap();
    let cluster = kubeconfig.clusters[0].cluster.clone().unwrap();
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => {
            let value = serde_json::to_value(data).unwrap();
            let bytes: k8s_openapi::ByteString = serde_json::from_value(value).unwrap();
            bytes.0
        }
        (None, Some(file)) => std::fs::read(file).unwrap(),
        (None, None) => panic!("the control plane's kubeconfig has no CA"),
    };
    let server = cp.server().strip_prefix("https://").unwrap();
    let (host, port) = server.rsplit_once(':').unwrap();
    (ca, host.to_owned(), port.to_owned())
}

#[tokio::test]
async fn the_image_runs_under_runc_as_the_chart_runs_it_and_provisions_nodes() {
    let image = BuiltImage::current();
    let (cp, client) = cluster().await;
    let names = Names::new("image");
    let release_ns = namespace(cp, "capstan").await;
    let release = unique_name("img");
    let fullname = format!("{release}-capstan");
    let (metrics_port, health_port) = (free_port(), free_port());
    let provider = install_package(
        cp,
        &names,
        &release,
        &release_ns,
        &format!(
            "settings:\n  batchIdleDuration: 500ms\nmetrics:\n  port: {metrics_port}\nhealth:\n  port: \
             {health_port}\nextraArgs:\n  - --selector={}\n",
            names.selector()
        ),
    );

    // The Deployment as the API server holds it: what a kubelet would run.
    let deployment = Api::<Deployment>::namespaced(client.clone(), &release_ns)
        .get(&fullname)
        .await
        .unwrap();
    let spec = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some(image.reference().as_str())
    );
    let service_account = spec.service_account_name.clone().unwrap();

    // The pod's files: the unpacked image, its emptyDirs (group fsGroup, setgid, as the kubelet
    // leaves them) and its ServiceAccount directory.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let scratch = Scratch(tmp.join(format!("runc-{release}")));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let bundle = scratch.0.join("bundle");
    let unpack = Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!(
            "{}:{}",
            image.dir.join("oci").canonicalize().unwrap().display(),
            image.tag
        ))
        .arg(&bundle)
        .output()
        .expect("umoci (apt-get install umoci)");
    assert!(
        unpack.status.success(),
        "umoci unpack: {}",
        String::from_utf8_lossy(&unpack.stderr)
    );
    let fs_group = spec
        .security_context
        .as_ref()
        .and_then(|s| s.fs_group)
        .map(|g| u32::try_from(g).unwrap());
    let mut volumes = BTreeMap::new();
    for volume in spec.volumes.iter().flatten() {
        assert!(
            volume.empty_dir.is_some(),
            "volume {}: only emptyDir is run here",
            volume.name
        );
        let dir = scratch.0.join("volumes").join(&volume.name);
        std::fs::create_dir_all(&dir).unwrap();
        chown(&dir, Some(0), fs_group).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2777)).unwrap();
        volumes.insert(volume.name.clone(), dir);
    }
    let (ca, api_host, api_port) = api_server(cp);
    let token = service_account_token(&client, &release_ns, &service_account).await;
    let sa_dir = scratch.0.join("serviceaccount");
    std::fs::create_dir_all(&sa_dir).unwrap();
    for (file, content) in [
        ("token", token.as_bytes()),
        ("ca.crt", &ca[..]),
        ("namespace", release_ns.as_bytes()),
    ] {
        let path = sa_dir.join(file);
        std::fs::write(&path, content).unwrap();
        chown(&path, Some(0), fs_group).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    let pod = PodContext {
        name: format!("{fullname}-{}", &names.run[names.run.len() - 5..]),
        namespace: release_ns.clone(),
        api_host,
        api_port,
    };
    let config: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let config = runtime_config(
        config,
        &image.config(),
        &spec,
        &pod,
        &volumes,
        &sa_dir,
        &format!("capstan-test-{release}"),
    );
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&config).unwrap(),
    )
    .unwrap();

    let state = scratch.0.join("runc-state");
    let started = Instant::now();
    let mut container = Runc::run(&bundle, &release, &state, &scratch.0.join("log"));
    container
        .wait_log("acquired the lease", Duration::from_secs(120))
        .await;
    let lease_taken = started.elapsed();
    assert_eq!(
        holder(&client, &release_ns, &fullname).await.as_deref(),
        Some(pod.name.as_str()),
        "the Lease named in the chart's arguments, held as POD_NAME"
    );

    // The process runs as the chart says: its user and groups, no capabilities, no new
    // privileges, a read-only root.
    let pid = container.pid();
    assert_eq!(proc_status(pid, "Uid"), "65532 65532 65532 65532");
    assert_eq!(proc_status(pid, "Gid"), "65532 65532 65532 65532");
    assert_eq!(proc_status(pid, "Groups"), "65532");
    assert_eq!(proc_status(pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(pid, "CapBnd"), "0000000000000000");
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");
    assert_eq!(proc_status(pid, "Seccomp"), "2", "a seccomp filter");
    // Its cgroup is below the test's own, with the chart's memory limit.
    let (own, theirs) = (
        memory_cgroup("/proc/self/cgroup"),
        memory_cgroup(&format!("/proc/{pid}/cgroup")),
    );
    let name = format!("capstan-test-{release}");
    assert_eq!(
        theirs,
        Path::new(&own).join(&name).to_str().unwrap(),
        "the container's memory cgroup"
    );
    let limit = ["memory/", "unified/", ""]
        .iter()
        .map(|root| {
            let dir = format!("/sys/fs/cgroup/{root}{}", theirs.trim_start_matches('/'));
            std::fs::read_to_string(format!("{dir}/memory.limit_in_bytes"))
                .or_else(|_| std::fs::read_to_string(format!("{dir}/memory.max")))
        })
        .find_map(Result::ok)
        .expect("the container's memory limit file");
    assert_eq!(
        limit.trim(),
        (1i64 << 30).to_string(),
        "the chart's 1Gi limit"
    );
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .unwrap();
    let root_options = root.split_whitespace().nth(5).unwrap();
    assert!(
        root_options.split(',').any(|o| o == "ro"),
        "root mounted {root_options}"
    );

    let (status, body) = http_get(&format!("127.0.0.1:{health_port}"), "/healthz").await;
    assert_eq!(status, 200, "/healthz: {body}\n{}", container.log_tail());

    // The kwok Provider the chart installed, from its ConfigMap, provisions for pending pods.
    let pool = kwok_pool(&client, &names, &provider).await;
    let ns = namespace(cp, "imagepods").await;
    nodepool_pods(&client, &names, &ns, ("web", 3), &pool).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let running = wait_until(Duration::from_secs(180), "3 pods Running", || async {
        let list = pods.list(&ListParams::default()).await?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        Ok::<_, kube::Error>((running == 3).then_some(()))
    })
    .await;
    assert!(running.is_ok(), "{running:?}\n{}", container.log_tail());
    let provisioned = started.elapsed();
    let made = claims(&client, &names).await;
    assert!(!made.is_empty());
    let (status, body) = http_get(&format!("127.0.0.1:{health_port}"), "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}\n{}", container.log_tail());
    let (status, metrics) = http_get(&format!("127.0.0.1:{metrics_port}"), "/metrics").await;
    assert_eq!(status, 200, "/metrics");
    let loaded = format!(r#"capstan_provider_loads_total{{provider="{provider}",result="loaded""#);
    assert!(metrics.contains(&loaded), "{loaded} in:\n{metrics}");
    // The components compiled into the emptyDir at --cache-dir, written as the pod's user.
    let cache = &volumes["component-cache"];
    let compiled = walk(cache);
    assert!(
        !compiled.is_empty(),
        "nothing in the component cache {}",
        cache.display()
    );

    // Termination too (drain, delete the Node and the instance), then the rest of the test's
    // objects while the host still runs.
    let gone = terminate(&client, &names, &made, &ns).await;
    assert!(gone.is_ok(), "{gone:?}\n{}", container.log_tail());
    teardown(&client, &names, &ns).await;
    assert_nothing_forbidden(&container.log(), || container.log_tail());

    // SIGTERM, what the kubelet sends first: the host, PID 1 of its PID namespace, releases the
    // Lease and exits 0.
    container.kill("TERM");
    let exit = container.wait_exit(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|s| s.success()),
        "exit after SIGTERM: {exit:?}\n{}",
        container.log_tail()
    );
    assert!(container.log().contains("released the lease"));
    println!(
        "image {}: Lease taken {:.1?} after runc run, 3 pods Running after {:.1?}, {} \
         NodeClaim(s), {} component file(s) cached",
        image.reference(),
        lease_taken,
        provisioned,
        made.len(),
        compiled.len()
    );
    drop(container);
    uninstall(cp, &release, &release_ns);
}

/// The files below `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
