//! The host's integration tests: one binary (wasmtime's layout), one module per area.
//!
//! The guest fixtures are built on first use with `providers-wasm/build.sh`; the tests that need
//! a real API server share one control plane from `capstan-test-support`.

// Test code: helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_load;
mod api_restart;
mod bad_input;
mod bench;
mod bench_dra;
mod bench_e2e;
mod bench_multi;
mod bench_scale;
mod cache;
mod capacity_buffers;
mod catalog_wait;
mod chart;
mod cli;
mod cloudstack;
mod clusterapi;
mod conformance;
mod consolidation;
mod crd_validation;
mod csi_limits;
mod default_spread;
mod disruption;
mod dra;
mod fixtures;
mod grants;
mod hostile;
mod image;
mod job_hold;
mod leader_election;
mod lifecycle;
mod list_paging;
mod metrics;
mod multi_provider;
mod node_class_kinds;
mod node_overlays;
mod node_repair;
mod nominated;
mod pod_watch;
mod pool_deletion;
mod pool_limits;
mod provider_new;
mod providers;
mod provisioner;
mod provisioner_e2e;
mod runtime_isolation;
mod simulate;
mod spread_reach;
mod startup_taints;
mod state_cache;
mod static_pool;
mod supply_chain;
mod unparseable_pool;
mod verdict;
mod volume_topology;
