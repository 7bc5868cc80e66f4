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

# Builds the guest providers (kwok, chaos) into $CAPSTAN_WASM_DIR.
build_providers() {
  ensure_rust
  log "building wasm providers into $CAPSTAN_WASM_DIR"
  CARGO_TARGET_DIR="$CAPSTAN_PROVIDERS_TARGET_DIR" bash "$REPO_ROOT/providers-wasm/build.sh" "$CAPSTAN_WASM_DIR"
}

# Builds (or finds cached) control-plane binaries.
build_control_plane() {
  ensure_go
  log "building the control plane (cached under $CAPSTAN_CACHE/control-plane)"
  bash "$REPO_ROOT/tests/control-plane/cp" build
}
