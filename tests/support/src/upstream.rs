//! Upstream reference data: files of the pinned upstream Go modules (Karpenter, Cluster API) that
//! the tests read as data, straight from the Go module cache.
//!
//! The module versions are pinned in `tests/control-plane/upstream.env`; `tests/control-plane/cp
//! upstream` finds each module in the Go module cache, downloading it through the Go module proxy
//! the first time. This file is the one list of which files the tests use, at which paths in the
//! modules. Without the module cache and without the proxy, [`UpstreamFile::read`] and
//! [`UpstreamFile::path`] fail with a message saying what is missing and how to get it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::{Error, Result, io_err, repo_root};

/// An upstream Go module pinned in `tests/control-plane/upstream.env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    /// `sigs.k8s.io/karpenter`: the karpenter.sh CRDs, the kwok node class and examples.
    Karpenter,
    /// `sigs.k8s.io/cluster-api`: the Cluster API CRDs.
    ClusterApi,
}

impl Module {
    /// The Go module path.
    pub fn path(self) -> &'static str {
        match self {
            Module::Karpenter => "sigs.k8s.io/karpenter",
            Module::ClusterApi => "sigs.k8s.io/cluster-api",
        }
    }

    /// The module's directory in the Go module cache (read-only), downloading it if needed.
    pub fn dir(self) -> Result<PathBuf> {
        let modules = module_dirs().clone().map_err(Error::Upstream)?;
        modules
            .into_iter()
            .find(|(module, _)| module.split_once('@').map(|(path, _)| path) == Some(self.path()))
            .map(|(_, dir)| dir)
            .ok_or_else(|| {
                Error::Upstream(format!(
                    "tests/control-plane/cp upstream printed no directory for {} \
                     (is it pinned in tests/control-plane/upstream.env?)",
                    self.path()
                ))
            })
    }
}

/// A file of an upstream module, or a range of its lines (an example that upstream keeps only
/// inside Markdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamFile {
    /// The module holding it.
    pub module: Module,
    /// Its path inside the module.
    pub path: &'static str,
    /// First and last line (1-based, inclusive) of the excerpt, or `None` for the whole file.
    pub lines: Option<(usize, usize)>,
}

impl UpstreamFile {
    const fn whole(module: Module, path: &'static str) -> Self {
        UpstreamFile {
            module,
            path,
            lines: None,
        }
    }

    const fn excerpt(module: Module, path: &'static str, first: usize, last: usize) -> Self {
        UpstreamFile {
            module,
            path,
            lines: Some((first, last)),
        }
    }

    /// The file on disk (for an excerpt: the whole file it is taken from).
    pub fn path(&self) -> Result<PathBuf> {
        let path = self.module.dir()?.join(self.path);
        if !path.is_file() {
            return Err(Error::Upstream(format!(
                "{} is not in module {} (see tests/support/src/upstream.rs)",
                self.path,
                self.module.path()
            )));
        }
        Ok(path)
    }

    /// The text: the whole file, or the excerpt's lines each ending in a newline.
    pub fn read(&self) -> Result<String> {
        let path = self.path()?;
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        match self.lines {
            None => Ok(text),
            Some((first, last)) => excerpt(&text, first, last)
                .ok_or_else(|| Error::Upstream(format!("{self}: the file has fewer lines"))),
        }
    }
}

impl std::fmt::Display for UpstreamFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.module.path(), self.path)?;
        if let Some((first, last)) = self.lines {
            write!(f, "#L{first}-L{last}")?;
        }
        Ok(())
    }
}

/// Lines `first..=last` (1-based) of `text`, each with a final newline.
fn excerpt(text: &str, first: usize, last: usize) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .skip(first.checked_sub(1)?)
        .take(last.checked_sub(first)? + 1)
        .collect();
    (lines.len() == last - first + 1).then(|| lines.iter().map(|l| format!("{l}\n")).collect())
}

use Module::{ClusterApi, Karpenter};

const fn karpenter(path: &'static str) -> UpstreamFile {
    UpstreamFile::whole(Karpenter, path)
}

const fn cluster_api(path: &'static str) -> UpstreamFile {
    UpstreamFile::whole(ClusterApi, path)
}

/// The karpenter.sh/v1 NodePool CRD.
pub const KARPENTER_NODEPOOLS_CRD: UpstreamFile =
    karpenter("pkg/apis/crds/karpenter.sh_nodepools.yaml");
/// The karpenter.sh/v1 NodeClaim CRD.
pub const KARPENTER_NODECLAIMS_CRD: UpstreamFile =
    karpenter("pkg/apis/crds/karpenter.sh_nodeclaims.yaml");
/// The KWOKNodeClass of upstream's e2e tests, which their default NodePool refers to (upstream
/// spells the file "kowk").
pub const DEFAULT_KWOK_NODECLASS: UpstreamFile =
    karpenter("test/pkg/environment/common/default_kowknodeclass.yaml");

/// Karpenter's CRDs: NodePool, NodeClaim and KWOKNodeClass (v1alpha1, the kwok examples' class).
pub const KARPENTER_CRDS: [UpstreamFile; 3] = [
    KARPENTER_NODEPOOLS_CRD,
    KARPENTER_NODECLAIMS_CRD,
    karpenter("kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml"),
];

/// Cluster API's CRDs the clusterapi provider works with: Machine, MachineSet, MachineDeployment
/// (each serving v1beta1, deprecated, and v1beta2).
pub const CLUSTER_API_CRDS: [UpstreamFile; 3] = [
    cluster_api("core/config/crd/bases/cluster.x-k8s.io_machines.yaml"),
    cluster_api("core/config/crd/bases/cluster.x-k8s.io_machinesets.yaml"),
    cluster_api("core/config/crd/bases/cluster.x-k8s.io_machinedeployments.yaml"),
];

/// Every upstream manifest holding a NodePool, one NodePool each: the NodePool of upstream's e2e
/// tests (1-space indentation, no final newline, as upstream); the kwok README's NodePool
/// `default` (spot) with its KWOKNodeClass, the body of its `cat <<EOF | kubectl apply` heredoc;
/// the test README's template NodePool, whose nodeClassRef is the placeholder
/// `karpenter.yourprovider.com/YourProviderNodeClass`, the body of its YAML block.
pub const NODEPOOL_EXAMPLES: [UpstreamFile; 3] = [
    karpenter("test/pkg/environment/common/default_nodepool.yaml"),
    UpstreamFile::excerpt(Karpenter, "kwok/README.md", 29, 60),
    UpstreamFile::excerpt(Karpenter, "test/README.md", 81, 107),
];

/// The paths of these (whole) files, for [`crate::ControlPlane::install_crds_from_files`].
pub fn paths(files: &[UpstreamFile]) -> Result<Vec<PathBuf>> {
    files.iter().map(UpstreamFile::path).collect()
}

static MODULE_DIRS: OnceLock<Result<Vec<(String, PathBuf)>, String>> = OnceLock::new();

/// `MODULE@VERSION` and directory of every pinned module, from `cp upstream` (run once per process).
fn module_dirs() -> &'static Result<Vec<(String, PathBuf)>, String> {
    MODULE_DIRS.get_or_init(|| {
        let script = repo_root().join("tests").join("control-plane").join("cp");
        run_cp_upstream(&script)
    })
}

fn run_cp_upstream(script: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let out = Command::new("bash")
        .arg(script)
        .arg("upstream")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "run {} upstream: {e} (the upstream test data comes from the Go module cache)",
                script.display()
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} upstream exited with {}:\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(stdout
        .lines()
        .filter_map(|line| line.split_once(' '))
        .map(|(module, dir)| (module.to_owned(), PathBuf::from(dir.trim())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_whole_lines_with_final_newlines() {
        let text = "a\nb\nc\nd";
        assert_eq!(excerpt(text, 2, 3).as_deref(), Some("b\nc\n"));
        assert_eq!(excerpt(text, 4, 4).as_deref(), Some("d\n"));
        assert_eq!(excerpt(text, 3, 5), None);
        assert_eq!(excerpt(text, 0, 1), None);
        assert_eq!(excerpt(text, 3, 2), None);
    }

    #[test]
    fn names_say_module_path_and_lines() {
        assert_eq!(
            NODEPOOL_EXAMPLES[1].to_string(),
            "sigs.k8s.io/karpenter/kwok/README.md#L29-L60"
        );
        assert_eq!(
            CLUSTER_API_CRDS[0].to_string(),
            "sigs.k8s.io/cluster-api/core/config/crd/bases/cluster.x-k8s.io_machines.yaml"
        );
    }
}
