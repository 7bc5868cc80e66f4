#!/usr/bin/env bash
# Builds the guest components for wasm32-wasip2 and copies them to OUT_DIR (default:
# providers-wasm/target/wasm), printing each path and size.
#
#   providers-wasm/build.sh [OUT_DIR]
#
# Honours CARGO_TARGET_DIR (default providers-wasm/target). Artifacts: chaos.wasm (contract 0.1.0),
# egress.wasm (0.2.0), clusterapi.wasm (0.3.0), kwok.wasm and cloudstack.wasm (0.4.0), and the Python guests of
# python/build.sh (kwok-python.wasm; componentize-py, cached by input digest under $CAPSTAN_CACHE).
# CAPSTAN_PROVIDERS (space-separated names, e.g. "kwok") builds only those: the demo builds kwok alone,
# without the other guests or the Python toolchain.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Resolve paths against the caller's directory before changing into the workspace.
out="$(realpath -m "${1:-$here/target/wasm}")"
CARGO_TARGET_DIR="$(realpath -m "${CARGO_TARGET_DIR:-$here/target}")"
export CARGO_TARGET_DIR
target=wasm32-wasip2
artifacts=(kwok clusterapi chaos egress cloudstack)

if command -v rustup >/dev/null 2>&1; then
  if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
else
  echo "build.sh: rustup not found; assuming the $target standard library is installed" >&2
fi

wanted=(${CAPSTAN_PROVIDERS:-${artifacts[*]} kwok-python})
wants() { [[ " ${wanted[*]} " == *" $1 "* ]]; }
# shellcheck source=contracts.sh
source "$here/contracts.sh"

cd "$here"
# Each contract's guests on their own (contracts.sh says why).
while read -r _contract group; do
  packages=()
  for package in $group; do
    name=$(guest_artifact "$package")
    [ -n "$name" ] && wants "$name" && packages+=(-p "$package")
  done
  [ ${#packages[@]} -gt 0 ] && cargo build --release --target "$target" "${packages[@]}"
done < <(guest_groups)

mkdir -p "$out"
for name in "${artifacts[@]}"; do
  wants "$name" || continue
  src="$CARGO_TARGET_DIR/$target/release/$name.wasm"
  cp "$src" "$out/$name.wasm"
  printf '%s\t%s bytes\n' "$out/$name.wasm" "$(wc -c <"$out/$name.wasm")"
done

# The Python guests (componentize-py in a pinned venv under $CAPSTAN_CACHE; cached by input digest).
if wants kwok-python; then
  bash "$here/python/build.sh" "$out"
fi
