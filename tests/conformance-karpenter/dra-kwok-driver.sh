#!/usr/bin/env bash
# Karpenter's DRA KWOK driver at the pinned version (upstream's controller behind the launcher in
# dra-kwok-driver/main.go), built once with go build from this directory's Go module and cached in
# $CAPSTAN_CACHE/conformance-karpenter/<version>/. Prints two lines: the binary, and the DRAConfig
# CRD it serves (from the same module). Used by run.sh (the DRA suite) and by the host's DRA e2e
# tests.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../control-plane/upstream.env
source "$ROOT/tests/control-plane/upstream.env"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
export GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN"

module_dir="$(cd "$HERE" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$KARPENTER_MODULE")"
crd="$module_dir/dra-kwok-driver/pkg/apis/crds/test.karpenter.sh_draconfigs.yaml"
[[ -f "$crd" ]] || { echo "dra-kwok-driver.sh: no DRAConfig CRD at $crd" >&2; exit 1; }
dir="$CACHE/conformance-karpenter/$KARPENTER_MODULE_VERSION"
mkdir -p "$dir"
# Rebuilt when this module's go.mod or go.sum, or the launcher, change.
key="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/dra-kwok-driver/main.go" | sha256sum | cut -c1-12)"
bin="$dir/dra-kwok-driver-$key"
# Tests running side by side may all ask for it at once: one builds, the others wait for it.
exec 9>"$bin.lock"
flock 9
if [[ ! -x "$bin" ]]; then
	echo "==> building $bin (cached)" >&2
	(cd "$HERE" && go build -trimpath -o "$bin.tmp" ./dra-kwok-driver) >&2
	mv "$bin.tmp" "$bin"
fi
flock -u 9
printf '%s\n%s\n' "$bin" "$crd"
