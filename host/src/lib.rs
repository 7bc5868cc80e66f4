//! Capstan: a Karpenter-compatible node autoprovisioner whose cloud-specific logic runs as sandboxed
//! WebAssembly components.
//!
//! This crate is the host (the `capstan` binary is a thin CLI over it). Its parts:
//!
//! - [`api`]: the Kubernetes API types (`karpenter.sh/v1` NodePool and NodeClaim, `capstan.dev/v1alpha1`
//!   NodeClass and Provider) and the CRDs generated from them.
//! - [`runtime`]: the one wasmtime [`Engine`](wasmtime::Engine), the compiled-component cache,
//!   validation of untrusted component bytes, and per-call instances with memory, CPU and wall-clock
//!   limits ([`runtime::ProviderPre`]).
//! - [`capability`]: the host side of the imports a provider gets (`kube`, `host`), each checked
//!   against the provider's [`capability::grants::Grants`].
//! - [`conformance`]: the conformance kit behind `capstan provider test`.
//! - [`provider`]: the registry of live providers, loading, ConfigMap sources, packaging and the
//!   API ↔ WIT conversions.
//! - [`catalog`]: instance types from the providers' catalogs, converted, cached and overlaid.
//! - [`rules`]: the cluster's rules, pure: pod, claim and node facts, the snapshot, candidates,
//!   budgets, verdicts, drift and the consolidation search, shared by the controllers, `simulate`
//!   and `explain`.
//! - [`scheduling`]: the pure scheduling simulation (requirements, instance-type filtering, bin
//!   packing, topology) the provisioner runs.
//! - [`controllers`]: the provisioner, the NodeClaim lifecycle, Provider loading, garbage
//!   collection and the NodeClass and NodePool status controllers.
//! - [`metrics`]: Prometheus counters and provider call latency.
//! - [`serve`]: the `/metrics`, `/healthz` and `/readyz` endpoints and the shared [`serve::Readiness`].
//! - [`ratelimit`]: the Kubernetes client's QPS and burst limit (a token bucket tower layer).
//! - [`kube_client`]: the host's Kubernetes clients, with that limit and a response timeout.
//! - [`leader`]: leader election on a Lease, so that one of several replicas runs the controllers.
//! - [`state`]: the watches of the cluster, their caches and their retry policy.
//! - [`simulate`]: `capstan simulate`, the provisioner and consolidation over a dump of a cluster.
//! - [`explain`]: `capstan explain`, the host's consolidation verdicts read back from a live cluster.

pub mod api;
pub mod capability;
pub mod catalog;
pub mod conformance;
pub mod controllers;
pub mod explain;
pub mod kube_client;
pub mod leader;
pub mod metrics;
pub mod provider;
pub mod ratelimit;
pub mod rules;
pub mod runtime;
pub mod scheduling;
pub mod serve;
pub mod simulate;
pub mod state;
