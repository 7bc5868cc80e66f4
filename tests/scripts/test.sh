#!/usr/bin/env bash
# The project's test command (`make test`): installs what is missing, then runs format and lint checks,
# unit and property tests, contract tests of the wasm providers, and the integration tests on a real
# control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) built from Go modules.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
start=$(date +%s)

ensure_rust
build_control_plane
build_providers

log "format"
cargo fmt --all -- --check
(cd providers-wasm && cargo fmt --all -- --check)

log "lint (host workspace)"
cargo clippy --workspace --all-targets --locked -- -D warnings
log "lint (guest workspace, native and wasm32-wasip2)"
(cd providers-wasm && CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" cargo clippy --workspace --all-targets --locked -- -D warnings)
(cd providers-wasm && CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" cargo clippy --workspace --locked --target wasm32-wasip2 -- -D warnings)

log "guest unit tests"
(cd providers-wasm && CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" cargo test --workspace --locked)

log "host unit, integration and e2e tests"
cargo test --workspace --locked

log "all tests passed in $(( $(date +%s) - start )) s"
