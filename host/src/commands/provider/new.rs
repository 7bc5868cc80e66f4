//! `capstan provider new NAME --lang rust|python`: a provider skeleton that builds at once, with every
//! export answering `invalid("not implemented")`, the contract's WIT files as this host runs them,
//! a README, a Makefile (`build`, `test`, `package`) and an empty grants file.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use capstan::runtime::bindings::WitVersion;
use capstan::runtime::bindings::wit_files;

mod parts;

/// Arguments of `capstan provider new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The provider's name (a DNS label: lowercase letters, digits and `-`; it becomes the
    /// Provider resource's name and `name()`'s answer).
    name: String,
    /// The language of the skeleton.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    lang: Lang,
    /// Where to write it (default: `./NAME`). Must not exist or be empty.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The contract version (`0.1`; `0.2` for outbound HTTP and configuration values; `0.3` for
    /// paged lists as well; `0.4` for Karpenter v1.15's reboot, repair rules and registration
    /// hook; `0.5` for the DRA devices of instance types). Default: the newest the language's
    /// skeleton speaks (0.5 for Rust and Python).
    #[arg(long, value_parser = parse_contract)]
    contract: Option<WitVersion>,
}

/// Languages `provider new` writes skeletons in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// Rust with wit-bindgen, built by cargo for `wasm32-wasip2`.
    Rust,
    /// Python with componentize-py (pinned in `requirements.txt`) and Capstan's Python SDK.
    Python,
}

/// One language's skeleton: files (path, template) and the words its README needs.
struct Skeleton {
    /// The newest contract its templates (and SDK) speak.
    newest: WitVersion,
    files: &'static [(&'static str, &'static str)],
    language: &'static str,
    build_note: &'static str,
    file_notes: &'static str,
}

const README: &str = include_str!("new/README.md.tmpl");
const GRANTS: &str = include_str!("new/grants.yaml.tmpl");

const RUST: Skeleton = Skeleton {
    newest: WitVersion::V0_5,
    files: &[
        ("Cargo.toml", include_str!("new/rust/Cargo.toml.tmpl")),
        ("src/lib.rs", include_str!("new/rust/lib.rs.tmpl")),
        ("Makefile", include_str!("new/rust/Makefile.tmpl")),
    ],
    language: "Rust",
    build_note: "`cargo build --release --target wasm32-wasip2`; the component is \
                 `target/wasm32-wasip2/release/{{crate}}.wasm`",
    file_notes: "- `src/lib.rs`: the provider, one function per export of the contract.\n\
                 - `Cargo.toml`: its own workspace; `wit-bindgen` generates the contract's bindings.\n\
                 - `Makefile`: `build`, `test`, `package`.",
};

/// A module of the Python SDK, copied into a Python skeleton as `capstan_provider/FILE`: the
/// skeleton stands alone, and the SDK is the one this repository's tests run.
macro_rules! python_sdk {
    ($file:literal) => {
        (
            concat!("capstan_provider/", $file),
            include_str!(concat!(
                "../../../../providers-wasm/python/sdk/capstan_provider/",
                $file
            )),
        )
    };
}

const PYTHON_FILES: &[(&str, &str)] = &[
    ("app.py", include_str!("new/python/app.py.tmpl")),
    ("Makefile", include_str!("new/python/Makefile.tmpl")),
    (
        "tests/test_app.py",
        include_str!("new/python/test_app.py.tmpl"),
    ),
    (
        "requirements.txt",
        include_str!("../../../../providers-wasm/python/requirements.txt"),
    ),
    python_sdk!("__init__.py"),
    python_sdk!("catalog.py"),
    python_sdk!("devices.py"),
    python_sdk!("errors.py"),
    python_sdk!("host.py"),
    python_sdk!("kube.py"),
    python_sdk!("labels.py"),
    python_sdk!("lifecycle.py"),
    python_sdk!("params.py"),
    python_sdk!("provider.py"),
    python_sdk!("quantity.py"),
    python_sdk!("requirements.py"),
    python_sdk!("resources.py"),
    python_sdk!("types.py"),
];

const PYTHON: Skeleton = Skeleton {
    newest: WitVersion::V0_5,
    files: PYTHON_FILES,
    language: "Python",
    build_note: "componentize-py from `requirements.txt` in a venv under `.venv`; the component is \
                 `{{name}}.wasm`",
    file_notes: "- `app.py`: the provider, one method per export of the contract (class `CloudProvider`).\n\
                 - `capstan_provider/`: Capstan's Python SDK (catalog builder, requirements, quantities, \
                 labels, typed `kube`, parameters, `lifecycle`: what contract 0.4 adds, and `devices`: \
                 what 0.5 adds).\n\
                 - `requirements.txt`: componentize-py and pytest, pinned with hashes.\n\
                 - `tests/`: pytest tests of the pure logic (`make unit`).\n\
                 - `Makefile`: `build`, `test`, `package`, `unit`.",
};

fn skeleton(lang: Lang) -> &'static Skeleton {
    match lang {
        Lang::Rust => &RUST,
        Lang::Python => &PYTHON,
    }
}

fn parse_contract(text: &str) -> Result<WitVersion, String> {
    let mut parts = text.trim_start_matches('v').split('.');
    let major = parts.next().and_then(|p| p.parse().ok());
    let minor = parts.next().and_then(|p| p.parse().ok());
    match (major, minor) {
        (Some(major), Some(minor)) => WitVersion::for_version(major, minor).ok_or_else(|| {
            format!(
                "contract {text} is not one this host runs ({})",
                WitVersion::supported_list()
            )
        }),
        _ => Err(format!("{text:?} is not a contract version like 0.3")),
    }
}

/// Why `name` cannot name a provider, if it cannot (a DNS-1123 label, as Provider names are).
pub fn name_problem(name: &str) -> Option<String> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends_ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
    (name.is_empty() || name.len() > 63 || !ok_chars || !ends_ok).then(|| {
        format!(
            "{name:?} is not a provider name: 1-63 lowercase letters, digits and '-', \
             starting with a letter and ending with a letter or digit"
        )
    })
}

/// The files of a skeleton: relative path → contents.
pub fn render(name: &str, lang: Lang, contract: WitVersion) -> Vec<(PathBuf, String)> {
    let skeleton = skeleton(lang);
    let crate_name = name.replace('-', "_");
    let contract_text = format!("{}.0", contract.as_str());
    let contract_parts = parts::parts(lang, contract);
    let fill = |text: &str| {
        let text = contract_parts
            .iter()
            .fold(text.to_owned(), |text, (key, part)| text.replace(key, part));
        text.replace("{{build_note}}", skeleton.build_note)
            .replace("{{files}}", skeleton.file_notes)
            .replace("{{language}}", skeleton.language)
            .replace("{{contract}}", &contract_text)
            .replace("{{crate}}", &crate_name)
            .replace("{{name}}", name)
    };
    let mut out: Vec<(PathBuf, String)> = skeleton
        .files
        .iter()
        .chain([("README.md", README), ("grants.yaml", GRANTS)].iter())
        .map(|(path, text)| (PathBuf::from(path), fill(text)))
        .collect();
    out.extend(
        wit_files::files(contract)
            .iter()
            .map(|(path, text)| (Path::new("wit").join(path), (*text).to_owned())),
    );
    out
}

/// Writes the skeleton.
pub fn run(args: &NewArgs) -> Result<ExitCode> {
    if let Some(problem) = name_problem(&args.name) {
        bail!(problem);
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() {
        let mut entries =
            fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} exists and is not empty; choose another --dir",
                dir.display()
            );
        }
    }
    let newest = skeleton(args.lang).newest;
    let contract = args.contract.unwrap_or(newest);
    if contract > newest {
        bail!(
            "the {} skeleton speaks contracts up to {newest}; ask for --contract {newest} or older",
            skeleton(args.lang).language
        );
    }
    let files = render(&args.name, args.lang, contract);
    for (path, text) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!(
        "wrote {} ({} provider {}, contract capstan:provider@{}.0, {} files)",
        dir.display(),
        skeleton(args.lang).language,
        args.name,
        contract.as_str(),
        files.len()
    );
    println!(
        "next: cd {} && make test   (builds, then lists what is not implemented)",
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for good in ["a", "my-cloud", "cloud2", &"a".repeat(63)] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in ["", "My", "-a", "a-", "1a", "a_b", "a.b", &"a".repeat(64)] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn contract_versions_parse_as_the_host_knows_them() {
        assert_eq!(parse_contract("0.2"), Ok(WitVersion::V0_2));
        assert_eq!(parse_contract("v0.1"), Ok(WitVersion::V0_1));
        assert_eq!(parse_contract("0.2.0"), Ok(WitVersion::V0_2));
        assert_eq!(parse_contract("0.3"), Ok(WitVersion::V0_3));
        assert_eq!(parse_contract("0.4"), Ok(WitVersion::V0_4));
        assert!(
            parse_contract("0.9")
                .unwrap_err()
                .contains("not one this host runs")
        );
        assert!(parse_contract("x").is_err());
    }

    /// The skeleton's files by path, each checked to have no placeholder left.
    fn rendered(lang: Lang, contract: WitVersion) -> std::collections::HashMap<PathBuf, String> {
        let files = render("my-cloud", lang, contract);
        for (path, text) in &files {
            assert!(
                !text.contains("{{"),
                "{} keeps a placeholder",
                path.display()
            );
        }
        files.into_iter().collect()
    }

    fn get<'a>(files: &'a std::collections::HashMap<PathBuf, String>, path: &str) -> &'a str {
        files
            .get(Path::new(path))
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {path}"))
    }

    #[test]
    fn a_rust_skeleton_fills_every_placeholder_and_carries_the_contract() {
        let files = rendered(Lang::Rust, WitVersion::V0_3);
        assert!(get(&files, "Cargo.toml").contains("name = \"my_cloud\""));
        assert!(get(&files, "src/lib.rs").contains("\"my-cloud\".to_string()"));
        assert!(get(&files, "README.md").contains("capstan:provider@0.3.0"));
        assert!(get(&files, "Makefile").contains("release/my_cloud.wasm"));
        assert!(get(&files, "wit/provider.wit").contains("package capstan:provider@0.3.0"));
        assert!(get(&files, "wit/deps/http/http.wit").contains("wasi:http"));
        assert!(get(&files, "src/lib.rs").contains("-> Vec<RepairPolicy>"));
        let old = rendered(Lang::Rust, WitVersion::V0_1);
        assert!(!old.keys().any(|p| p.starts_with("wit/deps")));
        let v0_4 = rendered(Lang::Rust, WitVersion::V0_4);
        let lib = get(&v0_4, "src/lib.rs");
        assert!(lib.contains("-> Result<InstanceTypes, ProviderError>"));
        assert!(lib.contains("lifecycle::{\n    InstanceTypes"));
        assert!(lib.contains("fn reboot(_claim: NodeClaim, _operation_id: String)"));
        assert!(get(&v0_4, "wit/provider.wit").contains("package capstan:provider@0.4.0"));
        assert_eq!(skeleton(Lang::Rust).newest, WitVersion::V0_5);
        let newest = rendered(Lang::Rust, WitVersion::V0_5);
        let lib = get(&newest, "src/lib.rs");
        assert!(lib.contains("use bindings::capstan::provider::devices::InstanceTypes;"));
        assert!(lib.contains("-> Result<InstanceTypes, ProviderError>"));
        assert!(lib.contains("fn registered(_claim: NodeClaim)"));
        assert!(get(&newest, "wit/provider.wit").contains("package capstan:provider@0.5.0"));
    }

    #[test]
    fn a_python_skeleton_fills_every_placeholder_and_carries_the_sdk() {
        let files = rendered(Lang::Python, WitVersion::V0_1);
        assert!(get(&files, "app.py").contains("return \"my-cloud\""));
        assert!(get(&files, "Makefile").contains("my-cloud.wasm"));
        assert!(get(&files, "requirements.txt").contains("componentize-py=="));
        assert!(get(&files, "capstan_provider/catalog.py").contains("class CatalogBuilder"));
        assert!(get(&files, "README.md").contains("Python"));
        assert!(get(&files, "wit/provider.wit").contains("package capstan:provider@0.1.0"));
        let app = get(&files, "app.py");
        assert!(app.contains("from capstan_provider import errors\n"));
        assert!(app.contains("return ``builder.finish()``"));
        assert!(!app.contains("def reboot") && !app.contains("def registered"));
    }

    #[test]
    fn a_python_skeleton_speaks_0_5_by_default_and_0_4_on_request() {
        assert_eq!(skeleton(Lang::Python).newest, WitVersion::V0_5);
        for (contract, version) in [(WitVersion::V0_4, "0.4.0"), (WitVersion::V0_5, "0.5.0")] {
            let files = rendered(Lang::Python, contract);
            let app = get(&files, "app.py");
            assert!(app.contains(&format!("capstan:provider@{version}")));
            assert!(app.contains("from capstan_provider import errors, lifecycle\n"));
            assert!(app.contains("builder.finish_instance_types()"));
            assert!(app.contains("    def reboot(self, claim, operation_id):\n"));
            assert!(app.contains("        raise lifecycle.reboot_not_implemented()\n"));
            assert!(app.contains("    def registered(self, claim):\n"));
            assert!(app.contains("        return lifecycle.ready()\n"));
            // What the skeleton calls is in the SDK it carries.
            let lifecycle = get(&files, "capstan_provider/lifecycle.py");
            for function in ["def reboot_not_implemented(", "def ready(", "def wait("] {
                assert!(lifecycle.contains(function), "{function}");
            }
            assert!(
                get(&files, "capstan_provider/catalog.py").contains("def finish_instance_types(")
            );
            assert!(get(&files, "capstan_provider/devices.py").contains("class SliceBuilder"));
            let wit = get(&files, "wit/provider.wit");
            assert!(wit.contains(&format!("package capstan:provider@{version}")));
            assert!(wit.contains("interface lifecycle"));
        }
        let newest = rendered(Lang::Python, WitVersion::V0_5);
        assert!(get(&newest, "app.py").contains(".slices([...])"));
        assert!(get(&newest, "wit/provider.wit").contains("interface devices"));
    }
}
