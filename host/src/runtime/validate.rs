//! Checks on untrusted component bytes, before anything is compiled.
//!
//! [`inspect`] reads what a component is (size, digest, the WIT interfaces it imports and
//! exports) and [`ComponentInfo::provider_version`] decides whether it is a provider this host can
//! run. Each refusal names the problem: too large, not wasm, a core module, a component of another
//! world, an unsupported contract version, a missing function.

use serde::Serialize;
use sha2::{Digest, Sha256};
use wit_parser::decoding::{DecodedWasm, decode};
use wit_parser::{Resolve, WorldItem, WorldKey};

use crate::runtime::bindings::{EXPORT_INTERFACE, PACKAGE_NAME, PACKAGE_NAMESPACE, WitVersion};
use crate::runtime::node_class_kinds::{self, DeclarationError, DeclaredKind};

/// The default size limit of a component (32 MiB).
pub const DEFAULT_MAX_COMPONENT_SIZE: usize = 32 << 20;

/// Why component bytes are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidateError {
    /// Larger than the configured limit.
    #[error("component is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Does not start with the wasm magic number.
    #[error("not a WebAssembly file (it does not start with the `\\0asm` magic number)")]
    NotWasm,
    /// A core module.
    #[error(
        "a core WebAssembly module, not a component; build with the wasm32-wasip2 target or wrap \
         it with `wasm-tools component new`"
    )]
    CoreModule,
    /// A WIT package encoded as wasm, with no implementation.
    #[error("a WIT package (interface definitions only), not a component that implements one")]
    WitPackage,
    /// Wasm, but not a well-formed component.
    #[error("malformed component: {0}")]
    Malformed(String),
    /// Does not export the `cloud-provider` interface.
    #[error(
        "component does not export {PACKAGE_NAMESPACE}:{PACKAGE_NAME}/{EXPORT_INTERFACE} (it is \
         built for another world); it exports: {}", list_or_nothing(.exports)
    )]
    WrongWorld {
        /// What it exports instead.
        exports: Vec<String>,
    },
    /// Exports a contract version this host cannot run.
    #[error(
        "component implements {PACKAGE_NAMESPACE}:{PACKAGE_NAME}@{found}, which this host does not \
         support (supported: {supported})"
    )]
    UnsupportedVersion {
        /// The version found (`unversioned` if none).
        found: String,
        /// The supported versions.
        supported: String,
    },
    /// Declares node class kinds it cannot serve (its `capstan:node-class-crds` section).
    #[error(transparent)]
    NodeClassKinds(#[from] DeclarationError),
    /// Exports the interface without every function.
    #[error("component exports {interface} without the function(s): {}", .missing.join(", "))]
    MissingExport {
        /// The exported interface.
        interface: String,
        /// The functions it lacks.
        missing: Vec<String>,
    },
}

fn list_or_nothing(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}

/// An imported or exported interface (or a bare function or instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InterfaceInfo {
    /// The full name: `capstan:provider/cloud-provider@0.1.0`, or a bare name.
    pub name: String,
    /// `namespace:package`, if the interface belongs to a package.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The package version, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The interface's functions.
    pub functions: Vec<String>,
}

/// What a component is, read from its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ComponentInfo {
    /// Size in bytes.
    pub size: usize,
    /// Hex sha256 of the bytes.
    pub sha256: String,
    /// What it exports.
    pub exports: Vec<InterfaceInfo>,
    /// What it imports.
    pub imports: Vec<InterfaceInfo>,
    /// The node class kinds it declares (its `capstan:node-class-crds` section).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_class_kinds: Vec<DeclaredKind>,
}

/// The `cloud-provider` export of a valid provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderExport {
    /// The interface's full name.
    pub interface: String,
    /// The package version (`0.1.0`).
    pub version: String,
    /// The bindings that run it.
    #[serde(serialize_with = "serialize_display")]
    pub wit: WitVersion,
}

fn serialize_display<S: serde::Serializer>(v: &WitVersion, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Reads what `bytes` are, refusing anything that is not a well-formed component of at most
/// `max_size` bytes.
pub fn inspect(bytes: &[u8], max_size: usize) -> Result<ComponentInfo, ValidateError> {
    if bytes.len() > max_size {
        return Err(ValidateError::TooLarge {
            size: bytes.len(),
            limit: max_size,
        });
    }
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(ValidateError::NotWasm);
    }
    if wasmparser::Parser::is_core_wasm(bytes) {
        return Err(ValidateError::CoreModule);
    }
    if !wasmparser::Parser::is_component(bytes) {
        return Err(ValidateError::Malformed(format!(
            "unknown WebAssembly binary version {:02x?}",
            &bytes[4..8]
        )));
    }
    // Walk every section once (reading the node class kinds on the way): a truncated or corrupt
    // file fails here with the parser's message (WIT decoding alone reads only the type
    // information it needs).
    let declared = node_class_kinds::section(bytes).map_err(ValidateError::Malformed)?;
    let node_class_kinds = match declared {
        Some(text) => node_class_kinds::parse(&text)?,
        None => Vec::new(),
    };
    // The decoder sees untrusted bytes: a bug in it must refuse this component, not take the host
    // down.
    let decoded = std::panic::catch_unwind(|| decode(bytes)).map_err(|_| {
        ValidateError::Malformed("the WIT decoder could not read this component".into())
    })?;
    let (resolve, world) = match decoded {
        Ok(DecodedWasm::Component(resolve, world)) => (resolve, world),
        Ok(DecodedWasm::WitPackage(..)) => return Err(ValidateError::WitPackage),
        Err(err) => return Err(ValidateError::Malformed(format!("{err:#}"))),
    };
    let world = &resolve.worlds[world];
    let describe_all = |items: &wit_parser::IndexMap<WorldKey, WorldItem>| {
        items
            .iter()
            .map(|(key, item)| describe(&resolve, key, item))
            .collect::<Vec<_>>()
    };
    Ok(ComponentInfo {
        size: bytes.len(),
        sha256: hex::encode(Sha256::digest(bytes)),
        exports: describe_all(&world.exports),
        imports: describe_all(&world.imports),
        node_class_kinds,
    })
}

fn describe(resolve: &Resolve, key: &WorldKey, item: &WorldItem) -> InterfaceInfo {
    match (key, item) {
        (WorldKey::Interface(id), WorldItem::Interface { .. }) => {
            let iface = &resolve.interfaces[*id];
            let package = iface.package.map(|p| &resolve.packages[p].name);
            InterfaceInfo {
                name: resolve
                    .id_of(*id)
                    .unwrap_or_else(|| resolve.name_world_key(key)),
                package: package.map(|p| format!("{}:{}", p.namespace, p.name)),
                version: package
                    .and_then(|p| p.version.as_ref())
                    .map(|v| v.to_string()),
                functions: iface.functions.keys().cloned().collect(),
            }
        }
        (_, WorldItem::Interface { id, .. }) => InterfaceInfo {
            name: resolve.name_world_key(key),
            package: None,
            version: None,
            functions: resolve.interfaces[*id].functions.keys().cloned().collect(),
        },
        (_, WorldItem::Function(f)) => InterfaceInfo {
            name: resolve.name_world_key(key),
            package: None,
            version: None,
            functions: vec![f.name.clone()],
        },
        (_, WorldItem::Type { .. }) => InterfaceInfo {
            name: resolve.name_world_key(key),
            package: None,
            version: None,
            functions: Vec::new(),
        },
    }
}

impl ComponentInfo {
    /// The provider contract this component implements, if this host can run it.
    pub fn provider_version(&self) -> Result<ProviderExport, ValidateError> {
        let package = format!("{PACKAGE_NAMESPACE}:{PACKAGE_NAME}");
        let export = self.exports.iter().find(|e| {
            e.package.as_deref() == Some(package.as_str())
                && e.name.split(['/', '@']).nth(1) == Some(EXPORT_INTERFACE)
        });
        let Some(export) = export else {
            return Err(ValidateError::WrongWorld {
                exports: self.exports.iter().map(|e| e.name.clone()).collect(),
            });
        };
        let unsupported = |found: String| ValidateError::UnsupportedVersion {
            found,
            supported: WitVersion::supported_list(),
        };
        let version = export
            .version
            .clone()
            .ok_or_else(|| unsupported("unversioned".into()))?;
        let mut parts = version.split(['.', '-', '+']).map(str::parse::<u64>);
        let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
            return Err(unsupported(version));
        };
        let wit =
            WitVersion::for_version(major, minor).ok_or_else(|| unsupported(version.clone()))?;
        let missing: Vec<String> = wit
            .exported_functions()
            .iter()
            .filter(|f| !export.functions.iter().any(|have| have == *f))
            .map(|f| (*f).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(ValidateError::MissingExport {
                interface: export.name.clone(),
                missing,
            });
        }
        Ok(ProviderExport {
            interface: export.name.clone(),
            version,
            wit,
        })
    }
}

/// [`inspect`] then [`ComponentInfo::provider_version`].
pub fn validate(
    bytes: &[u8],
    max_size: usize,
) -> Result<(ComponentInfo, ProviderExport), ValidateError> {
    let info = inspect(bytes, max_size)?;
    let export = info.provider_version()?;
    Ok((info, export))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_by_header() {
        assert_eq!(inspect(b"hello world", 1024), Err(ValidateError::NotWasm));
        assert_eq!(inspect(b"", 1024), Err(ValidateError::NotWasm));
        assert_eq!(
            inspect(&[0u8; 2000], 1024),
            Err(ValidateError::TooLarge {
                size: 2000,
                limit: 1024
            })
        );
        assert_eq!(
            inspect(b"\0asm\x01\0\0\0", 1024),
            Err(ValidateError::CoreModule)
        );
        assert!(matches!(
            inspect(b"\0asm\x07\0\0\0", 1024),
            Err(ValidateError::Malformed(_))
        ));
    }

    #[test]
    fn messages_name_the_problem() {
        let err = ValidateError::WrongWorld {
            exports: vec!["wasi:cli/run@0.2.0".into()],
        };
        assert_eq!(
            err.to_string(),
            "component does not export capstan:provider/cloud-provider (it is built for another \
             world); it exports: wasi:cli/run@0.2.0"
        );
        let err = ValidateError::UnsupportedVersion {
            found: "1.0.0".into(),
            supported: "0.1.x".into(),
        };
        assert_eq!(
            err.to_string(),
            "component implements capstan:provider@1.0.0, which this host does not support \
             (supported: 0.1.x)"
        );
    }
}
