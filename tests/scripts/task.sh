#!/usr/bin/env bash
# One piece of the build or of `make test`, with the setup it needs (each is a make target):
#   task.sh fmt | lint | unit | e2e | conformance-karpenter | bench | bench-disruption | bench-api-load | bench-e2e | bench-dra | bench-capi | image | chart | providers | control-plane | upstream
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
case "${1:-}" in
  fmt) ensure_rust; task_fmt ;;
  lint) ensure_rust; task_lint ;;
  unit) ensure_rust; ensure_python_toolchain; task_unit ;;
  e2e) ensure_rust; build_control_plane; build_providers; fetch_upstream; build_supply_chain_tools; build_image; package_chart; ensure_cs_client; task_e2e ;;
  conformance-karpenter) ensure_rust; build_control_plane; build_providers; fetch_upstream; task_conformance_karpenter ;;
  bench) ensure_rust; build_control_plane; build_providers; task_bench ;;
  bench-disruption) ensure_rust; build_control_plane; build_providers; fetch_upstream; task_bench_disruption ;;
  bench-api-load) ensure_rust; build_control_plane; build_providers; fetch_upstream; task_bench_api_load ;;
  bench-e2e) ensure_rust; build_control_plane; build_providers; task_bench_e2e ;;
  bench-dra) ensure_rust; build_control_plane; build_providers; task_bench_dra ;;
  bench-scale) ensure_rust; build_control_plane; build_providers; task_bench_scale ;;
  bench-capi) ensure_rust; build_control_plane; build_providers; task_bench_capi ;;
  bench-multi) ensure_rust; build_control_plane; build_providers; task_bench_multi ;;
  image) build_image ;;
  chart) build_image; build_control_plane; package_chart ;;
  providers) build_providers ;;
  control-plane) build_control_plane ;;
  upstream) fetch_upstream ;;
  *) echo "usage: $0 fmt|lint|unit|e2e|conformance-karpenter|bench|bench-disruption|bench-api-load|bench-e2e|bench-dra|bench-scale|bench-capi|bench-multi|image|chart|providers|control-plane|upstream" >&2; exit 2 ;;
esac
