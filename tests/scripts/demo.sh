#!/usr/bin/env bash
# The demo (`make demo`): a real control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) on loopback, the Capstan host with the kwok provider, and a Deployment whose
# pods kube-scheduler cannot place: Capstan's provisioner batches them, creates NodeClaims, the
# nodes register and kube-scheduler binds the pods. Cleans up after itself; exits 0 on success.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
DEMO="$REPO_ROOT/tests/scripts/demo"
REPLICAS=${CAPSTAN_DEMO_PODS:-12}

source "$(dirname "${BASH_SOURCE[0]}")/demo-common.sh"

log "the kwok provider"
"$CAPSTAN" provider inspect "$CAPSTAN_WASM_DIR/kwok.wasm"

log "shipping it: capstan provider package | kubectl apply (a ConfigMap and a Provider with its grants)"
k create namespace capstan >/dev/null
"$CAPSTAN" provider package "$CAPSTAN_WASM_DIR/kwok.wasm" --name kwok --namespace capstan \
  --grants "$DEMO/kwok-grants.yaml" | k apply --server-side -f -

log "starting the capstan host (log: host.log)"
"$CAPSTAN" run --kubeconfig "$KUBECONFIG" --provider-source-namespace capstan \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  >"$WORK/host.log" 2>&1 &
HOST_PID=$!
k wait --for=condition=Ready provider/kwok --timeout=120s >/dev/null
k get providers -o wide

log "applying a NodeClass and a NodePool"
k apply -f "$DEMO/nodepool.yaml"

log "deploying $REPLICAS pods that fit on no node yet (1 cpu, 1Gi each; the cluster has no nodes)"
start=$(date +%s)
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
      # kwok nodes carry kwok's own taint; tolerating everything keeps the demo about capacity.
      tolerations: [{ operator: Exists }]
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources: { requests: { cpu: "1", memory: 1Gi } }
YAML

# One line per change: pods pending/bound/running, NodeClaims created/launched/ready, nodes.
count() { grep -c "$1" || true; }
state() {
  local pods claims
  pods=$(k get pods -n default -l app=demo --no-headers \
    -o custom-columns='NODE:.spec.nodeName,PHASE:.status.phase' 2>/dev/null)
  claims=$(k get nodeclaims --no-headers -o custom-columns='L:.status.conditions[?(@.type=="Launched")].status,R:.status.conditions[?(@.type=="Ready")].status' 2>/dev/null)
  printf 'pods: %s pending, %s bound, %s running | nodeclaims: %s created, %s launched, %s ready | nodes: %s' \
    "$(printf '%s\n' "$pods" | count '^<none>')" \
    "$(printf '%s\n' "$pods" | grep -v '^<none>' | count .)" \
    "$(printf '%s\n' "$pods" | count ' Running$')" \
    "$(printf '%s\n' "$claims" | count .)" \
    "$(printf '%s\n' "$claims" | count '^True')" \
    "$(printf '%s\n' "$claims" | count 'True *True$')" \
    "$(k get nodes --no-headers 2>/dev/null | count .)"
}
all_bound_at=""
last=""
deadline=$(( start + 300 ))
while :; do
  now=$(date +%s)
  current=$(state)
  if [ "$current" != "$last" ]; then
    printf '  [%3ss] %s\n' "$(( now - start ))" "$current"
    last=$current
  fi
  if [ -z "$all_bound_at" ] && [[ "$current" == "pods: 0 pending, $REPLICAS bound,"* ]]; then
    all_bound_at=$now
  fi
  [[ "$current" == *", $REPLICAS running |"* ]] && break
  if [ "$now" -ge "$deadline" ]; then echo "timed out waiting for the pods to run" >&2; exit 1; fi
  sleep 2
done
running_at=$(date +%s)
[ -n "$all_bound_at" ] || all_bound_at=$running_at

log "what Capstan launched"
k get nodeclaims -o wide
k get nodes -L node.kubernetes.io/instance-type,karpenter.sh/capacity-type,topology.kubernetes.io/zone
k get pods -n default -l app=demo -o wide

nodes=$(k get nodes --no-headers | wc -l | tr -d ' ')
types=$(k get nodeclaims -o jsonpath='{range .items[*]}{.metadata.labels.node\.kubernetes\.io/instance-type}/{.metadata.labels.karpenter\.sh/capacity-type}{"\n"}{end}' \
  | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
price=$(k get nodeclaims -o jsonpath='{range .items[*]}{.metadata.annotations.capstan\.dev/price-per-hour}{"\n"}{end}' \
  | awk '{s += $1} END {printf "%.4f", s}')
events=$(k get events -n default --field-selector reason=Nominated --no-headers 2>/dev/null | wc -l | tr -d ' ')

log "hot reload: a new build of the provider, shipped by updating its ConfigMap (no restart)"
# A new build, as far as the host can tell: the same code plus a custom section (new sha256).
{ cat "$CAPSTAN_WASM_DIR/kwok.wasm"; printf '\x00\x07\x04demov2'; } >"$WORK/kwok-v2.wasm"
new_digest=$(sha256sum "$WORK/kwok-v2.wasm" | cut -d' ' -f1)
reload_start=$(date +%s%N)
"$CAPSTAN" provider package "$WORK/kwok-v2.wasm" --name kwok --namespace capstan \
  --grants "$DEMO/kwok-grants.yaml" | k apply --server-side -f - >/dev/null
serving() { [ "$(k get provider kwok -o jsonpath='{.status.digest}')" = "$new_digest" ]; }
wait_for 60 "the new version to serve" serving
reload_ms=$(( ($(date +%s%N) - reload_start) / 1000000 ))
k get providers -o wide
echo "  now serving sha256 ${new_digest:0:16}... after ${reload_ms} ms; host pid $HOST_PID still the same process"
kill -0 "$HOST_PID"

log "cleaning up: pods, then NodeClaims (Capstan drains and deletes the nodes)"
k delete deployment demo -n default --wait=true >/dev/null
wait_for 120 "pods to be gone" bash -c "[ -z \"\$(bash '$CP' kubectl --dir '$WORK/cp' get pods -n default -l app=demo -o name)\" ]"
k delete nodeclaims --all --wait=false >/dev/null
no_nodes() { [ "$(k get nodes -o name | wc -l)" -eq 0 ] && [ "$(k get nodeclaims -o name | wc -l)" -eq 0 ]; }
wait_for 180 "nodes and NodeClaims to be gone" no_nodes

cat <<SUMMARY

================ Capstan demo summary ================
pods                   : $REPLICAS (Deployment, 1 cpu / 1Gi each; no NodeClaim written by hand)
nodes launched         : $nodes (kwok provider, sandboxed wasm)
instance types         : $types
price per hour         : \$$price (sum of capstan.dev/price-per-hour)
Nominated events       : $events
time to all bound      : $(( all_bound_at - start ))s (from the Deployment to every pod bound by kube-scheduler)
time to all Running    : $(( running_at - start ))s
provider hot reload    : ${reload_ms} ms (package + apply until the Provider reports the new digest, polled each second; same host process)
nodes left             : $(k get nodes -o name | wc -l | tr -d ' ')
======================================================
SUMMARY
