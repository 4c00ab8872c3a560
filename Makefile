# Everything the project needs is installed from here, into .venv, from scratch.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint format generate modes legacy kueue bench schemas clean package soak e2e

# The product with its test tools, and the simulator, its own distribution (simulator/), both
# editable from this checkout.
$(STAMP): pyproject.toml simulator/pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python 3.11 or newer is needed")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' -e ./simulator
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpustack-fn simulate examples/walkthrough/scenario.yaml

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/vulture  # unused names: paths and allow-list in pyproject.toml
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/ci.yml

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The suite on every core (pytest-xdist; its tests are independent), the slowest listed.
test: lint
	$(BIN)/python -m pytest -q -n auto --durations=15

# The real control plane (docs/e2e.md): upstream's components built from their Go modules into
# a cache outside the repository (e2e/build.sh; cold about 20-50 minutes on 2 cores, warm
# nothing), every example through the real `crossplane render`, then the scenarios of
# E2E_SCENARIOS on kube-apiserver, Kueue and Crossplane 2.x, and those of E2E_LEGACY with the
# legacy set (v1 XRDs, claims) on 2.x and on 1.x (through provider-kubernetes). Any table that
# differs from its expected file fails it.
# One scenario: E2E_SCENARIOS=examples/node-loss/scenario.yaml E2E_LEGACY= make e2e
E2E_SCENARIOS ?= examples/walkthrough/scenario.yaml examples/device-plugins/scenario-nvidia.yaml \
                 examples/device-plugins/scenario-hami.yaml examples/device-plugins/scenario-dra.yaml \
                 examples/node-loss/scenario.yaml examples/gpuclass/scenario.yaml
E2E_LEGACY    ?= examples/walkthrough/scenario.yaml
e2e: $(STAMP)
	bash e2e/build.sh
	$(BIN)/python -m e2e render
	for scenario in $(E2E_SCENARIOS); do \
	  $(BIN)/python -m e2e play $$scenario || exit 1; done
	for scenario in $(E2E_LEGACY); do \
	  $(BIN)/python -m e2e play $$scenario --legacy || exit 1; \
	  $(BIN)/python -m e2e play $$scenario --legacy --crossplane-1x || exit 1; done

# Every generated file, in order: the XRDs' per-mode parts from the table of modes, the Kueue
# configurations and the Catalog's devicePlugin enum from the dialects, then the legacy set.
generate: modes kueue legacy

modes: $(STAMP)
	$(BIN)/python tools/modes.py

legacy: $(STAMP)
	$(BIN)/python tools/legacy.py

kueue: $(STAMP)
	$(BIN)/python tools/kueue.py

schemas: $(STAMP)
	$(BIN)/python tools/schemas.py

# Every pool handler at 1,000, 5,000 and 20,000 nodes against its parse floor and a do-nothing
# SDK function (several minutes; bench/results.md). BENCH_NODES=1000 is the quick run; the
# figures also go to $(OUTPUT)/bench.json.
BENCH_NODES ?= 1000,5000,20000
bench: $(STAMP)
	BENCH_NODES=$(BENCH_NODES) BENCH_OUT=$(OUTPUT)/bench.json $(BIN)/python -m bench

# The long reliability runs (docs/reliability.md): thousands of fresh fuzz examples per handler,
# then every figure the doc's table reports, printed and kept in $(OUTPUT)/soak.json, ending
# with issue 35's eleven items, each beside its target.
# SOAK_SKIP=<handler> leaves one handler out of the fuzzing (while a finding in it is open).
SOAK_FUZZ ?= 2000
SOAK_SKIP ?=
soak: $(STAMP)
	GPUSTACK_FUZZ_EXAMPLES=$(SOAK_FUZZ) $(BIN)/python -m pytest -q -p no:cacheprovider -rx \
	  tests/test_fuzz.py tests/test_shutdown.py tests/test_node_loss.py tests/test_agent.py \
	  tests/test_workers.py tests/test_logs.py tests/test_checks.py tests/test_summary_checks.py \
	  $(if $(SOAK_SKIP),-k "not $(SOAK_SKIP)")
	$(BIN)/python -m tests.soak --fuzz $(SOAK_FUZZ) --out $(OUTPUT)/soak.json \
	  $(if $(SOAK_SKIP),--skip-handler $(SOAK_SKIP))

# The runtime image (linux/amd64 and linux/arm64) and the Crossplane package, one xpkg per
# architecture, embedding the runtime image from the local Docker cache (docs/packaging.md).
# The package contents are validated first, and the kubectl plugin's krew archive and manifest
# (pure Python, docs/kubectl.md) built, with or without docker and the crossplane CLI.
IMAGE     ?= ghcr.io/gpustack/function-gpustack
VERSION   ?= v$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
ARCHES    ?= amd64 arm64
OUTPUT    ?= _output
VALIDATE  ?= $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_package.py
KREW_MANIFEST ?= plugins/gpustack.yaml

package: $(STAMP)
	$(VALIDATE)
	$(BIN)/python -m functions.kubectl.krew --version $(VERSION) --output $(OUTPUT) --manifest $(KREW_MANIFEST)
	@missing=""; \
	command -v docker >/dev/null || missing="$$missing\n  docker: not on PATH"; \
	if command -v docker >/dev/null; then \
	  docker info >/dev/null 2>&1 || missing="$$missing\n  a docker engine: 'docker info' cannot reach one (is the daemon running?)"; \
	  docker buildx version >/dev/null 2>&1 || missing="$$missing\n  docker buildx: 'docker buildx version' failed"; \
	fi; \
	command -v crossplane >/dev/null || missing="$$missing\n  the crossplane CLI: not on PATH (docs/packaging.md says how to install it)"; \
	if [ -n "$$missing" ]; then \
	  printf "make package: the package contents are valid and the krew plugin is built, but the image and the xpkg were not; missing:$$missing\n" >&2; \
	  exit 2; \
	fi
	mkdir -p $(OUTPUT)
	for arch in $(ARCHES); do \
	  docker buildx build --platform linux/$$arch --load -t $(IMAGE)-runtime:$(VERSION)-$$arch . && \
	  crossplane xpkg build --package-root=package --examples-root=examples/install \
	    --embed-runtime-image=$(IMAGE)-runtime:$(VERSION)-$$arch \
	    --package-file=$(OUTPUT)/function-gpustack-$(VERSION)-$$arch.xpkg || exit 1; \
	done
	@echo "built: $$(ls $(OUTPUT)/*.xpkg | tr '\n' ' ')"
	@echo "push:  crossplane xpkg push --package-files=$$(ls $(OUTPUT)/function-gpustack-$(VERSION)-*.xpkg | paste -sd, -) $(IMAGE):$(VERSION)"

clean:
	rm -rf $(VENV) build *.egg-info simulator/build simulator/*.egg-info .pytest_cache .hypothesis $(OUTPUT)
