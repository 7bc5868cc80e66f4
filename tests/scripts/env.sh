#!/usr/bin/env bash
# Small entry points for pieces of the setup: `env.sh providers`, `env.sh control-plane`.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
case "${1:-}" in
  providers) build_providers ;;
  control-plane) build_control_plane ;;
  *) echo "usage: $0 providers|control-plane" >&2; exit 2 ;;
esac
