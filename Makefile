# First time: `make synth` (no AWS credentials), then `make deploy`; `make help` lists every target by group. Each
# installs what it needs. Contributors: `make test` (docs/contributing.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
# jsii warns on every run that Node 20 is past end of life; the warning is noise for this project.
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
ARGS ?=

.PHONY: plan manifests test-fast vendor-vllm endpoint api-key api-key-check local-check mirror-model vendor-kuberay docs docs-tables status verify verify-efa bench-serving help install install-dev synth test lint format diff deploy destroy park park-now unpark-now review stacks kubeconfig kuberay-crds wait-ready bench lookup preflight imports dist settings-table checkov ci-access ci-access-synth clean

# `make help` prints the targets by group: each target's `## [GROUP] description`, under the titles of the `##@ GROUP
# Title` lines below, in their order. A target with no group, or one not listed here, is printed last, under "Other".
##@ first-time First time: no AWS credentials needed
##@ deploy Deploy and verify: AWS credentials of the target account
##@ day-2 Day 2: a deployed cluster
##@ maintainers Maintainers and contributors: tests, linters, generated files, vendored data
help: ## [first-time] List the targets
	@awk -F':.*## ' ' \
	  /^##@ / { key = $$0; sub(/^##@ /, "", key); sub(/ .*/, "", key); title = $$0; sub(/^##@ [^ ]+ /, "", title); \
	            titles[key] = title; order[++groups] = key; next } \
	  /^[a-z-]+:.*## / { text = $$2; key = "other"; \
	            if (match(text, /^\[[a-z0-9-]+\] /)) { key = substr(text, 2, RLENGTH - 3); text = substr(text, RLENGTH + 1) } \
	            if (!(key in titles)) key = "other"; \
	            lines[key] = lines[key] sprintf("  make %-15s %s\n", $$1, text) } \
	  END { titles["other"] = "Other"; order[++groups] = "other"; \
	        for (i = 1; i <= groups; i++) if (order[i] in lines) printf "%s%s\n%s", (shown++ ? "\n" : ""), titles[order[i]], lines[order[i]] } \
	' $(MAKEFILE_LIST)

$(VENV)/.runtime: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt .nca-venv/.installed
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# np-guard's network-config-analyzer computes the NetworkPolicies' connectivity in the tests. An
# environment of its own: it pins PyYAML and networkx versions that conflict with cfn-lint's.
.nca-venv/.installed:
	$(PYTHON) -m venv .nca-venv
	.nca-venv/bin/pip install --quiet network-config-analyzer==2.1.0
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

install: $(VENV)/.runtime node_modules/.installed ## [first-time] Virtual environment (runtime) and the pinned CDK/cdk8s CLIs

install-dev: $(VENV)/.dev node_modules/.installed ## [maintainers] Everything install does, plus test and lint tools

synth: install ## [first-time] Synthesize every stack to cdk.out/ and the golden manifests to dist/ (no AWS credentials needed)
	$(CDK) synth --quiet $(ARGS)
	$(PY) -m tools.maintainer.write_dist
	@$(PY) -m tools.plan $(ARGS)

plan: install ## [first-time] What these settings deploy: nodes and GPUs per phase, the model, the endpoint, $/hour, the next command
	@$(PY) -m tools.plan $(ARGS)

manifests: install ## [first-time] The Kubernetes objects and Helm values of your settings -> manifests/ (dist/: the defaults')
	$(PY) -m tools.manifests

# Bytecode first: where PYTHONDONTWRITEBYTECODE is set, every process of the run would compile the modules again.
test: install-dev ## [maintainers] Run the test suite on every core (validators, cdk-nag, cfn-lint, parliament, schemas, moto, local Ray)
	$(PY) -m compileall -q -j 0 app.py ci_app.py imports settings k8s_constructs preflight stacks tools tests
	$(PY) -m pytest -q -n auto --dist loadfile $(ARGS)

test-fast: install-dev ## [maintainers] The tests that need neither a full synth nor a Ray cluster: the inner loop (CI runs make test)
	$(PY) -m pytest -q -n auto -m "not slow" $(ARGS)

lint: install-dev ## [maintainers] ruff and mypy (strict)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: install-dev ## [maintainers] Format the code with ruff
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

diff: install ## [day-2] cdk diff against what is deployed (ARGS="..." is passed to the CDK CLI; no stack names = every stack)
	$(CDK) diff $(ARGS)

review: install ## [day-2] Offline review of a change: BASE=<git ref> [REVIEW_FILE=review.md]; exit 1 on a protected replacement unless ALLOW_REPLACEMENT=1
	$(PY) -m tools.maintainer.review --base "$(BASE)" $(if $(REVIEW_FILE),--output "$(REVIEW_FILE)")

# The assembly that preflight checked is the one deployed: `cdk deploy --app cdk.out` does not synthesize again.
# --concurrency 2: the system and GPU stacks depend only on the cluster stack and deploy side by side.
deploy: preflight ## [deploy] synth, preflight, then cdk deploy --all of that assembly (in CI: ARGS="--require-approval never")
	date -u +%Y-%m-%dT%H:%M:%SZ > .deploy-started
	$(CDK) deploy --app cdk.out --all --concurrency 2 $(ARGS)
	date -u +%Y-%m-%dT%H:%M:%SZ > .deploy-finished

park: ## [day-2] Park the GPUs: the GPU_NODE_COUNT=0 deploy (unpark: make deploy)
	GPU_NODE_COUNT=0 $(MAKE) --no-print-directory deploy ARGS="$(ARGS)"

park-now: install ## [day-2] Park the GPUs now through the EKS API, as the scheduled park does (no deploy)
	$(PY) -m tools.park_schedule park

unpark-now: install ## [day-2] Unpark now to the GPU node count the last deploy approved (EKS API, no deploy)
	$(PY) -m tools.park_schedule unpark

# Everything: what Kubernetes created in AWS first, then the stacks in reverse order, then a leftovers check.
# STACKS=name destroys only those stacks (and the ones that depend on them), e.g. STACKS=ray-llm-multinode-serving.
STACKS ?=
destroy: install ## [deploy] cdk destroy: everything (ARGS="--force" in CI), or STACKS="..." only
ifeq ($(strip $(STACKS)),)
	$(PY) -m tools.teardown before
	$(CDK) destroy --all --concurrency 2 $(ARGS)
	$(PY) -m tools.teardown after
else
	$(CDK) destroy $(STACKS) $(ARGS)
endif

stacks: install ## [first-time] The stack names of this configuration, one per line
	@$(PY) -m tools.cluster stacks

kubeconfig: install ## [deploy] aws eks update-kubeconfig for the configured cluster
	$(PY) -m tools.cluster kubeconfig

kuberay-crds: install ## [day-2] Apply the repository's KubeRay CRDs server-side (before a KubeRay upgrade: Helm never updates them)
	$(PY) -m tools.cluster kuberay-crds

wait-ready: install ## [deploy] Wait for the RayService to be Ready (WAIT_TIMEOUT=45m)
	$(PY) -m tools.cluster wait-ready

# The one-host GPU check (docs/local-check.md): the plan needs the project (CDK side), the run needs the image's stack
# (requirements-gpu.txt, or the Ray LLM image) and a GPU. LOCAL_CHECK_PYTHON is the interpreter that has that stack.
LOCAL_CHECK_PYTHON ?= python3
local-check: install ## [first-time] Run the synthesized serve config on this GPU host (Ray cluster shaped like the RayCluster): routes, greedy parity, NIXL, benchmark, memory vs the fit check -> local-check/ (ARGS="--model-dir DIR ...")
	$(PY) -m tools.local_check plan --output local-check/plan.json
	$(LOCAL_CHECK_PYTHON) -m tools.local_check run --plan local-check/plan.json --output-dir local-check $(ARGS)

mirror-model: install ## [day-2] Copy a Hub model to MODEL_SOURCE's S3 prefix with a Job on a system node, verified file by file: HF_MODEL=ORG/NAME [HF_REVISION=main]
	$(PY) -m tools.mirror_model

bench-serving: install ## [day-2] In-cluster benchmark Job (mixed long/short prompts at a few rates) -> bench-serving.json; COMPARE=old.json for deltas
	$(PY) -m tools.bench_serving

endpoint: install ## [deploy] The Serve endpoint's URL and an OpenAI SDK example (SERVE_EXPOSURE internal or internet-facing; else the port-forward)
	$(PY) -m tools.endpoint url

api-key: install ## [deploy] How to fetch an API key of the endpoint (SERVE_API_KEYS=on): the command, never the key itself
	$(PY) -m tools.endpoint api-key

api-key-check: install ## [day-2] Check a new key set before put-secret-value (KEYS=FILE): JSON name -> key, each long enough for the ingress
	$(PY) -m tools.endpoint check-keys $(KEYS)

verify: install ## [deploy] The post-deploy gate: RayService ready, GPU/EFA on every GPU node, NIXL on LIBFABRIC, one completion; phase times (VERIFY_TIMEOUT=45m)
	$(PY) -m tools.verify

# The CI access stack (ci_app.py): an app of its own, with its own cloud assembly directory. Deployed with
# your own (administrator) credentials, never by CI: it holds the roles CI assumes.
CI_ACCESS := --app '$(PY) ci_app.py' --output cdk.out.ci-access

ci-access-synth: install ## [deploy] Synthesize the CI access stack to cdk.out.ci-access/ (GITHUB_REPOSITORY=org/repo; no credentials)
	$(CDK) synth --quiet $(CI_ACCESS) $(ARGS)

ci-access: install ## [deploy] Deploy the GitHub OIDC provider and the CI diff/deploy roles (GITHUB_REPOSITORY=org/repo; admin credentials)
	$(CDK) deploy $(CI_ACCESS) $(ARGS)

bench: install ## [maintainers] Median cdk synth time against a one-bucket CDK app
	$(PY) -m tools.maintainer.synth_bench

lookup: install ## [deploy] Look up AZs and instance facts with AWS credentials; cache them in cdk.context.json
	$(PY) -m tools.lookup

preflight: synth ## [deploy] Check the account and what is deployed against the synthesized assembly (quotas, versions, changes that cannot apply, charts)
	$(PY) -m tools.preflight

vendor-kuberay: install ## [maintainers] Move to another KubeRay release: VERSION=X.Y.Z fetches its CRDs, moves the pin, regenerates imports/ and dist/
	$(PY) -m tools.maintainer.vendor_kuberay --version "$(VERSION)"

vendor-vllm: install ## [maintainers] Regenerate settings/data/ from the image's vLLM wheel: EngineArgs' fields (engine_kwargs are checked against them) and the served architectures
	$(PY) -m tools.maintainer.vendor_vllm $(if $(WHEEL),--wheel "$(WHEEL)")

imports: install ## [maintainers] Regenerate imports/ from the KubeRay CRD (cdk8s import)
	$(PY) -m tools.maintainer.import_crd

dist: install ## [maintainers] Rewrite dist/ only
	$(PY) -m tools.maintainer.write_dist

docs-tables: install ## [maintainers] Rewrite the generated parts of docs/ from the code (settings, change and preflight tables, the defaults' quota)
	$(PY) -m tools.maintainer.docs_tables

settings-table: docs-tables ## [maintainers] Alias of docs-tables

$(VENV)/.docs: $(VENV)/.runtime requirements-docs.txt
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $@

docs: export NO_MKDOCS_2_WARNING := 1
docs: $(VENV)/.docs ## [maintainers] Build the documentation site strictly (mkdocs-material): a stale generated table or a broken link fails
	$(PY) -m tools.maintainer.docs_tables --check
	$(PY) -m mkdocs build --strict --quiet

.checkov-venv/.installed:
	$(PYTHON) -m venv .checkov-venv
	.checkov-venv/bin/pip install --quiet checkov==3.3.30
	touch $@

# The Kubernetes objects: dist/, the manifests of the default, OBSERVABILITY=on and HF_TOKEN_SECRET_NAME
# assemblies, the benchmark Job and the Pods KubeRay makes from the RayService; each finding is fixed or
# accepted with its reason in accepted-findings.yaml (a new one, or a stale acceptance, fails).
checkov: synth .checkov-venv/.installed ## [maintainers] checkov: every CloudFormation check (default, OBSERVABILITY=on and exposed-endpoint stacks; skips at the resources, with reasons) and every Kubernetes check (accepted-findings.yaml)
	.checkov-venv/bin/checkov --skip-download --quiet --compact --framework cloudformation -d cdk.out
	OBSERVABILITY=on $(CDK) synth --quiet -o cdk.out.observability
	.checkov-venv/bin/checkov --skip-download --quiet --compact --framework cloudformation -f cdk.out.observability/*-observability.template.json
	SERVE_EXPOSURE=internal SERVE_CERTIFICATE_ARN=$$($(PY) -m tools.maintainer.k8s_objects --example-certificate-arn) \
	  SERVE_HOSTNAME=llm.example.com SERVE_HOSTED_ZONE_ID=Z0123456789ABCDEFGHIJ SERVE_ACCESS_LOGS=on $(CDK) synth --quiet -o cdk.out.endpoint
	.checkov-venv/bin/checkov --skip-download --quiet --compact --framework cloudformation -f cdk.out.endpoint/*-system.template.json -f cdk.out.endpoint/*-serving.template.json
	HF_TOKEN_SECRET_NAME=checkov/hf-token $(CDK) synth --quiet -o cdk.out.hf-token
	$(PY) -m tools.maintainer.k8s_objects cdk.out.k8s cdk.out cdk.out.observability cdk.out.hf-token
	.checkov-venv/bin/checkov --skip-download --quiet --compact --framework kubernetes -d cdk.out.k8s -o json > cdk.out.checkov-kubernetes.json || true
	$(PY) -m tools.maintainer.accepted_findings checkov-kubernetes cdk.out.checkov-kubernetes.json --objects cdk.out.k8s

# After a deploy (kubectl configured with `make kubeconfig`); names follow the settings.
status: install ## [day-2] RayService, pods and their nodes, GPU/EFA capacity of the GPU nodes
	$(PY) -m tools.cluster status

verify-efa: install ## [day-2] Which NIXL backend each GPU worker started (must be LIBFABRIC, not UCX); exit 1 otherwise
	$(PY) -m tools.cluster verify-efa

clean: ## [maintainers] Remove build output (keeps the virtual environments)
	rm -rf site cdk.out cdk.out.observability cdk.out.hf-token cdk.out.endpoint cdk.out.k8s cdk.out.checkov-kubernetes.json .pytest_cache .mypy_cache .ruff_cache
