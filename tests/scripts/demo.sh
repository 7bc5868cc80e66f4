#!/usr/bin/env bash
# The demo (`make demo`): a real control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) on loopback, the Capstan host with the kwok provider, and a workload that
# lands on nodes Capstan launched. Cleans up after itself; exits 0 on success.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
DEMO="$REPO_ROOT/tests/scripts/demo"
CLAIMS=${CAPSTAN_DEMO_CLAIMS:-3}
REPLICAS=${CAPSTAN_DEMO_PODS:-9}

ensure_rust
build_control_plane
build_providers
log "building capstan"
cargo build -p capstan --locked --quiet
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

log "the kwok provider"
"$CAPSTAN" provider inspect "$CAPSTAN_WASM_DIR/kwok.wasm"

log "starting the capstan host (log: host.log)"
"$CAPSTAN" run --kubeconfig "$KUBECONFIG" \
  --provider "kwok=$CAPSTAN_WASM_DIR/kwok.wasm" --grants "kwok=$DEMO/kwok-grants.yaml" \
  >"$WORK/host.log" 2>&1 &
HOST_PID=$!

log "applying a NodeClass and a NodePool"
k apply -f "$DEMO/nodepool.yaml"

start=$(date +%s)
log "creating $CLAIMS NodeClaims"
for i in $(seq 1 "$CLAIMS"); do
  cat <<YAML | k apply -f - >/dev/null
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: demo-$i
  labels: { karpenter.sh/nodepool: demo }
spec:
  requirements:
    - { key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"] }
    - { key: kubernetes.io/arch, operator: In, values: ["amd64"] }
  resources:
    requests: { cpu: "$((i * 2))", memory: "$((i * 2))Gi" }
  nodeClassRef: { group: capstan.dev, kind: NodeClass, name: demo }
YAML
done

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$(( $(date +%s) + $1 )) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "timed out waiting for $what" >&2; return 1; fi
    sleep 1
  done
}
all_initialized() {
  [ "$(k get nodeclaims -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Initialized")].status}{"\n"}{end}' | grep -c True)" -eq "$CLAIMS" ]
}
wait_for 180 "NodeClaims to be initialized" all_initialized
k get nodeclaims -o wide
k get nodes -L node.kubernetes.io/instance-type,karpenter.sh/capacity-type,topology.kubernetes.io/zone

log "deploying $REPLICAS pods onto the new nodes (bound by kube-scheduler)"
cat <<YAML | k apply -f - >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata: { name: demo, namespace: default }
spec:
  replicas: $REPLICAS
  selector: { matchLabels: { app: demo } }
  template:
    metadata: { labels: { app: demo } }
    spec:
      nodeSelector: { karpenter.sh/nodepool: demo }
      tolerations: [{ operator: Exists }]
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources: { requests: { cpu: 500m, memory: 256Mi } }
YAML
all_running() {
  [ "$(k get pods -n default -l app=demo --field-selector=status.phase=Running -o name | wc -l)" -eq "$REPLICAS" ]
}
wait_for 180 "pods to be Running" all_running
bound=$(( $(date +%s) - start ))
k get pods -n default -l app=demo -o wide
types=$(k get nodeclaims -o jsonpath='{range .items[*]}{.metadata.labels.node\.kubernetes\.io/instance-type}/{.metadata.labels.karpenter\.sh/capacity-type}{" "}{end}')

log "cleaning up: pods, then NodeClaims (Capstan drains and deletes the nodes)"
k delete deployment demo -n default --wait=true >/dev/null
k delete nodeclaims --all --wait=false >/dev/null
no_nodes() { [ "$(k get nodes -o name | wc -l)" -eq 0 ] && [ "$(k get nodeclaims -o name | wc -l)" -eq 0 ]; }
wait_for 180 "nodes and NodeClaims to be gone" no_nodes

cat <<SUMMARY

================ Capstan demo summary ================
pods bound and Running : $REPLICAS
nodes launched         : $CLAIMS (kwok provider, sandboxed wasm)
instance types         : $types
time to all Running    : ${bound}s (from the first NodeClaim)
nodes left             : 0
======================================================
SUMMARY
