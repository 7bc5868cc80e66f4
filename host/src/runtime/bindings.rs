//! Host bindings, one module per supported version of the `capstan:provider` WIT package.
//!
//! Each module is a `bindgen!` over a that version's WIT (`wit/since_vX.Y.Z/` at the repository root,
//! the one copy the guests' SDK binds to as well),
//! plus the glue from its import traits to the version-independent [`crate::capability`] code. A
//! new minor version of the contract adds a module here and a [`WitVersion`] variant; old guests keep
//! loading with their own bindings (the pattern of Zed's extension host).

pub mod since_v0_1_0;

use std::fmt;

/// The package every provider's contract lives in.
pub const PACKAGE_NAMESPACE: &str = "capstan";
/// The package name.
pub const PACKAGE_NAME: &str = "provider";
/// The interface a provider exports.
pub const EXPORT_INTERFACE: &str = "cloud-provider";

/// The data types of the newest supported contract, used by the rest of the host.
pub use since_v0_1_0::capstan::provider::types;

/// A version of the contract this host can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WitVersion {
    /// `capstan:provider@0.1.x`.
    V0_1,
}

impl WitVersion {
    /// Every supported version, oldest first.
    pub const SUPPORTED: &[WitVersion] = &[WitVersion::V0_1];

    /// The newest supported version.
    pub const LATEST: WitVersion = WitVersion::V0_1;

    /// The supported version compatible with `major.minor` (semver: for `0.x` the minor number is
    /// the compatibility boundary), if any. A newer minor than the host knows is not supported: its
    /// guest may call imports the host does not have.
    pub fn for_version(major: u64, minor: u64) -> Option<Self> {
        match (major, minor) {
            (0, 1) => Some(WitVersion::V0_1),
            _ => None,
        }
    }

    /// `0.1`.
    pub fn as_str(self) -> &'static str {
        match self {
            WitVersion::V0_1 => "0.1",
        }
    }

    /// The supported versions, for messages: `0.1.x`.
    pub fn supported_list() -> String {
        Self::SUPPORTED
            .iter()
            .map(|v| format!("{}.x", v.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The functions the `cloud-provider` interface of this version exports.
    pub fn exported_functions(self) -> &'static [&'static str] {
        match self {
            WitVersion::V0_1 => &[
                "name",
                "get-instance-types",
                "create",
                "delete",
                "get",
                "list",
                "is-drifted",
                "repair-policies",
                "validate-node-class",
            ],
        }
    }
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(WitVersion::for_version(0, 1), Some(WitVersion::V0_1));
        assert_eq!(WitVersion::for_version(0, 2), None);
        assert_eq!(WitVersion::for_version(1, 0), None);
        assert_eq!(WitVersion::supported_list(), "0.1.x");
    }

    /// The bindings' WIT lists exactly the functions this version exports, in order.
    #[test]
    fn function_list_matches_the_wit() {
        let mut resolve = wit_parser::Resolve::default();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/since_v0.1.0");
        resolve.push_dir(dir).unwrap();
        let (_, iface) = resolve
            .interfaces
            .iter()
            .find(|(_, i)| i.name.as_deref() == Some(EXPORT_INTERFACE))
            .unwrap();
        let names: Vec<&str> = iface.functions.keys().map(String::as_str).collect();
        assert_eq!(names, WitVersion::V0_1.exported_functions());
    }
}
