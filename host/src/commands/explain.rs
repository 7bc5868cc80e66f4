//! `capstan explain node NAME` and `capstan explain nodepool NAME`: why a node is, or is not,
//! consolidated, on a live cluster, read-only; `capstan explain pod NAME`: what the host last
//! decided for a pod. The answer is [`capstan::explain`] over the
//! objects as listed now (the host's `ConsolidationBlocked` verdicts, with the numbers behind
//! them); this lists them and prints.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use capstan::api::{NodeClaim, NodePool};
use capstan::explain::{self, pod, table};
use capstan::state::View;

use super::{block_on, client, print};

/// Arguments of `capstan explain`.
#[derive(Debug, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct ExplainArgs {
    #[command(subcommand)]
    what: What,
    /// Kubeconfig of the cluster (default: in-cluster or ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Subcommand)]
enum What {
    /// One node (by Node or NodeClaim name): its verdict, price, pods and what would unblock it.
    Node { name: String },
    /// Every node of a NodePool, and what the host does next there.
    Nodepool { name: String },
    /// A pod (`NAMESPACE/NAME`, or `NAME` in `default`): the host's latest provisioning decision
    /// for it (the node it nominated, or why it made none) and its ResourceClaims' devices.
    Pod { name: String },
}

const AFTER_HELP: &str = "\
Read-only: lists NodeClaims, Nodes, NodePools and pods, and reads the verdict the running host \
keeps on each NodeClaim (its ConsolidationBlocked condition). See docs/disruption.md.

Examples:
  capstan explain node ip-10-0-1-23.ec2.internal
  capstan explain nodepool default -o json
  capstan explain pod ml/trainer-0";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    /// JSON (schema `capstan.dev/explain/v1`).
    Json,
}

/// Answers and prints.
pub fn run(args: ExplainArgs) -> Result<ExitCode> {
    block_on(run_async(args))
}

async fn run_async(args: ExplainArgs) -> Result<ExitCode> {
    let client = match &args.kubeconfig {
        Some(path) => client(path).await?,
        None => Client::try_default()
            .await
            .context("cannot find a Kubernetes configuration")?,
    };
    let now = Timestamp::now();
    let text = match &args.what {
        What::Node { name } => {
            let view = list(&client, Some(name)).await?;
            let report = explain::explain_node(&view, name, now)?;
            match args.output {
                Output::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
                Output::Table => table::node(&report),
            }
        }
        What::Nodepool { name } => {
            let view = list(&client, None).await?;
            let report = explain::explain_pool(&view, name, now)?;
            match args.output {
                Output::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
                Output::Table => table::pool(&report),
            }
        }
        What::Pod { name } => {
            let report = pod_report(&client, name).await?;
            match args.output {
                Output::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
                Output::Table => table::pod(&report),
            }
        }
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// `capstan explain pod`: the pod, its Events and the ResourceClaims of its namespace.
async fn pod_report(client: &Client, name: &str) -> Result<pod::PodReport> {
    let (namespace, name) = name.split_once('/').unwrap_or(("default", name));
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("cannot get pod {namespace}/{name}"))?;
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("regarding.name={name}")))
        .await
        .context("cannot list Events")?;
    // A cluster without DRA (or a reader without access to it) still gets the decision.
    let claims = match Api::<ResourceClaim>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(err) => {
            tracing::debug!(error = %err, "no ResourceClaims listed");
            Vec::new()
        }
    };
    Ok(pod::explain_pod(&pod, &events.items, &claims, REPORTER))
}

/// The reporting controller of the host's Events (`capstan run`'s default).
const REPORTER: &str = "capstan";

/// The objects an answer needs; with `node`, only the pods of that node (by Node name, or the
/// node of the NodeClaim of that name).
async fn list(client: &Client, node: Option<&str>) -> Result<View> {
    let all = ListParams::default();
    let claims = Api::<NodeClaim>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list NodeClaims")?;
    let nodes = Api::<Node>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list Nodes")?;
    let pools = Api::<NodePool>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list NodePools")?;
    let pods_params = match node {
        Some(name) => {
            let node_name = claims
                .items
                .iter()
                .find(|c| c.name_any() == name)
                .and_then(|c| c.status.as_ref()?.node_name.clone())
                .unwrap_or_else(|| name.to_owned());
            ListParams::default().fields(&format!("spec.nodeName={node_name}"))
        }
        None => ListParams::default(),
    };
    let pods = Api::<Pod>::all(client.clone())
        .list(&pods_params)
        .await
        .context("cannot list pods")?;
    Ok(View {
        claims: claims.items.into_iter().map(Arc::new).collect(),
        nodes: nodes.items.into_iter().map(Arc::new).collect(),
        pools: pools.items.into_iter().map(Arc::new).collect(),
        pods: pods.items.into_iter().map(Arc::new).collect(),
        ..View::default()
    })
}
