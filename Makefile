# Two commands on a fresh machine: `make synth`, then `make test`. Each installs what it needs.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
# jsii warns on every run that Node 20 is past end of life; the warning is noise for this project.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
ARGS ?=

.PHONY: status verify-efa help install install-dev synth test lint format diff deploy destroy bench lookup preflight imports dist settings-table checkov clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

$(VENV)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

install: $(VENV)/.runtime node_modules/.installed ## Virtual environment (runtime) and the pinned CDK/cdk8s CLIs

install-dev: $(VENV)/.dev node_modules/.installed ## Everything install does, plus test and lint tools

synth: install ## Synthesize every stack to cdk.out/ and the golden manifests to dist/ (no AWS credentials needed)
	$(CDK) synth --quiet $(ARGS)
	$(PY) -m tools.write_dist

test: install-dev ## Run the test suite (validators, cdk-nag, cfn-lint, schemas, moto)
	$(PY) -m pytest -q $(ARGS)

lint: install-dev ## ruff and mypy (strict)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: install-dev ## Format the code with ruff
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

diff: install ## cdk diff (ARGS="..." is passed to the CDK CLI)
	$(CDK) diff $(ARGS)

deploy: install preflight ## Preflight, then cdk deploy --all (in CI: ARGS="--require-approval never")
	$(CDK) deploy --all $(ARGS)

destroy: install ## cdk destroy (reverse order: serving, GPU, cluster, network); ARGS="..." to pick stacks
	$(CDK) destroy $(if $(ARGS),$(ARGS),--all)

bench: install ## Median cdk synth time against a one-bucket CDK app
	$(PY) -m tools.bench

lookup: install ## Look up AZs and instance facts with AWS credentials; cache them in cdk.context.json
	$(PY) -m tools.lookup

preflight: install ## Check the AWS account before a deploy (quotas, AZ offering, EFA, bootstrap)
	$(PY) -m tools.preflight

imports: install ## Regenerate imports/ from the KubeRay CRD (cdk8s import)
	$(PY) -m tools.import_crd

dist: install ## Rewrite dist/ only
	$(PY) -m tools.write_dist

settings-table: install ## Rewrite the README's settings table from the code
	$(PY) -m tools.settings_table

.checkov-venv/.installed:
	$(PYTHON) -m venv .checkov-venv
	.checkov-venv/bin/pip install --quiet checkov==3.3.30
	touch $@

checkov: synth .checkov-venv/.installed ## checkov in its own environment (it pins old boto3 and breaks pytest's)
	.checkov-venv/bin/checkov --skip-download --quiet --compact --framework cloudformation -d cdk.out --check CKV_AWS_58,CKV_AWS_37,CKV_AWS_79

# After a deploy (kubectl configured with `aws eks update-kubeconfig`); names follow the settings.
NAMESPACE ?= inference
RAY_SERVICE_NAME ?= ray-llm

status: ## RayService, pods and their nodes, GPU/EFA capacity of the GPU nodes
	kubectl get rayservice -n $(NAMESPACE) $(RAY_SERVICE_NAME)
	kubectl get pods -n $(NAMESPACE) -o wide
	kubectl get nodes -l role=gpu-worker -o custom-columns='NAME:.metadata.name,GPU:.status.allocatable.nvidia\.com/gpu,EFA:.status.allocatable.vpc\.amazonaws\.com/efa'

verify-efa: ## Which NIXL backend each GPU worker started (must be LIBFABRIC, not UCX)
	@for pod in $$(kubectl get pods -n $(NAMESPACE) -l ray.io/node-type=worker -o jsonpath='{.items[*].metadata.name}'); do \
	  kubectl exec -n $(NAMESPACE) "$$pod" -c ray-worker -- grep -rhoE "Backend (LIBFABRIC|UCX) was instantiated" /tmp/ray/session_latest/logs/ 2>/dev/null; \
	done | sort | uniq -c

clean: ## Remove build output (keeps the virtual environments)
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
