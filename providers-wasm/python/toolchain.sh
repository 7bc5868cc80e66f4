# shellcheck shell=bash
# The Python guest toolchain: a venv under $CAPSTAN_CACHE with componentize-py and pytest from
# requirements.txt (versions and wheel hashes pinned). Source it and call ensure_python_toolchain;
# it exports CAPSTAN_PYTHON_VENV. Idempotent: the venv is keyed by requirements.txt's digest.

ensure_python_toolchain() {
  local here req key venv
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  req="$here/requirements.txt"
  key=$(sha256sum "$req" | cut -c1-12)
  venv="${CAPSTAN_CACHE:-$HOME/.cache/capstan}/python-guest-$key"
  # Created in place (a venv's scripts name its path), marked complete once installed.
  if [ ! -f "$venv/.complete" ]; then
    command -v python3 >/dev/null 2>&1 || { echo "==> installing python3 from Debian packages" >&2; apt-get update -qq && apt-get install -y -qq python3 python3-venv >/dev/null; }
    echo "==> the Python guest toolchain (componentize-py, pytest; PyPI, pinned) in $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && rm -rf "$venv" && python3 -m venv "$venv"; }
    "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes --only-binary=:all: -r "$req" >&2
    touch "$venv/.complete"
  fi
  export CAPSTAN_PYTHON_VENV="$venv"
}
