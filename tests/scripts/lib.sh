# Shared setup for the test, demo and bench scripts. Source it; it sets up paths and installs what is missing.
# Everything heavy is cached under $CAPSTAN_CACHE (default ~/.cache/capstan) so a fresh clone on a warm
# machine does not rebuild.

set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export REPO_ROOT
export CAPSTAN_CACHE=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CAPSTAN_CACHE/target}
# The guest workspace gets its own target dir: different target triple and profile.
export CAPSTAN_PROVIDERS_TARGET_DIR=${CAPSTAN_PROVIDERS_TARGET_DIR:-$CAPSTAN_CACHE/providers-target}
export CAPSTAN_WASM_DIR=${CAPSTAN_WASM_DIR:-$CAPSTAN_CACHE/wasm}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

log() { printf '\n==> %s\n' "$*" >&2; }

ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
      export PATH="$HOME/.cargo/bin:$PATH"
    else
      echo "error: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
      exit 1
    fi
  fi
  if command -v rustup >/dev/null 2>&1; then
    local installed
    installed=$(rustup component list --installed 2>/dev/null || true)
    for c in rustfmt clippy; do
      if ! grep -q "^$c" <<<"$installed"; then
        log "installing rust component $c"
        rustup component add "$c"
      fi
    done
    if ! rustup target list --installed | grep -qx wasm32-wasip2; then
      log "installing rust target wasm32-wasip2"
      rustup target add wasm32-wasip2
    fi
  fi
}

ensure_go() {
  if ! command -v go >/dev/null 2>&1; then
    for d in /usr/local/go/bin /usr/lib/go/bin; do
      [ -x "$d/go" ] && export PATH="$d:$PATH" && return 0
    done
    log "installing Go from Debian packages"
    apt-get update -qq && apt-get install -y -qq golang-go
  fi
}

# The Python guest toolchain (componentize-py and pytest, pinned) in a venv under $CAPSTAN_CACHE;
# exports CAPSTAN_PYTHON_VENV.
# shellcheck source=../../providers-wasm/python/toolchain.sh
source "$REPO_ROOT/providers-wasm/python/toolchain.sh"

# Builds the guest providers (Rust, and Python with componentize-py) into $CAPSTAN_WASM_DIR.
build_providers() {
  ensure_rust
  log "building wasm providers into $CAPSTAN_WASM_DIR"
  CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" bash "$REPO_ROOT/providers-wasm/build.sh" "$CAPSTAN_WASM_DIR"
}

# The daemonless image tools, from Debian packages: umoci (writes the OCI image), runc (the image
# test runs the image with it), and dpkg-deb/apt-get (the image's base comes from .deb files).
ensure_image_tools() {
  local missing=()
  command -v umoci >/dev/null 2>&1 || missing+=(umoci)
  command -v runc >/dev/null 2>&1 || missing+=(runc)
  # The outbound HTTPS test makes its private CA with openssl.
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  # The image's base packages are apt's candidates: apt's lists must be there.
  local policy
  policy=$(apt-cache policy libc6 2>/dev/null || true)
  if [ ${#missing[@]} -gt 0 ] || ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    log "apt-get update"
    apt-get update -qq
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} from Debian packages"
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  ensure_seccomp_profile
}

# The seccomp profile CRI-O applies for `seccompProfile: RuntimeDefault` (containers/common's
# seccomp.json, from Debian's golang-github-containers-common: unpacked, not installed) at
# $CAPSTAN_CACHE/image/seccomp.json; the image test runs the host under it, as the chart asks.
ensure_seccomp_profile() {
  local out="$CAPSTAN_CACHE/image/seccomp.json" tmp
  [ -f "$out" ] && return 0
  log "the RuntimeDefault seccomp profile (golang-github-containers-common)"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -q golang-github-containers-common) 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; } >&2
  dpkg-deb -x "$tmp"/golang-github-containers-common_*.deb "$tmp/x"
  mkdir -p "$(dirname "$out")"
  cp "$tmp/x/usr/share/containers/seccomp.json" "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$tmp"
}

# Builds the host's OCI image (image/build.sh) from a release build of the host, under
# $CAPSTAN_CACHE/image/<key> (keyed on the binary and the base's packages; cached).
build_image() {
  ensure_rust
  ensure_image_tools
  log "release build of the host"
  (cd "$REPO_ROOT" && cargo build --release --locked -p capstan)
  log "the host's OCI image (cached under $CAPSTAN_CACHE/image)"
  bash "$REPO_ROOT/image/build.sh" "$CARGO_TARGET_DIR/release/capstan" >&2
}

# Packages the chart with the built image's reference and digest (needs helm, from the control plane
# build), next to the image.
package_chart() {
  log "the chart, packaged for the image"
  bash "$REPO_ROOT/image/chart.sh" "$(bash "$REPO_ROOT/tests/control-plane/cp" build)/helm" >/dev/null
}

# Builds (or finds cached) control-plane binaries with helm, and Cluster API's controllers, for the tests.
build_control_plane() {
  ensure_go
  log "building the control plane and helm (cached under $CAPSTAN_CACHE/control-plane)"
  bash "$REPO_ROOT/tests/control-plane/cp" build >/dev/null
  log "building Cluster API's core controllers (cached under $CAPSTAN_CACHE/control-plane/tools)"
  bash "$REPO_ROOT/tests/control-plane/cp" capi-build >/dev/null
}

# Builds (or finds cached) the control plane alone (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok, kubectl; not helm): what the demo runs.
build_core_control_plane() {
  ensure_go
  log "building the control plane (cached under $CAPSTAN_CACHE/control-plane)"
  bash "$REPO_ROOT/tests/control-plane/cp" build --core
}

# Builds (or finds cached) the supply-chain tools the OCI and signature tests run: the CNCF
# distribution registry, cosign, oras and Sigstore's services (Fulcio, the timestamp authority,
# Rekor v2), from their Go modules at the versions pinned in tests/control-plane/supply-chain.env.
build_supply_chain_tools() {
  ensure_go
  log "supply-chain test tools: registry, cosign, oras, fulcio, timestamp-server, rekor-server (cached under $CAPSTAN_CACHE/control-plane/tools)"
  bash "$REPO_ROOT/tests/control-plane/cp" supply-chain >/dev/null
}

# Finds (or downloads into the Go module cache) the upstream Go modules whose files the tests read.
fetch_upstream() {
  ensure_go
  log "upstream test data (Go modules pinned in tests/control-plane/upstream.env)"
  bash "$REPO_ROOT/tests/control-plane/cp" upstream
}

# The `cs` CloudStack client (PyPI, pinned) in a venv under $CAPSTAN_CACHE: the third-party client
# the CloudStack emulator's wire test drives (tests/cloudstack-emulator/tests/cs_client.rs finds
# it through $CAPSTAN_CS_PYTHON, or at this path). Idempotent.
CS_CLIENT_VERSION=5.2.0
ensure_cs_client() {
  local venv="$CAPSTAN_CACHE/python-cs-$CS_CLIENT_VERSION"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import cs, sys; sys.exit(cs.__version__ != '$CS_CLIENT_VERSION')" 2>/dev/null; then
    export CAPSTAN_CS_PYTHON="$venv/bin/python"
    return 0
  fi
  command -v python3 >/dev/null 2>&1 || { log "installing python3 from Debian packages"; apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null; }
  log "the cs CloudStack client $CS_CLIENT_VERSION (PyPI) in $venv"
  rm -rf "$venv.tmp"
  python3 -m venv "$venv.tmp" || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$venv.tmp"; }
  "$venv.tmp/bin/pip" install -q --disable-pip-version-check "cs==$CS_CLIENT_VERSION"
  rm -rf "$venv" && mv "$venv.tmp" "$venv"
  export CAPSTAN_CS_PYTHON="$venv/bin/python"
}

# The pieces of `make test`; each is also a make target of the same name. They install nothing
# but Rust components: the caller sets up what they need.

# Formats both workspaces in place.
task_fmt() {
  log "format"
  (cd "$REPO_ROOT" && cargo fmt --all)
  (cd "$REPO_ROOT/providers-wasm" && cargo fmt --all)
}

# Format check and clippy: the host workspace, the guest workspace natively and for wasm32-wasip2.
# Commit subjects are at most 72 characters, the detail in the body; checked for the commits after
# COMMIT_SUBJECTS_SINCE (the last one before the rule). Skipped outside a git checkout, or in a
# shallow clone that lacks that commit.
COMMIT_SUBJECTS_SINCE=c1e6f8e
check_commit_subjects() {
  command -v git >/dev/null 2>&1 && git -C "$REPO_ROOT" rev-parse --verify -q "$COMMIT_SUBJECTS_SINCE^{commit}" >/dev/null || {
    log "commit subjects: no history to check (not a full git checkout)"
    return 0
  }
  local long
  long=$(git -C "$REPO_ROOT" log --format='%s' "$COMMIT_SUBJECTS_SINCE..HEAD" | awk 'length($0) > 72')
  if [ -n "$long" ]; then
    echo "error: commit subjects over 72 characters (put the detail in the body):" >&2
    echo "$long" >&2
    return 1
  fi
}

task_lint() {
  log "commit subjects"
  check_commit_subjects
  log "format check"
  (cd "$REPO_ROOT" && cargo fmt --all -- --check)
  (cd "$REPO_ROOT/providers-wasm" && cargo fmt --all -- --check)
  log "lint (host workspace)"
  (cd "$REPO_ROOT" && cargo clippy --workspace --all-targets --locked -- -D warnings)
  log "lint (guest workspace, each contract's guests, native and wasm32-wasip2)"
  local _contract group
  while read -r _contract group; do
    guest_cargo "$group" clippy --all-targets --locked -- -D warnings
    guest_cargo "$group" clippy --locked --target wasm32-wasip2 -- -D warnings
  done < <(guest_groups)
}

# guest_cargo "PACKAGES" ARGS...: cargo ARGS for those guest packages (one contract's: see
# providers-wasm/contracts.sh), in the guest workspace and its target directory.
# shellcheck source=../../providers-wasm/contracts.sh
source "$REPO_ROOT/providers-wasm/contracts.sh"
guest_cargo() {
  local packages=() package
  for package in $1; do packages+=(-p "$package"); done
  shift
  local cmd=$1
  shift
  (cd "$REPO_ROOT/providers-wasm" && CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" \
    cargo "$cmd" "${packages[@]}" "$@")
}

# Unit and property tests, no control plane: the host workspace's library, binary and doc tests,
# and the guest workspace's tests (natively).
task_unit() {
  log "host unit tests"
  (cd "$REPO_ROOT" && cargo test --workspace --locked --lib --bins)
  (cd "$REPO_ROOT" && cargo test --workspace --locked --doc)
  log "guest unit tests"
  local _contract group
  while read -r _contract group; do
    guest_cargo "$group" test --locked
  done < <(guest_groups)
  log "Python guest SDK and provider tests (pytest)"
  (cd "$REPO_ROOT/providers-wasm/python" && PYTHONDONTWRITEBYTECODE=1 "$CAPSTAN_PYTHON_VENV/bin/python" -m pytest -q -p no:cacheprovider)
  log "the conformance run's checks (tests/conformance-karpenter/summary_test.py)"
  (cd "$REPO_ROOT/tests/conformance-karpenter" && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest -q summary_test)
}

# run_ignored_tests [--exact] [LIBTEST_OPTION...] -- FILTER...: runs the ignored tests of host/tests/all
# (`cargo test -p capstan --test all -- --ignored`) the FILTERs select: each FILTER a test's full name
# with --exact, a part of one without. libtest passes when a filter selects nothing ("0 passed"), so the
# tests are listed first, and a FILTER that selects no ignored test fails before anything runs.
run_ignored_tests() {
  local -a libtest=(--ignored) list=(--ignored --list) filters=() missing=()
  local exact=0 filter listed what="matched by"
  while (($#)); do
    case "$1" in
      --exact) exact=1; libtest+=(--exact); list+=(--exact); what=named ;;
      --) shift; filters=("$@"); break ;;
      *) libtest+=("$1") ;;
    esac
    shift
  done
  if ((${#filters[@]} == 0)); then
    echo "run_ignored_tests: no test named (run_ignored_tests [--exact] [OPTION...] -- FILTER...)" >&2
    return 1
  fi
  # `--list` prints "NAME: test" for each test the filters select (with --ignored, ignored ones only).
  listed=$(cd "$REPO_ROOT" && cargo test -p capstan --locked --test all -- "${list[@]}" "${filters[@]}") || return 1
  listed=$(sed -n 's/: test$//p' <<<"$listed")
  for filter in "${filters[@]}"; do
    if ((exact)); then
      grep -qxF -- "$filter" <<<"$listed" || missing+=("$filter")
    else
      grep -qF -- "$filter" <<<"$listed" || missing+=("$filter")
    fi
  done
  if ((${#missing[@]})); then
    echo "error: no ignored test of host/tests/all is $what:" >&2
    printf '  %s\n' "${missing[@]}" >&2
    return 1
  fi
  (cd "$REPO_ROOT" && cargo test -p capstan --locked --test all -- "${libtest[@]}" "${filters[@]}")
}

# Integration and e2e tests (host/tests, tests/support/tests) on the real control plane.
task_e2e() {
  log "host integration and e2e tests"
  # Most e2e tests wait on the control plane rather than compute, and each isolates itself (its own
  # selector, names and namespaces), so they run four at a time even on two cores.
  (cd "$REPO_ROOT" && cargo test --workspace --locked --test '*' -- --test-threads "${CAPSTAN_TEST_THREADS:-4}")
  # The heavy ones run alone afterwards, one at a time: 1,000 or 3,000 pods would slow the timing
  # checks of the others, and their own figures would measure the others' load.
  log "heavy e2e tests, one at a time"
  run_ignored_tests --exact --nocapture --test-threads 1 -- \
    consolidation::a_thousand_pods_scaled_to_three_hundred_cost_what_fresh_provisioning_does \
    bench_scale::a_host_with_3000_pods_keeps_its_memory_per_pod_bounded
  task_conformance_fast
}

# The release build of the host the conformance runs use, copied at once (another checkout sharing
# the target directory may rebuild target/release/capstan meanwhile): sets CAPSTAN_HOST_BIN unless set.
conformance_host_bin() {
  [ -n "${CAPSTAN_HOST_BIN:-}" ] && return 0
  log "release build of the host"
  (cd "$REPO_ROOT" && cargo build --release --locked -p capstan --bin capstan)
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/capstan-conformance.XXXXXX")
  cp -f "$CARGO_TARGET_DIR/release/capstan" "$dir/capstan"
  export CAPSTAN_HOST_BIN="$dir/capstan"
}

# `make conformance-karpenter`: Karpenter's own e2e suites (sigs.k8s.io/karpenter/test/suites/regression,
# disruption and dra at the pinned version) against Capstan, and against Karpenter's own kwok controller
# as the control, the areas spread over control planes of their own (tests/conformance-karpenter/run.sh;
# its env knobs apply).
task_conformance_karpenter() {
  conformance_host_bin
  log "Karpenter's regression, disruption and DRA suites: Capstan beside Karpenter's kwok controller"
  CONFORMANCE_KEEP_GOING=${CONFORMANCE_KEEP_GOING:-1} bash "$REPO_ROOT/tests/conformance-karpenter/run.sh"
}

# The fast subset of those suites in `make test` (the specs tests/conformance-karpenter/fast-specs.txt
# lists: the NodePool Validation specs, the NodePool hash and a few short lifecycles of each suite):
# Capstan alone; it fails unless exactly those specs ran and every one passed.
task_conformance_fast() {
  conformance_host_bin
  log "Karpenter's e2e suites, fast subset, against Capstan"
  CONFORMANCE_SUBSET=fast CONFORMANCE_CONTROLLERS=capstan CONFORMANCE_KEEP_GOING=0 \
    bash "$REPO_ROOT/tests/conformance-karpenter/run.sh"
}

# The measurements that need a real control plane and the host binary (ignored by `make test`):
# a 20-node rollout with budget 1 and with budget 20%.
task_bench_disruption() {
  log "disruption measurements (20-node rollouts)"
  run_ignored_tests --nocapture -- measure_rollout
}

# The host's API requests per minute at rest with 200 nodes and 2,000 pods (CAPSTAN_HOST_BIN runs
# another build of the host).
task_bench_api_load() {
  log "API requests at rest (200 nodes, 2,000 pods)"
  run_ignored_tests --nocapture -- measure_api_requests
}

# Capstan beside upstream Karpenter's kwok controller on the same scenario, each on a fresh control
# plane: 1,000 pods, scaled to 500, deleted (host/tests/all/bench_e2e.rs; ignored by `make test`).
# The host is a release build ($CAPSTAN_HOST_BIN, if set, runs another one); Karpenter's binary is
# built from its Go module by tests/bench-e2e/karpenter-kwok.sh.
# A release host for the end-to-end benchmarks, copied to $CAPSTAN_CACHE/bench-e2e/capstan (another checkout
# may rebuild target/release/capstan during the run), unless CAPSTAN_HOST_BIN names one.
bench_host() {
  # Checkouts of this repository sharing the target directory (git worktrees) build the same
  # cargo units (paths are relative to the workspace), so cargo may call another checkout's newer
  # build fresh: touching the crate roots makes it build the host and the test from this one.
  touch "$REPO_ROOT/host/src/lib.rs" "$REPO_ROOT/host/src/main.rs" "$REPO_ROOT/host/tests/all/main.rs"
  if [ -z "${CAPSTAN_HOST_BIN:-}" ]; then
    log "release build of the host"
    (cd "$REPO_ROOT" && cargo build --release --locked -p capstan --bin capstan)
    mkdir -p "$CAPSTAN_CACHE/bench-e2e"
    cp -f "$CARGO_TARGET_DIR/release/capstan" "$CAPSTAN_CACHE/bench-e2e/capstan"
    export CAPSTAN_HOST_BIN="$CAPSTAN_CACHE/bench-e2e/capstan"
  fi
}

# Runs the ignored measurement `$1` of host/tests/all with its log in $CAPSTAN_CACHE/$2/last-run.log.
run_measurement() {
  local test="$1" dir="$CAPSTAN_CACHE/$2"
  mkdir -p "$dir"
  run_ignored_tests --exact --nocapture -- "$test" | tee "$dir/last-run.log"
}

task_bench_e2e() {
  log "Karpenter's kwok controller (cached under $CAPSTAN_CACHE/karpenter-kwok)"
  bash "$REPO_ROOT/tests/bench-e2e/karpenter-kwok.sh" >/dev/null
  bench_host
  log "bench-e2e: Capstan ($CAPSTAN_HOST_BIN) beside Karpenter, 1,000 pods (about 25 minutes)"
  run_measurement bench_e2e::bench_e2e_capstan_beside_karpenter bench-e2e
}

# Capstan beside Karpenter v1.15 with its DRA allocator on, pods asking for devices
# (host/tests/all/bench_dra.rs); Karpenter's DRA KWOK driver publishes the nodes' ResourceSlices.
task_bench_dra() {
  log "Karpenter's kwok controller and DRA KWOK driver (cached under $CAPSTAN_CACHE)"
  bash "$REPO_ROOT/tests/bench-e2e/karpenter-kwok.sh" >/dev/null
  bash "$REPO_ROOT/tests/conformance-karpenter/dra-kwok-driver.sh" >/dev/null
  bench_host
  log "bench-dra: Capstan ($CAPSTAN_HOST_BIN) beside Karpenter, pods asking for devices (about 10 minutes)"
  run_measurement bench_dra::bench_dra_capstan_beside_karpenter bench-dra
}

# Capstan beside Karpenter at thousands of nodes (host/tests/all/bench_scale.rs; docs/bench-scale.md).
task_bench_scale() {
  log "Karpenter's kwok controller (cached under $CAPSTAN_CACHE/karpenter-kwok)"
  bash "$REPO_ROOT/tests/bench-e2e/karpenter-kwok.sh" >/dev/null
  bench_host
  log "bench-scale: Capstan ($CAPSTAN_HOST_BIN) beside Karpenter, ${SCALE:-2000} nodes (an hour or more)"
  run_measurement bench_scale::bench_scale_capstan_beside_karpenter bench-scale
}

# The clusterapi provider on real Cluster API (host/tests/all/clusterapi/bench.rs; ignored by `make test`):
# 10 launches with Machines provisioned 2 s after creation, in-process and through the host, a delete, and the
# provider's API requests per launch. Prints a `== bench-capi ==` block; the log stays in $CAPSTAN_CACHE.
task_bench_capi() {
  log "bench-capi: the clusterapi provider on Cluster API (about 2 minutes)"
  mkdir -p "$CAPSTAN_CACHE/bench-capi"
  local out="$CAPSTAN_CACHE/bench-capi/last-run.log"
  run_ignored_tests --exact --nocapture -- clusterapi::bench::bench_clusterapi | tee "$out"
}

# Falling back from a full preferred NodePool (host/tests/all/bench_multi.rs): Capstan beside
# Karpenter's kwok controller at a pool limit, and Capstan alone where the preferred pool's provider
# is out of capacity or failing; then the multi-provider e2e tests with their figures (fallback times,
# a misbehaving provider beside another, the Cluster API burst and return). About 20 minutes.
task_bench_multi() {
  log "Karpenter's kwok controller (cached under $CAPSTAN_CACHE/karpenter-kwok)"
  bash "$REPO_ROOT/tests/bench-e2e/karpenter-kwok.sh" >/dev/null
  bench_host
  log "bench-multi: weighted fallback, Capstan ($CAPSTAN_HOST_BIN) beside Karpenter"
  run_measurement bench_multi::bench_multi_weighted_fallback bench-multi
  log "bench-multi: the multi-provider e2e tests and their figures"
  (cd "$REPO_ROOT" && cargo test --locked -p capstan --test all -- --nocapture --test-threads 1 \
    multi_provider:: clusterapi::burst:: providers::multiple::a_provider_whose \
    providers::multiple::a_provider_spend) 2>&1 \
    | grep -E '^(test |kwok pods|insufficient-capacity|trap|burst|pool Event|second pool Event|explain pod|test result)'
}

# The criterion benchmarks in host/benches: all, or the one named by $BENCH; $BENCH_ARGS go to
# criterion (a filter, `--test` to run each benchmark once).
task_bench() {
  log "benchmarks (host/benches${BENCH:+: $BENCH})"
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of arguments
  (cd "$REPO_ROOT" && cargo bench -p capstan --locked ${BENCH:+--bench "$BENCH"} -- ${BENCH_ARGS:-})
}
