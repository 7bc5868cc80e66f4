# Capstan: the two commands a new machine needs.
#   make demo   runs the demo on an embedded real control plane with the kwok provider
#   make test   installs what the tests need, then runs format, lint, unit, integration and e2e tests
.PHONY: test demo control-plane providers bench

test:
	bash tests/scripts/test.sh

demo:
	bash tests/scripts/demo.sh

control-plane:
	bash tests/control-plane/cp build

providers:
	bash tests/scripts/env.sh providers

bench:
	bash tests/scripts/bench.sh
