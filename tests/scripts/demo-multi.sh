#!/usr/bin/env bash
# The multi-provider demo (`make demo-multi`, docs/multi-provider.md): one host, two providers on a real
# control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok on loopback).
# `onprem` holds two cheap 4-CPU machines (pool weight 100, limits.cpu 8); `cloud` costs twenty
# times as much and may spend 2.50 an hour (pool weight 10, a `capstan.dev/price-per-hour` limit).
#
#   1. two 3-CPU pods run on-prem;
#   2. three more burst to the cloud: its budget pays for two nodes, the third pod waits, and the
#      pool's LimitReached Event and `capstan explain pod` say why;
#   3. the on-prem pods go: the waiting pod lands on-prem at once, consolidation brings a cloud pod
#      back on-prem (cheaper) and one cloud node stays for the pod on-prem has no room for.
#
# Prints each step's time and price per hour. Cleans up after itself; exits 0 on success.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
DEMO="$REPO_ROOT/tests/scripts/demo"
MULTI="$REPO_ROOT/tests/scripts/demo-multi"

source "$(dirname "${BASH_SOURCE[0]}")/demo-common.sh"

log "shipping the kwok provider's component twice, as providers onprem and cloud, each with its grants"
k create namespace capstan >/dev/null
for name in onprem cloud; do
  "$CAPSTAN" provider package "$CAPSTAN_WASM_DIR/kwok.wasm" --name "$name" --namespace capstan \
    --grants "$DEMO/kwok-grants.yaml" | k apply --server-side -f - >/dev/null
done

log "starting the capstan host (log: host.log)"
"$CAPSTAN" run --kubeconfig "$KUBECONFIG" --provider-source-namespace capstan \
  --batch-idle-duration 500ms \
  --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
  >"$WORK/host.log" 2>&1 &
HOST_PID=$!
k wait --for=condition=Ready provider/onprem provider/cloud --timeout=120s >/dev/null

log "two NodeClasses and two NodePools (tests/scripts/demo-multi/pools.yaml)"
k apply -f "$MULTI/pools.yaml" >/dev/null
k wait --for=condition=Ready nodepool/onprem nodepool/cloud --timeout=120s >/dev/null
k get nodepools

deploy() { # deploy NAME REPLICAS: pods of 3 CPU, one per 4-CPU node
  cat <<YAML | k apply -f - >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata: { name: $1, namespace: default }
spec:
  replicas: $2
  selector: { matchLabels: { app: $1 } }
  template:
    metadata: { labels: { app: $1, demo: multi } }
    spec:
      # No blanket toleration: a pod tolerating every taint would tolerate Karpenter's
      # karpenter.sh/disrupted too, and come back to the node consolidation is draining.
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: registry.k8s.io/pause:3.10
          resources: { requests: { cpu: "3", memory: 1Gi } }
YAML
}

# Live nodes of pool $1, and the pods running on them.
pool_nodes() { k get nodes -l "karpenter.sh/nodepool=$1" --no-headers -o custom-columns=N:.metadata.name,D:.metadata.deletionTimestamp 2>/dev/null | awk '$2 == "<none>"' | wc -l | tr -d ' '; }
pool_pods() {
  local nodes
  nodes=$(k get nodes -l "karpenter.sh/nodepool=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null)
  k get pods -l demo=multi --no-headers -o custom-columns=N:.spec.nodeName,P:.status.phase 2>/dev/null \
    | awk -v list="$nodes" 'BEGIN { n = split(list, a, "\n"); for (i = 1; i <= n; i++) on[a[i]] = 1 } $2 == "Running" && ($1 in on)' \
    | wc -l | tr -d ' '
}
pending_pods() { k get pods -l demo=multi --no-headers -o custom-columns=N:.spec.nodeName 2>/dev/null | grep -c '^<none>' || true; }
price() { k get nodeclaims -o jsonpath='{range .items[*]}{.metadata.annotations.capstan\.dev/price-per-hour}{"\n"}{end}' | awk '{s += $1} END {printf "%.2f", s}'; }
where() { printf 'on-prem: %s node(s), %s pod(s) | cloud: %s node(s), %s pod(s) | pending: %s | $%s/h' \
  "$(pool_nodes onprem)" "$(pool_pods onprem)" "$(pool_nodes cloud)" "$(pool_pods cloud)" "$(pending_pods)" "$(price)"; }
# until SECONDS WHAT CONDITION...: polls, printing the placement whenever it changes.
until_state() {
  local deadline=$(( $(date +%s) + $1 )) what=$2 last="" now; shift 2
  while :; do
    now=$(where)
    [ "$now" != "$last" ] && printf '  [%3ss] %s\n' "$(( $(date +%s) - step_start ))" "$now" && last=$now
    if "$@"; then printf '  [%3ss] %s\n' "$(( $(date +%s) - step_start ))" "$(where)"; return 0; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then echo "timed out waiting for $what" >&2; return 1; fi
    sleep 1
  done
}

# deploy_until NAME REPLICAS WHAT CHECK: deploys, then waits until CHECK holds; sets took (s) and cost ($/h).
deploy_until() {
  step_start=$(date +%s)
  deploy "$1" "$2"
  until_state 120 "$3" "$4"
  took=$(( $(date +%s) - step_start )); cost=$(price)
}

log "1. two pods of 3 CPU: on-prem first (weight 100)"
two_onprem() { [ "$(pool_pods onprem)" = 2 ]; }
deploy_until base 2 "two pods on-prem" two_onprem
t_onprem=$took; p_onprem=$cost

log "2. three more: on-prem is at its limit, they burst to the cloud, whose budget pays for two nodes"
two_cloud() { [ "$(pool_pods cloud)" = 2 ]; }
deploy_until burst 3 "two pods in the cloud" two_cloud
t_burst=$took; p_burst=$cost
limit_note=""
limit_seen() { limit_note=$(k get events -n default --field-selector reason=LimitReached,involvedObject.name=cloud -o jsonpath='{.items[0].message}' 2>/dev/null); [ -n "$limit_note" ]; }
wait_for 60 "the cloud pool's LimitReached Event" limit_seen
echo "  cloud NodePool Event LimitReached: $limit_note"
waiting=$(k get pods -l demo=multi --no-headers -o custom-columns=N:.metadata.name,NODE:.spec.nodeName | awk '$2 == "<none>" {print $1; exit}')
echo "  capstan explain pod default/$waiting:"
"$CAPSTAN" explain --kubeconfig "$KUBECONFIG" pod "default/$waiting" | sed 's/^/    /'
k get providers

log "3. the on-prem pods go: on-prem capacity frees and the burst comes back where it fits"
step_start=$(date +%s)
k delete deployment base -n default --wait=false >/dev/null
back() { [ "$(pool_pods onprem)" = 2 ] && [ "$(pool_pods cloud)" = 1 ] && [ "$(pool_nodes cloud)" = 1 ] && [ "$(pending_pods)" = 0 ]; }
until_state 300 "two burst pods on-prem, one in the cloud" back
t_back=$(( $(date +%s) - step_start )); p_back=$(price)

log "cleaning up: pods, then NodeClaims (Capstan drains and deletes the nodes)"
k delete deployment burst -n default --wait=true >/dev/null
k delete nodeclaims --all --wait=false >/dev/null
no_nodes() { [ "$(k get nodes -o name | wc -l)" -eq 0 ] && [ "$(k get nodeclaims -o name | wc -l)" -eq 0 ]; }
wait_for 180 "nodes and NodeClaims to be gone" no_nodes

cat <<SUMMARY

================ Capstan multi-provider demo summary ================
1. on-prem first        : 2 pods Running on-prem after ${t_onprem}s, \$${p_onprem}/h
2. burst to the cloud   : 2 pods Running in the cloud after ${t_burst}s, \$${p_burst}/h; the third waits at the
                          cloud's spend limit (\$2.50/h): $limit_note
3. back on-prem         : the waiting pod and one cloud pod on-prem, one cloud node left, after ${t_back}s, \$${p_back}/h
nodes left              : $(k get nodes -o name | wc -l | tr -d ' ')
======================================================================
SUMMARY
