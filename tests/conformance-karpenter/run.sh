#!/usr/bin/env bash
# `make conformance-karpenter`: Karpenter's own e2e suites (sigs.k8s.io/karpenter/test/suites/regression,
# disruption and dra, at the version pinned in tests/control-plane/upstream.env) against Capstan, and
# against Karpenter's own kwok controller at the same version as the control, on the same harness: each
# partition gets a control plane of its own (tests/control-plane `cp up`, kwok with Karpenter's pod
# stages from `hack/kwok/stages` of the same module), a controller of its own and Karpenter's DRA KWOK
# driver (the dra suite's ResourceSlices), and runs the suites whose areas it was given one after the
# other. Prints passed/failed/skipped per area for each controller side by side and writes JUnit (one file
# per partition and suite, and the summary).
#
# Each suite is built once per version with `go test -c` from this directory's Go module (go.mod pins
# the same Karpenter version) and cached in $CAPSTAN_CACHE/conformance-karpenter/<version>/, with
# GOTOOLCHAIN=$UPSTREAM_GOTOOLCHAIN (upstream.env); Karpenter's kwok controller is built by
# tests/bench-e2e/karpenter-kwok.sh (cached the same way).
#
# Env knobs:
#   CAPSTAN_HOST_BIN           the capstan binary (required for the capstan controller)
#   CAPSTAN_WASM_DIR           the built wasm providers (kwok.wasm)
#   CONFORMANCE_CONTROLLERS    "capstan karpenter" (default), or one of them
#   CONFORMANCE_PARTITIONS     control planes per controller, run at once (default 2)
#   CONFORMANCE_SUITES         the suites to run (default "regression disruption dra")
#   CONFORMANCE_SUBSET         all (default: every area of those suites) | fast (the specs
#                              fast-specs.txt lists: the Validation specs and a few fast ones; what
#                              `make test` runs; unless CONFORMANCE_KEEP_GOING=1 the run fails unless
#                              exactly these ran and passed)
#   CONFORMANCE_NODECLASS      the default node class Capstan's runs use (Karpenter's always use the
#                              suite's own): suite: the suite's own default KWOKNodeClass, no flag;
#                              capstan: --default-nodeclass a capstan.dev/v1alpha1 NodeClass (provider
#                              kwok, capstan-nodeclass.yaml); auto (default): suite when the kwok
#                              provider's package brings the KWOKNodeClass CRD, else capstan
#   CONFORMANCE_FOCUS          a Ginkgo focus regex instead of the subset's, matched against
#                              "<Suite> <spec>" (e.g. "^Disruption Reboot "; no list to check
#                              against then: only what --check finds)
#   CONFORMANCE_FEATURE_GATES  FEATURE_GATES of both controllers (default: Karpenter's defaults with
#                              NodeRepair, StaticCapacity and CapacityBuffer on, as Karpenter's own e2e
#                              setup deploys its kwok controller; Capstan takes Karpenter's gate names)
#   CONFORMANCE_OUT            output directory (default $CAPSTAN_CACHE/conformance-karpenter/runs/<time>)
#   CONFORMANCE_KEEP_GOING     1: exit 0 even when specs fail (the table is the result)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../control-plane/upstream.env
source "$ROOT/tests/control-plane/upstream.env"
CACHE="${CAPSTAN_CACHE:-$HOME/.cache/capstan}"
CP="$ROOT/tests/control-plane/cp"
CONTROLLERS="${CONFORMANCE_CONTROLLERS:-capstan karpenter}"
PARTITIONS="${CONFORMANCE_PARTITIONS:-2}"
SUBSET="${CONFORMANCE_SUBSET:-all}"
SUITES="${CONFORMANCE_SUITES:-regression disruption dra}"
NODECLASS="${CONFORMANCE_NODECLASS:-auto}"
FEATURE_GATES="${CONFORMANCE_FEATURE_GATES:-NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=true,CapacityBuffer=true}"
OUT="${CONFORMANCE_OUT:-$CACHE/conformance-karpenter/runs/$(date +%Y%m%d-%H%M%S)}"
export GOTOOLCHAIN="$UPSTREAM_GOTOOLCHAIN"

die() { echo "conformance-karpenter: $*" >&2; exit 1; }
log() { printf '==> %s\n' "$*" >&2; }

# The areas of the suites (each suite's top-level containers) as SUITE:Area:minutes, the suite by its
# package and the minutes a rough weight (estimates; Karpenter's kwok controller took 21 min for Drift,
# NodeClaim and Expiration together on a loaded 2-core machine), used to spread them over the
# partitions, heaviest first. A failing spec costs its 15-minute Eventually. Ginkgo names a spec
# "<suite description> <containers> <spec>": the descriptions are Regression, Disruption and DRA.
AREAS=(regression:Integration:30 regression:StaticCapacity:25 regression:NodeClaim:15 regression:Performance:20
	regression:Chaos:10 regression:CapacityBuffer:15 regression:DefaultTopologySpreadConstraints:2
	disruption:Drift:30 disruption:Termination:15 disruption:Expiration:8 disruption:Reboot:12
	disruption:Repair:20 disruption:TerminateFirst:5 dra:DRA:15)
declare -A DESCRIPTION=([regression]=Regression [disruption]=Disruption [dra]=DRA)
# The fast subset: the NodePool Validation specs, the NodePool hash, DaemonSet overhead under a
# LimitRange and a few short lifecycles of the three suites, listed one by one in fast-specs.txt. The
# focus selecting exactly them is made from the list (Ginkgo matches it against the suite's
# description and the spec's text), and the run is checked against the same list.
FAST_SPECS="$HERE/fast-specs.txt"
FAST_FOCUS="$(python3 "$HERE/summary.py" --focus "$FAST_SPECS")"

[[ "$SUBSET" == all || "$SUBSET" == fast ]] || die "CONFORMANCE_SUBSET must be all or fast, not $SUBSET"
[[ "$NODECLASS" =~ ^(suite|capstan|auto)$ ]] || die "CONFORMANCE_NODECLASS must be suite, capstan or auto, not $NODECLASS"
[[ "$PARTITIONS" =~ ^[1-9][0-9]*$ ]] || die "CONFORMANCE_PARTITIONS must be a positive number"

# --- the suites and the upstream module ------------------------------------------------------------

for suite in $SUITES; do
	[[ -n "${DESCRIPTION[$suite]:-}" ]] || die "unknown suite $suite in CONFORMANCE_SUITES (regression, disruption, dra)"
done
pinned="$(cd "$HERE" && go list -m -f '{{.Version}}' "$KARPENTER_MODULE")"
[[ "$pinned" == "$KARPENTER_MODULE_VERSION" ]] ||
	die "$HERE/go.mod pins $KARPENTER_MODULE $pinned, tests/control-plane/upstream.env $KARPENTER_MODULE_VERSION: make them the same (go get $KARPENTER_MODULE@$KARPENTER_MODULE_VERSION && go mod tidy)"
MODULE_DIR="$(cd "$HERE" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$KARPENTER_MODULE")"
[[ -d "$MODULE_DIR/hack/kwok/stages" ]] || die "no hack/kwok/stages in $MODULE_DIR"
SUITE_DIR="$CACHE/conformance-karpenter/$KARPENTER_MODULE_VERSION"
mkdir -p "$SUITE_DIR"
# Cached suites are rebuilt when this module's go.mod or go.sum change (the DRA KWOK driver is
# built and keyed by dra-kwok-driver.sh).
SUITE_KEY="$(cat "$HERE/go.mod" "$HERE/go.sum" | sha256sum | cut -c1-12)"
build_once() { # build_once OUT GO-BUILD-ARGS...: go test -c / go build into OUT unless it is there
	local out=$1
	shift
	[[ -x "$out" ]] && return 0
	log "building $out ($*; cached in $SUITE_DIR)"
	(cd "$HERE" && "$@" -trimpath -o "$out.tmp") >&2
	mv "$out.tmp" "$out"
}
# The DRA suite is built in dra-suite/, where a `go test -overlay` puts upstream's test files (from
# the module cache, unchanged) beside one file of ours (dra-suite/scheme_test.go says why); the key
# covers that file.
DRA_OVERLAY="$SUITE_DIR/dra-overlay.json"
{
	printf '{"Replace":{'
	sep=""
	for f in "$MODULE_DIR"/test/suites/dra/*.go; do
		printf '%s"%s":"%s"' "$sep" "$HERE/dra-suite/$(basename "$f")" "$f"
		sep=","
	done
	printf '}}\n'
} >"$DRA_OVERLAY"
DRA_KEY="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/dra-suite/scheme_test.go" | sha256sum | cut -c1-12)"
suite_bin() { # suite_bin SUITE: the cached test binary of SUITE
	if [[ "$1" == dra ]]; then echo "$SUITE_DIR/$1-$DRA_KEY.test"; else echo "$SUITE_DIR/$1-$SUITE_KEY.test"; fi
}
for suite in $SUITES; do
	if [[ "$suite" == dra ]]; then
		build_once "$(suite_bin "$suite")" go test -c -overlay "$DRA_OVERLAY" ./dra-suite
	else
		build_once "$(suite_bin "$suite")" go test -c "$KARPENTER_MODULE/test/suites/$suite"
	fi
done
DRA_DRIVER=""
DRA_CRD=""
if [[ " $SUITES " == *" dra "* ]]; then
	built="$(bash "$HERE/dra-kwok-driver.sh")"
	DRA_DRIVER="${built%%$'\n'*}"
	DRA_CRD="${built##*$'\n'}"
fi

KARPENTER_BIN=""
if [[ " $CONTROLLERS " == *" karpenter "* ]]; then
	log "Karpenter's kwok controller $KARPENTER_MODULE_VERSION (tests/bench-e2e/karpenter-kwok.sh)"
	built="$(KARPENTER_VERSION="$KARPENTER_MODULE_VERSION" KARPENTER_GO="$(go env GOVERSION)" \
		bash "$ROOT/tests/bench-e2e/karpenter-kwok.sh")"
	KARPENTER_BIN="${built%%$'\n'*}"
fi
if [[ " $CONTROLLERS " == *" capstan "* ]]; then
	[[ -x "${CAPSTAN_HOST_BIN:-}" ]] || die "CAPSTAN_HOST_BIN must name the capstan binary"
	KWOK_WASM="${CAPSTAN_WASM_DIR:-$CACHE/wasm}/kwok.wasm"
	[[ -f "$KWOK_WASM" ]] || die "no kwok provider at $KWOK_WASM (make providers)"
fi
CP_BIN="$(bash "$CP" build)"

# --- partitions -------------------------------------------------------------------------------------

# The focus regex of each partition: the areas spread longest first over the least loaded partition
# (only the suites asked for).
partition_focus() {
	local n=$1 i best suite area minutes
	local -a load focus
	for ((i = 0; i < n; i++)); do load[i]=0; focus[i]=""; done
	while read -r suite area minutes; do
		[[ " $SUITES " == *" $suite "* ]] || continue
		best=0
		for ((i = 1; i < n; i++)); do ((load[i] < load[best])) && best=$i; done
		load[best]=$((load[best] + minutes))
		focus[best]+="${focus[best]:+|}^${DESCRIPTION[$suite]} $area "
	done < <(printf '%s\n' "${AREAS[@]}" | tr ':' ' ' | sort -k3 -nr)
	for ((i = 0; i < n; i++)); do echo "${focus[i]}"; done
}

# The suites (of those asked for) a focus can select a spec of: those whose description it names, or
# all of them when it names none (a hand-written focus).
suites_of() {
	local focus=$1 suite named=()
	for suite in $SUITES; do
		[[ "$focus" == *"${DESCRIPTION[$suite]} "* || "$focus" == *"${DESCRIPTION[$suite]} ("* ]] && named+=("$suite")
	done
	((${#named[@]})) || named=($SUITES)
	echo "${named[@]}"
}

# kwok with Karpenter's pod stages: the control plane's default stages with its pod-delete replaced by
# Karpenter's (which honours the pod-delete.stage.kwok.x-k8s.io/delay annotation the suite sets for
# pre-stop hooks), plus Karpenter's pod-unhealthy.
write_kwok_wrapper() {
	local dir=$1
	mkdir -p "$dir"
	cat >"$dir/kwok" <<EOF
#!/usr/bin/env bash
set -euo pipefail
args=()
while ((\$#)); do
	if [[ "\$1" == --config ]]; then
		# The default stages, without pod-delete (documents split on ---).
		awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/\n  name: pod-delete\n/' "\$2" >"$dir/stages.yaml"
		for f in "$MODULE_DIR"/hack/kwok/stages/*.yaml; do cat "\$f"; printf '\n---\n'; done >>"$dir/stages.yaml"
		args+=(--config "$dir/stages.yaml")
		shift 2
		continue
	fi
	args+=("\$1")
	shift
done
exec "$CP_BIN/kwok" "\${args[@]}"
EOF
	chmod +x "$dir/kwok"
}

# Each partition runs in a subshell of its own, which stops its controller and control plane on exit.
PIDS=()
CPS=()
cleanup() {
	local pid d
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	for d in "${CPS[@]}"; do bash "$CP" down --dir "$d" >/dev/null 2>&1 || true; done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_http() { # wait_http URL SECONDS PID LOG
	local deadline=$((SECONDS + $2))
	until curl -sf -o /dev/null "$1"; do
		kill -0 "$3" 2>/dev/null || { tail -n 30 "$4" >&2; die "the controller exited (log: $4)"; }
		((SECONDS < deadline)) || { tail -n 30 "$4" >&2; die "$1 not ready after $2 s (log: $4)"; }
		sleep 0.5
	done
}

# start_controller CONTROLLER DIR: the CRDs and the controller on the control plane in DIR/cp.
start_controller() {
	local controller=$1 dir=$2 k health nodeclass
	k() { "$CP_BIN/kubectl" --kubeconfig "$dir/cp/kubeconfig" "$@"; }
	health=$(free_port)
	case "$controller" in
	capstan)
		# Capstan's CRDs (NodeOverlay and CapacityBuffer among them).
		k apply --server-side -f "$ROOT/crds" >/dev/null
		k wait --for condition=established --timeout=60s crd --all >/dev/null
		k create namespace capstan >/dev/null
		"$CAPSTAN_HOST_BIN" provider package "$KWOK_WASM" --name kwok --namespace capstan \
			--grants "$ROOT/tests/scripts/demo/kwok-grants.yaml" | k apply --server-side -f - >/dev/null
		# The node class Capstan gets: the suite's own KWOKNodeClass once the kwok provider serves it
		# (its package brings the CRD), else a Capstan NodeClass through --default-nodeclass.
		nodeclass=$NODECLASS
		if [[ "$nodeclass" == auto ]]; then
			nodeclass=capstan
			k get crd kwoknodeclasses.karpenter.kwok.sh >/dev/null 2>&1 && nodeclass=suite
		fi
		if [[ "$nodeclass" == suite ]] && ! k get crd kwoknodeclasses.karpenter.kwok.sh >/dev/null 2>&1; then
			# Asked for, but not served: the CRD from the module, so the suite runs (and shows it).
			k apply --server-side -f "$MODULE_DIR/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" >/dev/null
			k wait --for condition=established --timeout=60s crd/kwoknodeclasses.karpenter.kwok.sh >/dev/null
		fi
		echo "$nodeclass" >"$dir/nodeclass"
		FEATURE_GATES="$FEATURE_GATES" "$CAPSTAN_HOST_BIN" run --kubeconfig "$dir/cp/kubeconfig" --provider-source-namespace capstan \
			--log-level info --metrics-bind-address 127.0.0.1:0 \
			--health-probe-bind-address "127.0.0.1:$health" >"$dir/controller.log" 2>&1 &
		PIDS+=($!)
		wait_http "http://127.0.0.1:$health/readyz" 180 "$!" "$dir/controller.log"
		k wait --for=condition=Ready provider/kwok --timeout=180s >/dev/null
		;;
	karpenter)
		k apply --server-side -f "$MODULE_DIR/pkg/apis/crds" \
			-f "$MODULE_DIR/kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" >/dev/null
		k wait --for condition=established --timeout=60s crd --all >/dev/null
		KUBECONFIG="$dir/cp/kubeconfig" DISABLE_LEADER_ELECTION=true METRICS_PORT="$(free_port)" \
			HEALTH_PROBE_PORT="$health" LOG_LEVEL=info FEATURE_GATES="$FEATURE_GATES" "$KARPENTER_BIN" >"$dir/controller.log" 2>&1 &
		PIDS+=($!)
		wait_http "http://127.0.0.1:$health/readyz" 180 "$!" "$dir/controller.log"
		;;
	esac
}

# run_partition CONTROLLER INDEX FOCUS: one control plane, one controller, the suite focused on FOCUS.
run_partition() {
	local controller=$1 i=$2 focus=$3 dir="$OUT/$1-$2" started=$SECONDS rc=0
	local -a flags=()
	mkdir -p "$dir"
	write_kwok_wrapper "$dir/kwok-bin"
	CPS+=("$dir/cp")
	bash "$CP" up --dir "$dir/cp" --kwok-bin "$dir/kwok-bin/kwok" >"$dir/cp-up.log" 2>&1 ||
		{ tail -n 20 "$dir/cp-up.log" >&2; die "$controller-$i: the control plane did not start"; }
	start_controller "$controller" "$dir"
	if [[ "$(cat "$dir/nodeclass" 2>/dev/null)" == capstan ]]; then
		flags+=(--default-nodeclass "$HERE/capstan-nodeclass.yaml")
	fi
	local suite suites
	suites="$(suites_of "$focus")"
	if [[ " $suites " == *" dra "* ]]; then
		start_dra_driver "$dir"
	fi
	local shown=$focus
	((${#shown} <= 160)) || shown="${shown:0:150}... (the subset's $(grep -o '|' <<<"$focus" | wc -l | xargs expr 1 +) specs)"
	for suite in $suites; do
		log "$controller-$i: $suite suite, [$shown] with ${flags[*]:-the default KWOKNodeClass of the suite} (log: $dir/$suite.log)"
		rc=0
		KUBECONFIG="$dir/cp/kubeconfig" OUTPUT_DIR="$dir" "$(suite_bin "$suite")" -test.timeout 0 -test.v \
			--ginkgo.focus "$focus" --ginkgo.no-color --ginkgo.v \
			--ginkgo.timeout 3h --ginkgo.junit-report "$dir/junit-$suite.xml" "${flags[@]}" \
			>"$dir/$suite.log" 2>&1 || rc=$?
		echo "$rc" >"$dir/exit-$suite"
		log "$controller-$i: $suite suite done after $((SECONDS - started)) s (exit $rc)"
	done
	echo "$((SECONDS - started))" >"$dir/seconds"
}

# start_dra_driver DIR: Karpenter's DRA KWOK driver (its DRAConfig CRD first) on the control plane in
# DIR/cp, stopped with the partition.
start_dra_driver() {
	local dir=$1 health
	"$CP_BIN/kubectl" --kubeconfig "$dir/cp/kubeconfig" apply --server-side -f "$DRA_CRD" >/dev/null
	"$CP_BIN/kubectl" --kubeconfig "$dir/cp/kubeconfig" wait --for condition=established --timeout=60s \
		crd/draconfigs.test.karpenter.sh >/dev/null
	health=$(free_port)
	KUBECONFIG="$dir/cp/kubeconfig" "$DRA_DRIVER" --health-probe-bind-address "127.0.0.1:$health" \
		>"$dir/dra-kwok-driver.log" 2>&1 &
	PIDS+=($!)
	wait_http "http://127.0.0.1:$health/readyz" 120 "$!" "$dir/dra-kwok-driver.log"
}

mkdir -p "$OUT"
log "output: $OUT"
focuses=()
if [[ -n "${CONFORMANCE_FOCUS:-}" ]]; then
	focuses=("$CONFORMANCE_FOCUS")
elif [[ "$SUBSET" == fast ]]; then
	focuses=("$FAST_FOCUS")
else
	mapfile -t focuses < <(partition_focus "$PARTITIONS")
fi
jobs_pids=()
trap 'kill "${jobs_pids[@]}" 2>/dev/null; wait; exit 130' INT TERM
for controller in $CONTROLLERS; do
	for i in "${!focuses[@]}"; do
		[[ -n "${focuses[i]}" ]] || continue
		(
			trap cleanup EXIT
			trap 'exit 130' INT TERM
			run_partition "$controller" "$i" "${focuses[i]}"
		) &
		jobs_pids+=($!)
	done
done
failed_jobs=0
for pid in "${jobs_pids[@]}"; do wait "$pid" || failed_jobs=$((failed_jobs + 1)); done

python3 "$HERE/summary.py" "$OUT" $CONTROLLERS
((failed_jobs == 0)) || die "$failed_jobs partition(s) could not run (see their logs in $OUT)"
if [[ "${CONFORMANCE_KEEP_GOING:-0}" != 1 ]]; then
	if [[ -z "${CONFORMANCE_FOCUS:-}" && "$SUBSET" == fast ]]; then
		# Exactly the listed specs, each passed: a suite that ran none (its BeforeSuite failed, no
		# JUnit report) or other ones fails here.
		python3 "$HERE/summary.py" --expect "$FAST_SPECS" "$OUT" $CONTROLLERS ||
			die "the fast subset did not run and pass exactly the specs of $FAST_SPECS (logs in $OUT)"
	else
		python3 "$HERE/summary.py" --check "$OUT" $CONTROLLERS
	fi
fi
