#!/usr/bin/env bash
# Builds (or reuses) upstream Karpenter's kwok controller, the binary Karpenter's own scale tests run
# (package main `sigs.k8s.io/karpenter/kwok`), for `make bench-e2e`. Prints two lines on stdout: the
# binary's path, and the directory of the upstream module it was built from (its CRDs and its kwok
# catalog, `kwok/cloudprovider/instance_types.json`, are read from there).
#
# No Karpenter code is copied into this repository: a throwaway Go module that requires the pinned
# upstream module is created in the cache dir and `go build` builds the package from the module
# cache (downloading it through the Go module proxy if needed). The binary is cached in
#   ${CAPSTAN_CACHE:-~/.cache/capstan}/karpenter-kwok/<version>/karpenter-kwok
#
# Env knobs (the same as tests/bench-baseline/karpenter.sh):
#   KARPENTER_VERSION   upstream module version       (default KARPENTER_MODULE_VERSION of
#                       tests/control-plane/upstream.env)
#   KARPENTER_GO        Go toolchain for GOTOOLCHAIN  (default UPSTREAM_GOTOOLCHAIN there; v1.15.0 needs >= go1.26.9,
#                       fetched from the Go module proxy as golang.org/toolchain if not local)
set -euo pipefail

# The defaults are the pinned upstream version and its toolchain (tests/control-plane/upstream.env).
# shellcheck source=../control-plane/upstream.env
source "$(dirname "${BASH_SOURCE[0]}")/../control-plane/upstream.env"
KARPENTER_VERSION="${KARPENTER_VERSION:-$KARPENTER_MODULE_VERSION}"
KARPENTER_GO="${KARPENTER_GO:-$UPSTREAM_GOTOOLCHAIN}"
PKG="sigs.k8s.io/karpenter/kwok"

CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
DIR="$CACHE/karpenter-kwok/$KARPENTER_VERSION"
BIN="$DIR/karpenter-kwok"
MODULE_DIR_FILE="$DIR/module-dir"

if [[ -x "$BIN" && -f "$MODULE_DIR_FILE" && -d "$(cat "$MODULE_DIR_FILE")" ]]; then
  echo "$BIN"
  cat "$MODULE_DIR_FILE"
  exit 0
fi

mkdir -p "$DIR/src"
cd "$DIR/src"
export GOTOOLCHAIN="$KARPENTER_GO"
export GOFLAGS="${GOFLAGS:-} -mod=mod"
if [[ ! -f go.mod ]] || ! grep -q "sigs.k8s.io/karpenter $KARPENTER_VERSION" go.mod; then
  rm -f go.mod go.sum
  cat >go.mod <<MOD
module capstan.local/karpenter-kwok

go ${KARPENTER_GO#go}
MOD
  go get "$PKG@$KARPENTER_VERSION" >&2
fi
if [[ ! -x "$BIN" ]]; then
  echo "building $PKG@$KARPENTER_VERSION with $(go version) (cached in $DIR)" >&2
  started=$SECONDS
  go build -trimpath -o "$BIN.tmp" "$PKG" >&2
  mv "$BIN.tmp" "$BIN"
  echo "built in $((SECONDS - started)) s" >&2
fi
go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter >"$MODULE_DIR_FILE"
echo "$BIN"
cat "$MODULE_DIR_FILE"
