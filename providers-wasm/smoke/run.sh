#!/usr/bin/env bash
# Optional guest smoke test without the Capstan host: builds kwok.wasm and chaos.wasm, transpiles them
# to JavaScript with jco and runs smoke.mjs, which calls every export against a fake kube/host.
# Needs node and the npm registry (jco and the WASI shim are installed into smoke/node_modules).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$here/../build.sh" "$work/wasm" >/dev/null
cd "$here"
[ -d node_modules/@bytecodealliance/jco ] || npm install --no-audit --no-fund --silent
for name in kwok chaos; do
  npx jco transpile "$work/wasm/$name.wasm" -o "$work/out/$name" --instantiation async --name "$name" >/dev/null
done
node smoke.mjs "$work/out"
