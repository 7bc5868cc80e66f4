# What the demos share (sourced by demo.sh and demo-multi.sh, after lib.sh): the builds they need,
# a real control plane in a temporary directory with Capstan's CRDs, `k` (kubectl on it),
# `wait_for`, and the cleanup that stops the host and the control plane on exit (printing the end
# of the host log when the demo failed; CAPSTAN_DEMO_LOG=FILE keeps all of it). The demo starts the host itself and sets HOST_PID.

# Only what the demo runs: the control plane (not Cluster API's controllers) and the kwok provider
# (not the other guests, nor the Python toolchain).
# The Go build of the control plane runs beside the Rust builds: each has serial stretches (linking)
# the other fills.
ensure_rust
build_core_control_plane >/dev/null &
CP_BUILD=$!
CAPSTAN_PROVIDERS=kwok build_providers
log "building capstan"
cargo build -p capstan --locked --quiet
wait "$CP_BUILD" || { echo "demo: the control plane build failed (its log is named above)" >&2; exit 1; }
CAPSTAN="$CARGO_TARGET_DIR/debug/capstan"
CP="$REPO_ROOT/tests/control-plane/cp"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/capstan-demo.XXXXXX")
HOST_PID=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$HOST_PID" ]; then
    kill "$HOST_PID" 2>/dev/null
    wait "$HOST_PID" 2>/dev/null
  fi
  bash "$CP" down --dir "$WORK/cp" >/dev/null 2>&1 || true
  # CAPSTAN_DEMO_LOG=FILE keeps the host's log.
  [ -n "${CAPSTAN_DEMO_LOG:-}" ] && cp "$WORK/host.log" "$CAPSTAN_DEMO_LOG" 2>/dev/null
  if [ $rc -ne 0 ]; then
    echo "demo failed (exit $rc); last lines of the host log:" >&2
    tail -n 30 "$WORK/host.log" >&2 2>/dev/null || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT INT TERM

log "starting the control plane"
bash "$CP" up --dir "$WORK/cp" >/dev/null
export KUBECONFIG="$WORK/cp/kubeconfig"
k() { bash "$CP" kubectl --dir "$WORK/cp" "$@"; }
k apply -f crds/ >/dev/null
k wait --for condition=established --timeout=60s crd --all >/dev/null

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "timed out waiting for $what" >&2; return 1; fi
    sleep 1
  done
}
