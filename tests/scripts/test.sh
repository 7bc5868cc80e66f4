#!/usr/bin/env bash
# The project's test command (`make test`): installs what is missing (Rust components and target, Go,
# the control plane built from Go modules, the supply-chain tools (registry, cosign, oras) built from Go modules, the wasm providers, the upstream test data in the Go module
# cache, the host's OCI image and the chart packaged for it, the `cs` CloudStack client in a venv, componentize-py
# and pytest in a venv for the Python guests), then runs the pieces that are also make targets: `lint` (format check, clippy), `unit` (unit
# and property tests, host and guests) and `e2e` (integration and e2e tests on a real control plane:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; and the fast subset of Karpenter's
# own e2e suite against Capstan, `make conformance-karpenter` for all of it).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
start=$(date +%s)

ensure_rust
build_control_plane
build_providers
ensure_python_toolchain
fetch_upstream
build_supply_chain_tools
build_image
package_chart
ensure_cs_client

task_lint
task_unit
task_e2e

log "all tests passed in $(( $(date +%s) - start )) s"
