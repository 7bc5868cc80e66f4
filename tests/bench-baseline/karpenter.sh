#!/usr/bin/env bash
# Runs upstream Karpenter's own scheduling benchmark (BenchmarkScheduling* in
# sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling, file
# scheduling_benchmark_test.go, build tag `test_performance`) on this machine,
# so its pods/sec can be compared with our criterion group
# `scheduling/diverse/<pods>` (host/benches/scheduling.rs) measured in the same run.
#
# No Karpenter code is copied into this repo: a throwaway Go module that requires
# the pinned upstream module is created in the cache dir and `go test` runs the
# upstream package's benchmark from the module cache. The benchmark uses
# controller-runtime's fake client (no envtest / kube-apiserver / etcd needed);
# `-run '^$'` keeps the envtest-backed Ginkgo suite (TestScheduling) from running.
#
# Env knobs:
#   KARPENTER_VERSION   upstream module version       (default KARPENTER_MODULE_VERSION of
#                       tests/control-plane/upstream.env)
#   KARPENTER_GO        Go toolchain for GOTOOLCHAIN  (default UPSTREAM_GOTOOLCHAIN there; v1.15.0 needs >= go1.26.9,
#                       fetched from the Go module proxy as golang.org/toolchain if not local)
#   KARPENTER_BENCH     -bench regex                  (default sizes comparable to ours: 100/1000/5000)
#   KARPENTER_BENCHTIME -benchtime                    (default 1s)
#   KARPENTER_COUNT     -count                        (default 1)
set -euo pipefail

# The defaults are the pinned upstream version and its toolchain (tests/control-plane/upstream.env).
# shellcheck source=../control-plane/upstream.env
source "$(dirname "${BASH_SOURCE[0]}")/../control-plane/upstream.env"
KARPENTER_VERSION="${KARPENTER_VERSION:-$KARPENTER_MODULE_VERSION}"
KARPENTER_GO="${KARPENTER_GO:-$UPSTREAM_GOTOOLCHAIN}"
KARPENTER_BENCH="${KARPENTER_BENCH:-^BenchmarkScheduling(100|1000|5000)\$}"
KARPENTER_BENCHTIME="${KARPENTER_BENCHTIME:-1s}"
KARPENTER_COUNT="${KARPENTER_COUNT:-1}"
PKG="sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"

CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
DIR="$CACHE/karpenter-bench/$KARPENTER_VERSION"
mkdir -p "$DIR"
cd "$DIR"

export GOTOOLCHAIN="$KARPENTER_GO"
export GOFLAGS="${GOFLAGS:-} -mod=mod"

if [[ ! -f go.mod ]] || ! grep -q "sigs.k8s.io/karpenter $KARPENTER_VERSION" go.mod; then
  rm -f go.mod go.sum
  cat > go.mod <<MOD
module capstan.local/karpenter-bench

go ${KARPENTER_GO#go}
MOD
  # -t pulls in the package's test dependencies so `go test` can build it.
  go get -t "$PKG@$KARPENTER_VERSION"
fi

echo "== karpenter $KARPENTER_VERSION ($(go version)) on $(nproc) cores =="
# Benchmark output lines look like:
#   BenchmarkScheduling1000-2   N   ns/op   <nodes> nodes   <pods> pods   <rate> pods/sec
go test -tags test_performance -run '^$' \
  -bench "$KARPENTER_BENCH" -benchtime "$KARPENTER_BENCHTIME" -count "$KARPENTER_COUNT" \
  "$PKG" | tee "$DIR/last-run.txt"

echo "== summary (pods/sec) =="
awk '/^BenchmarkScheduling/ {
  name=$1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkScheduling/, "", name);
  for (i = 2; i <= NF; i++) if ($i == "pods/sec") printf "karpenter scheduling/diverse/%s %s pods/sec\n", name, $(i-1)
}' "$DIR/last-run.txt"
