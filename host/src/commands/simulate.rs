//! `capstan simulate DUMP...`: what Capstan would do now on a dumped cluster (the NodeClaims it
//! would launch, the consolidation decision, nodes and $/h before and after), writing nothing
//! anywhere. The work is [`capstan::simulate`]; this reads the files, loads the components with
//! no cluster access and prints.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::jiff::Timestamp;

use capstan::capability::grants::Grants;
use capstan::provider::{Loader, ProviderSource, Registry};
use capstan::rules::selector::Selector;
use capstan::runtime::Limits;
use capstan::runtime::validate::DEFAULT_MAX_COMPONENT_SIZE;
use capstan::simulate::{self, FromRegistry, ProviderInfo, StandIn, dump};

use super::run::{FeatureGates, parse_feature_gates};
use super::{CacheArgs, block_on, parse_short_duration, print, read_component};

/// Arguments of `capstan simulate`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct SimulateArgs {
    /// Dump files: `kubectl get nodes,pods,nodepools,nodeclaims,daemonsets,pdb -A -o json`
    /// (a List), NodeClasses and namespaces (`kubectl get nodeclasses,namespaces -o yaml`), DRA's
    /// objects if pods use ResourceClaims (`kubectl get resourceclaims,resourceclaimtemplates,
    /// deviceclasses,resourceslices -A -o json`), in one file or several; JSON or YAML; `-` reads
    /// standard input.
    #[arg(required = true, value_name = "DUMP")]
    dumps: Vec<PathBuf>,
    /// A provider component: `FILE.wasm` serves every NodeClass's provider, `NAME=FILE.wasm` the
    /// NodeClasses with `spec.provider: NAME` (repeatable). Run with no cluster access: its
    /// `kube` calls are denied.
    #[arg(long = "provider", required = true, value_name = "[NAME=]FILE")]
    providers: Vec<String>,
    /// A NodeClass that stands in for the node class named NAME that pools refer to by a
    /// non-Capstan `nodeClassRef` (e.g. Karpenter's `karpenter.k8s.aws/EC2NodeClass NAME`):
    /// `NAME=FILE.yaml`, a `capstan.dev/v1alpha1` NodeClass or just its spec (`provider`,
    /// `parameters`) (repeatable).
    #[arg(long = "node-class", value_name = "NAME=FILE")]
    node_classes: Vec<String>,
    /// The NodeClass that stands in for every non-Capstan `nodeClassRef` not named by
    /// `--node-class`.
    #[arg(long, value_name = "FILE")]
    node_class_for_all: Option<PathBuf>,
    /// Simulate a host run with `--selector k=v,...`: only NodeClaims and NodePools with these
    /// labels are managed, and only pods and nodes with them are provisioned for and onto.
    #[arg(long)]
    selector: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Read each claim's `Consolidatable` condition from the dump. By default every initialized
    /// NodeClaim of a pool whose `consolidateAfter` is not `Never` is taken as consolidatable
    /// (as a host would mark it once no pod moved for `consolidateAfter`).
    #[arg(long)]
    consolidatable_from_dump: bool,
    /// Feature gates, as `capstan run` takes them (`SpotToSpotConsolidation=true`).
    #[arg(long, env = "FEATURE_GATES", default_value = "", value_parser = parse_feature_gates)]
    feature_gates: FeatureGates,
    /// The moment to simulate (RFC 3339; default now): budget schedules, do-not-disrupt
    /// durations, node lifetimes.
    #[arg(long)]
    now: Option<Timestamp>,
    /// Also print every managed node's consolidation verdict, as the host would write it on
    /// the NodeClaim after this pass (the `ConsolidationBlocked` condition `capstan explain`
    /// reads on a live cluster).
    #[arg(long)]
    explain: bool,
    /// How long the consolidation search may run.
    #[arg(long, default_value = "10s", value_parser = parse_short_duration)]
    search_timeout: Duration,
    #[command(flatten)]
    cache: CacheArgs,
}

const AFTER_HELP: &str = "\
Nothing is written anywhere: the dump is read from files and the provider runs with no cluster \
access. The provisioner's simulation and the consolidation search are the host's own code.

Consolidation considers a node only once its NodeClaim is Consolidatable; a dump of a cluster \
Capstan does not run has no such condition, so by default every initialized NodeClaim of a pool \
whose consolidateAfter is not Never is taken as consolidatable (--consolidatable-from-dump \
turns that off). Only nodes with a NodeClaim can be consolidated.

Example:
  kubectl get nodes,pods,nodepools,nodeclaims,daemonsets,pdb -A -o json > cluster.json
  kubectl get nodeclasses,namespaces -o yaml > classes.yaml
  kubectl get resourceclaims,resourceclaimtemplates,deviceclasses,resourceslices -A -o json > dra.json
  capstan simulate --provider kwok.wasm cluster.json classes.yaml dra.json
  capstan simulate --provider kwok.wasm --node-class-for-all standin.yaml -o json cluster.json";

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Aligned tables.
    Table,
    /// The JSON report (schema `capstan.dev/simulate/v1`, see docs/simulate.md).
    Json,
}

/// Runs the simulation and prints the report.
pub fn run(args: SimulateArgs) -> Result<ExitCode> {
    block_on(run_async(args))
}

async fn run_async(args: SimulateArgs) -> Result<ExitCode> {
    let selector = Selector::parse(args.selector.as_deref().unwrap_or(""))?;
    let mut dump = dump::Dump::new();
    let mut files = Vec::new();
    for path in &args.dumps {
        let (name, text) = read_text(path)?;
        dump.add_text(&name, &text)?;
        files.push(name);
    }
    let stand_ins = stand_ins(&mut dump, &args)?;
    let view = dump.view(&selector);

    let providers = load_providers(&args, &view).await?;
    let registry = Arc::new(Registry::new());
    for (name, info) in &providers {
        registry.insert(name.clone(), Arc::clone(&info.0));
    }
    let source = FromRegistry {
        registry,
        ..FromRegistry::default()
    };
    if args.feature_gates.node_overlay {
        let refused = source
            .apply_overlays(dump.overlays(), &view, &selector)
            .await;
        for (name, why) in refused {
            tracing::warn!(nodeoverlay = %name, "NodeOverlay not applied: {why}");
        }
    }
    let settings = simulate::Settings {
        selector,
        options: capstan::rules::consolidation::Options {
            spot_to_spot: args.feature_gates.spot_to_spot_consolidation,
            ..capstan::rules::consolidation::Options::default()
        },
        assume_consolidatable: !args.consolidatable_from_dump,
        now: args.now.unwrap_or_else(Timestamp::now),
        search_timeout: args.search_timeout,
        explain: args.explain,
    };
    let mut report = simulate::run(view, &source, &settings).await;
    report.input = simulate::Input {
        files,
        objects: dump.counts(),
        skipped_kinds: dump.skipped.clone(),
        stand_ins,
        providers: providers
            .iter()
            .map(|(name, (provider, file))| ProviderInfo {
                name: name.clone(),
                file: file.clone(),
                sha256: provider.sha256().to_owned(),
            })
            .collect(),
    };
    let text = match args.output {
        Output::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        Output::Table => simulate::table::render(&report),
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// A file's name (for messages) and text; `-` is standard input.
fn read_text(path: &Path) -> Result<(String, String)> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return Ok(("<stdin>".to_owned(), text));
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((path.display().to_string(), text))
}

/// Reads the stand-in NodeClasses and points the pools at them.
fn stand_ins(dump: &mut dump::Dump, args: &SimulateArgs) -> Result<Vec<StandIn>> {
    let mut by_name = HashMap::new();
    for flag in &args.node_classes {
        let (name, path) = flag
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .with_context(|| format!("--node-class {flag:?}: expected NAME=FILE"))?;
        let (file, text) = read_text(Path::new(path))?;
        let class = dump::stand_in(&file, &text, &format!("stand-in-{name}"))?;
        let class_name = kube::ResourceExt::name_any(&class);
        dump.add_stand_in(&file, class)?;
        by_name.insert(name.to_owned(), class_name);
    }
    let for_all = match &args.node_class_for_all {
        Some(path) => {
            let (file, text) = read_text(path)?;
            let class = dump::stand_in(&file, &text, "stand-in")?;
            let class_name = kube::ResourceExt::name_any(&class);
            dump.add_stand_in(&file, class)?;
            Some(class_name)
        }
        None => None,
    };
    let changed = dump.map_node_classes(&by_name, for_all.as_deref());
    let unused: BTreeSet<&String> = by_name
        .keys()
        .filter(|name| !changed.iter().any(|s| &&s.referenced == name))
        .collect();
    if !unused.is_empty() {
        tracing::warn!(names = ?unused, "--node-class: no NodePool refers to these node classes");
    }
    Ok(changed)
}

type Loaded = (Arc<capstan::runtime::ProviderPre>, String);

/// Loads the `--provider` components (no cluster, no grants) under the names NodeClasses use: a
/// bare file serves every name no `NAME=FILE` names.
async fn load_providers(
    args: &SimulateArgs,
    view: &capstan::state::View,
) -> Result<BTreeMap<String, Loaded>> {
    let runtime = Arc::new(args.cache.runtime()?);
    let loader = Arc::new(Loader::new(runtime, None, None));
    let mut named: BTreeMap<String, Loaded> = BTreeMap::new();
    let mut fallback: Option<Loaded> = None;
    for flag in &args.providers {
        let (name, path) = match flag.split_once('=') {
            Some((name, path)) if !name.is_empty() && !path.is_empty() => {
                (Some(name.to_owned()), path)
            }
            Some(_) => bail!("--provider {flag:?}: expected FILE or NAME=FILE"),
            None => (None, flag.as_str()),
        };
        let source = ProviderSource {
            name: name.clone().unwrap_or_else(|| "simulate".to_owned()),
            bytes: read_component(Path::new(path), DEFAULT_MAX_COMPONENT_SIZE)?,
            grants: Grants::none(),
            limits: Limits::default(),
            http: Default::default(),
            config: Default::default(),
        };
        let file_loader = Arc::clone(&loader);
        let provider = tokio::task::spawn_blocking(move || file_loader.load(source, None, None))
            .await
            .context("the loader task failed")?
            .with_context(|| path.to_owned())?;
        let loaded = (Arc::new(provider), path.to_owned());
        match name {
            Some(name) => {
                if named.insert(name.clone(), loaded).is_some() {
                    bail!("--provider {name}=...: given twice");
                }
            }
            None => {
                if fallback.replace(loaded).is_some() {
                    bail!("--provider: only one FILE without a NAME= (it serves every NodeClass)");
                }
            }
        }
    }
    if let Some(fallback) = fallback {
        for class in view.classes.values() {
            named
                .entry(class.spec.provider.clone())
                .or_insert_with(|| fallback.clone());
        }
    }
    Ok(named)
}
