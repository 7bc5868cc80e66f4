#!/usr/bin/env bash
# Builds the Python guest components with componentize-py into OUT_DIR, printing each path and
# size; cached by input digest (the sources, the WIT world and the toolchain's pins) under
# $CAPSTAN_CACHE/python-components, so an unchanged provider is copied, not rebuilt.
#
#   providers-wasm/python/build.sh OUT_DIR
#
# Artifacts: kwok-python.wasm (contract 0.5.0: its instance types' DRA devices from the DRA KWOK
# driver's DRAConfigs, as the Rust kwok's), serving Karpenter's KWOKNodeClass from the same CRD
# file as the Rust kwok provider (node_class_crds.py embeds it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:?usage: build.sh OUT_DIR}")"
wit="$here/../../wit/since_v0.5.0"
cache="${CAPSTAN_CACHE:-$HOME/.cache/capstan}/python-components"
# shellcheck source=providers-wasm/python/toolchain.sh
source "$here/toolchain.sh"
ensure_python_toolchain

# build NAME APP_DIR [CRDS]: the component of APP_DIR's app.py with the SDK on its path, declaring
# the node class kinds of the CRD file CRDS (relative to this directory) when given.
build() {
  local name=$1 app=$2 crds=${3:-} digest tmp
  digest=$(
    cd "$here" && {
      find "$app" sdk -type f -name '*.py' -not -path '*/tests/*' | LC_ALL=C sort | xargs sha256sum
      find "$wit" -type f | LC_ALL=C sort | xargs sha256sum
      sha256sum requirements.txt node_class_crds.py ${crds:+"$crds"}
    } | sha256sum | cut -c1-16
  )
  mkdir -p "$cache" "$out"
  if [ ! -f "$cache/$name-$digest.wasm" ]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && "$CAPSTAN_PYTHON_VENV/bin/componentize-py" -d "$wit" -w cloud-provider-world \
      componentize -p "$here/$app" -p "$here/sdk" app -o "$tmp/$name.wasm" >/dev/null)
    if [ -n "$crds" ]; then
      "$CAPSTAN_PYTHON_VENV/bin/python" "$here/node_class_crds.py" "$tmp/$name.wasm" "$here/$crds"
    fi
    mv "$tmp/$name.wasm" "$cache/$name-$digest.wasm"
    rm -rf "$tmp"
  fi
  cp "$cache/$name-$digest.wasm" "$out/$name.wasm"
  printf '%s\t%s bytes\n' "$out/$name.wasm" "$(wc -c <"$out/$name.wasm")"
}

build kwok-python kwok ../kwok/node-class-crds.yaml
