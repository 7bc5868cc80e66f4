//! The contract's WIT files as this host was built with them, so tools (`capstan provider new`)
//! can hand a provider author the exact contract the host runs, with no copy to drift.

use super::WitVersion;

/// One WIT file: its path relative to the version's directory (`provider.wit`,
/// `deps/http/http.wit`) and its text.
pub type WitFile = (&'static str, &'static str);

macro_rules! wit_files {
    ($dir:literal: $($path:literal),+ $(,)?) => {
        &[$(($path, include_str!(concat!("../../../../wit/", $dir, "/", $path)))),+]
    };
}

const V0_1: &[WitFile] = wit_files!("since_v0.1.0": "provider.wit");

/// A contract of 0.2 or later: its package and the standard WASI packages under `deps/` (the
/// later versions' `deps` are links to 0.2's).
macro_rules! with_wasi_deps {
    ($dir:literal) => {
        wit_files!($dir:
            "provider.wit",
            "deps/cli/cli.wit",
            "deps/clocks/clocks.wit",
            "deps/config/store.wit",
            "deps/config/world.wit",
            "deps/filesystem/filesystem.wit",
            "deps/http/http.wit",
            "deps/io/io.wit",
            "deps/random/random.wit",
            "deps/sockets/sockets.wit",
        )
    };
}

const V0_2: &[WitFile] = with_wasi_deps!("since_v0.2.0");

const V0_3: &[WitFile] = with_wasi_deps!("since_v0.3.0");

const V0_4: &[WitFile] = with_wasi_deps!("since_v0.4.0");

const V0_5: &[WitFile] = with_wasi_deps!("since_v0.5.0");

/// Every file of `version`'s contract (the package and the WASI packages it imports).
pub fn files(version: WitVersion) -> &'static [WitFile] {
    match version {
        WitVersion::V0_1 => V0_1,
        WitVersion::V0_2 => V0_2,
        WitVersion::V0_3 => V0_3,
        WitVersion::V0_4 => V0_4,
        WitVersion::V0_5 => V0_5,
    }
}

/// The directory under the repository's `wit/` holding `version`.
pub fn directory(version: WitVersion) -> &'static str {
    match version {
        WitVersion::V0_1 => "since_v0.1.0",
        WitVersion::V0_2 => "since_v0.2.0",
        WitVersion::V0_3 => "since_v0.3.0",
        WitVersion::V0_4 => "since_v0.4.0",
        WitVersion::V0_5 => "since_v0.5.0",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    use super::*;

    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "wit") {
                let rel = path.strip_prefix(root).unwrap();
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// A file added to (or removed from) a contract directory must be listed here too, or
    /// `provider new` would hand out a contract that does not resolve.
    #[test]
    fn every_wit_file_of_each_version_is_embedded() {
        for &version in WitVersion::SUPPORTED {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../wit")
                .join(directory(version));
            let mut on_disk = BTreeSet::new();
            walk(&root, &root, &mut on_disk);
            let embedded: BTreeSet<String> = files(version)
                .iter()
                .map(|(p, _)| (*p).to_owned())
                .collect();
            assert_eq!(embedded, on_disk, "contract {}", version.as_str());
            for (path, text) in files(version) {
                assert_eq!(
                    *text,
                    std::fs::read_to_string(root.join(path)).unwrap(),
                    "{path}"
                );
            }
        }
    }
}
