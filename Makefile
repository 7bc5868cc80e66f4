# Capstan. The two commands a new machine needs:
#   make demo   runs the demo on an embedded real control plane with the kwok provider
#   make test   installs what the tests need, then runs lint, unit and e2e (below)
# The pieces (each installs or builds what it needs first):
#   make demo-multi   the multi-provider demo: on-prem first, burst to a cloud at its spend limit, back
#   make fmt    format both cargo workspaces (host, providers-wasm) in place
#   make lint   format check and clippy: host; guests natively and for wasm32-wasip2
#   make unit   unit and property tests, no control plane (host lib, bins and docs; guests)
#   make e2e    integration and e2e tests on the real control plane (host/tests, tests/support/tests),
#               the image run with runc among them
#   make conformance-karpenter   Karpenter's own e2e suite (its regression suite at the pinned
#               version) against Capstan and, as the control, Karpenter's kwok controller on the same
#               harness: passed/failed/skipped per area side by side, JUnit (a fast subset runs in e2e)
#   make image  the host's OCI image, without Docker (image/build.sh; under ~/.cache/capstan/image)
#   make chart  the Helm chart packaged with that image's reference and digest (image/chart.sh)
#   make bench  the criterion benchmarks in host/benches (BENCH=scheduling for one, BENCH_ARGS=--test
#               to run each once)
#   make bench-disruption   20-node rollouts on the real control plane (budget 1 and 20%)
#   make bench-api-load     the host's API requests per minute at rest, 200 nodes and 2,000 pods
#   make bench-e2e          Capstan beside Karpenter's kwok controller: 1,000 pods, scaled to 500,
#                           deleted; nodes, $/h, CPU and memory side by side
#   make bench-dra          Capstan beside Karpenter v1.15 (IGNORE_DRA_REQUESTS=false): 20 pods asking
#                           for 1-8 GPUs and MIG-like partitions through DRA; time, nodes, $/h
#   make bench-scale        Capstan beside Karpenter at 2,000 nodes / 20,000 pods (SCALE=5000 for
#                           5,000 / 50,000): scale-up, rest, drift, scale to half, delete
#   make bench-capi         the clusterapi provider on real Cluster API: 10 launches, a delete, requests
#   make bench-multi        falling back from a full preferred pool, Capstan beside Karpenter's kwok
#                           controller, then the multi-provider e2e tests' figures
#   make control-plane | providers | upstream   build or fetch one prerequisite
.PHONY: help test demo demo-multi fmt lint unit e2e conformance-karpenter image chart bench bench-disruption bench-api-load bench-e2e bench-dra bench-scale bench-capi bench-multi control-plane providers upstream

help:
	@sed -n '1,26p' Makefile | sed 's/^# \{0,1\}//'

test:
	bash tests/scripts/test.sh

demo:
	bash tests/scripts/demo.sh

demo-multi:
	bash tests/scripts/demo-multi.sh

fmt lint unit e2e conformance-karpenter image chart bench bench-disruption bench-api-load bench-e2e bench-dra bench-scale bench-capi bench-multi control-plane providers upstream:
	bash tests/scripts/task.sh $@
