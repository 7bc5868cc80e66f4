#!/usr/bin/env bash
# Regenerates the hashes in host/src/api/template_hash/vectors.json with Karpenter's own
# NodePool.Hash() at the version this module pins (go.mod; the same as tests/control-plane/upstream.env).
# Edit the cases' templates there, run this, commit both. The Rust unit test
# `api::template_hash::tests::karpenters_own_hashes` checks Capstan's hash against them.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$HERE/.."
# shellcheck source=../../control-plane/upstream.env
source "$ROOT/tests/control-plane/upstream.env"
export GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN" GOFLAGS="${GOFLAGS:-} -mod=readonly"
version="$(go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
TZ=UTC go run ./nodepool-hash "$ROOT/host/src/api/template_hash/vectors.json" "$version"
