"""Every setting, declared once: its name (the environment variable; in lower case the context key), default,
meaning, what is allowed, and what changing it does to a deployed stack. The docs' settings and change tables
are rendered from here; settings/loader.py parses and checks the values (tests/test_settings.py fails for a
setting without a bad-value test).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from settings import versions
from settings.instance_types import BUILT_IN_GPU_TYPES
from settings.parsers import Choice, DnsLabel, Integer, Parser

# What a change does to a deployed stack.
IN_PLACE = "in place"
ROLLING = "rolling update"
REPLACEMENT = "replacement"
RECREATE = "RayCluster re-created"
REFUSED = "refused"
NEW = "new deployment"
_RECREATE_HOW = "`make diff` shows `RayClusterConfigFingerprint` changing; `make destroy STACKS=CLUSTER_NAME-serving && make deploy` (GPU nodes stay)"


@dataclass(frozen=True)
class SettingSpec:
    env: str
    default: str
    meaning: str
    allowed: str = ""  # what is allowed, beyond what the parser says (or all of it, without a parser)
    # (effect, what happens or how to apply it) on a deployed stack: the docs' change table (tests/test_day2.py
    # checks the effects on pairs of real synths; the preflight enforces the refusals). None: not a service setting.
    change: tuple[str, str] | None = None
    # The parser of a value that needs no other setting: it checks it and says what is allowed (the "Allowed"
    # column starts with its text), from the same numbers. None: settings/loader.py parses it with the others.
    parser: Parser | None = None

    @property
    def allowed_text(self) -> str:
        if self.parser is None:
            return self.allowed
        return f"{self.parser.allowed}; {self.allowed}" if self.allowed else self.parser.allowed

    def parse(self, raw: str) -> Any:
        if self.parser is None:
            raise TypeError(f"{self.env} is parsed with the settings it depends on, in settings/loader.py")
        return self.parser(self.env, raw)

    @property
    def context_key(self) -> str:
        return self.env.lower()


SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "CLUSTER_NAME",
        "ray-llm-multinode",
        "EKS cluster name; also the prefix of the stack names",
        "",
        parser=DnsLabel(40),
        change=(NEW, "new stack names: a second deployment beside the first. `make destroy` the old one (with the old name) first"),
    ),
    SettingSpec(
        "REGION",
        "sa-east-1",
        "AWS Region of every stack",
        "an AWS commercial Region, e.g. us-east-2",
        change=(NEW, "a second deployment in the other Region. `make destroy` the old one (with the old Region) first"),
    ),
    SettingSpec(
        "K8S_VERSION",
        "1.35",
        "Kubernetes version of the control plane and nodes",
        ", ".join(versions.SUPPORTED_KUBERNETES_VERSIONS),
        change=(
            ROLLING,
            "control plane in place, then the add-ons, then each nodegroup rolls. One minor version per deploy, alone: preflight refuses a skip, "
            "a downgrade, or a version change together with another nodegroup change. Run `make lookup` first (add-on versions)",
        ),
    ),
    SettingSpec(
        "NAMESPACE",
        "inference",
        "Namespace of the RayService",
        "",
        parser=DnsLabel(),
        change=(REPLACEMENT, "new Namespace and RayService applied, then the old ones deleted; the model restarts (up to 30 minutes)"),
    ),
    SettingSpec(
        "VPC_CIDR",
        "10.0.0.0/16",
        "IPv4 range of the VPC (3 private /19 and 3 public /24 subnets)",
        "a private IPv4 CIDR, /16 or /17",
        change=(REFUSED, "replaces the VPC under the cluster. Keep it, or `make destroy` and deploy again"),
    ),
    SettingSpec(
        "ENDPOINT_ACCESS",
        "public-and-private",
        "Where the Kubernetes API endpoint is reachable from",
        "",
        parser=Choice(("public-and-private", "private", "public")),
        change=(
            IN_PLACE,
            "EKS updates the endpoint; to or from `public` the kubectl provider's Lambdas move out of or into the VPC (with their own security group whenever they are in it)",
        ),
    ),
    SettingSpec(
        "PUBLIC_ACCESS_CIDRS",
        "",
        "Allow-list for the public API endpoint (empty = anywhere)",
        "comma-separated IPv4 CIDRs; needs ENDPOINT_ACCESS=public-and-private",
        change=(IN_PLACE, "EKS updates the allow-list"),
    ),
    SettingSpec(
        "ADMIN_PRINCIPAL_ARNS",
        "",
        "IAM roles/users given cluster-admin access entries (CI deploy role, people)",
        "comma-separated IAM role or user ARNs",
        change=(IN_PLACE, "access entries added or removed (each keyed by its ARN, so the others stay)"),
    ),
    SettingSpec(
        "SYSTEM_NODEGROUP_NAME",
        "system-nodes",
        "Name of the CPU system nodegroup",
        "",
        parser=DnsLabel(),
        change=(
            REPLACEMENT,
            "the new nodegroup starts beside the old one (its nodes count against the Standard quota meanwhile), then the old one goes",
        ),
    ),
    SettingSpec(
        "SYSTEM_NODE_TYPE",
        "m7i.xlarge",
        "Instance type of the system nodes (operator, Ray head, CoreDNS)",
        "an x86_64 EC2 type with at least 4 vCPU and 16 GiB",
        change=(ROLLING, "a new launch template version: nodes replaced one at a time (up to two extra per AZ first)"),
    ),
    SettingSpec("SYSTEM_NODE_COUNT", "1", "Number of system nodes", "", parser=Integer(1, 10), change=(IN_PLACE, "nodegroup scaling")),
    SettingSpec(
        "SYSTEM_ROOT_VOLUME_GIB",
        "100",
        "Encrypted gp3 root volume of each system node (the Ray head pulls the ~20 GB image)",
        "",
        parser=Integer(80, 1000),
        change=(ROLLING, "a new launch template version"),
    ),
    SettingSpec(
        "GPU_NODEGROUP_NAME",
        "gpu-workers",
        "Name of the EFA GPU nodegroup",
        "",
        parser=DnsLabel(),
        change=(REFUSED, "unless parked: `GPU_NODE_COUNT=0 make deploy`, then rename with GPU_NODE_COUNT=0, then unpark"),
    ),
    SettingSpec(
        "GPU_NODE_TYPE",
        "g6.8xlarge",
        "Instance type of the GPU nodes",
        "an x86_64 NVIDIA GPU type with EFA: " + ", ".join(BUILT_IN_GPU_TYPES) + ", or another after `make lookup`",
        change=(
            ROLLING,
            f"a new launch template version (GPU_UPDATE_STRATEGY), and the workers' resources change: {RECREATE}. {_RECREATE_HOW}. "
            "`make lookup` for the new type's AZs first",
        ),
    ),
    SettingSpec(
        "GPU_NODE_COUNT",
        "",
        "Number of GPU nodes; empty = what the replicas need (prefill nodes + decode nodes); 0 parks the GPUs and keeps everything else",
        "empty, 0, or the nodes the replicas need",
        change=(IN_PLACE, "nodegroup scaling; 0 parks the GPUs, empty (or the count the replicas need) unparks"),
    ),
    SettingSpec(
        "GPU_UPDATE_STRATEGY",
        "minimal",
        "How EKS replaces GPU nodes on a rolling update (new launch template, AMI or Kubernetes version)",
        "minimal (terminate, then launch: no extra GPU quota or placement-group room), default (launch 2 extra nodes first)",
        parser=Choice(("minimal", "default")),
        change=(IN_PLACE, "the nodegroup's update configuration"),
    ),
    SettingSpec(
        "GPU_ROOT_VOLUME_GIB",
        "200",
        "Encrypted gp3 root volume of each GPU node (image ~20 GB, weights ~18 GiB)",
        "",
        parser=Integer(100, 2000),
        change=(ROLLING, "a new launch template version (GPU_UPDATE_STRATEGY)"),
    ),
    SettingSpec(
        "GPU_AZ",
        "",
        "AZ of the GPU nodes (EFA cannot cross AZs); empty = the cached look-up, else REGION + 'a'",
        "an AZ of REGION that offers GPU_NODE_TYPE",
        change=(
            REFUSED,
            "the nodegroup's subnet is create-only and its name fixed. Park, deploy the new GPU_AZ with a new GPU_NODEGROUP_NAME and "
            "GPU_NODE_COUNT=0, then unpark (if the VPC's AZs change too, preflight refuses that as well: `make destroy` and deploy again)",
        ),
    ),
    SettingSpec(
        "GPU_PLACEMENT_GROUP",
        "on",
        "Cluster placement group of the GPU nodes: on = one the GPU stack creates (lowest latency between them, but all nodes "
        "must fit one spot: InsufficientInstanceCapacity is likelier), off = none, or the name of an existing cluster placement "
        "group (the one a capacity reservation was made in)",
        "on, off, or a placement group name; not on with GPU_CAPACITY_RESERVATION_ID",
        change=(
            ROLLING,
            "a new launch template version (GPU_UPDATE_STRATEGY); `on` to `off` deletes the stack's placement group once the nodes have left it",
        ),
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_ID",
        "",
        "EC2 capacity reservation the GPU nodes launch into (an On-Demand Capacity Reservation or a Capacity Block for ML); empty = none",
        "empty or a reservation ID cr-<17 hex>, in GPU_AZ, of GPU_NODE_TYPE, active, with free instances for the nodes (checked by the preflight)",
        change=(
            ROLLING,
            "a new launch template version: the nodes are replaced into the new reservation (or out of it). A Capacity Block nodegroup "
            "updates only at size 0: the preflight refuses the roll while nodes run in the block; park, deploy the change, unpark",
        ),
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_TYPE",
        "on-demand",
        "What GPU_CAPACITY_RESERVATION_ID is: on-demand (a Capacity Reservation) or capacity-block (a Capacity Block for ML: the nodegroup's capacity type CAPACITY_BLOCK)",
        "needs GPU_CAPACITY_RESERVATION_ID for capacity-block",
        parser=Choice(("on-demand", "capacity-block")),
        change=(
            REFUSED,
            "the nodegroup's capacity type is create-only and its name fixed: unless parked, `GPU_NODE_COUNT=0 make deploy`, then change it "
            "with a new GPU_NODEGROUP_NAME and GPU_NODE_COUNT=0, then unpark",
        ),
    ),
    SettingSpec(
        "DLC_IMAGE",
        versions.DLC_IMAGE_TEMPLATE,
        "Ray LLM container image of the head and workers (${REGION} is replaced)",
        "an image reference with a tag or digest",
        change=(RECREATE, _RECREATE_HOW),
    ),
    SettingSpec(
        "KUBERAY_VERSION",
        versions.KUBERAY_OPERATOR.version,
        "KubeRay operator chart version",
        f"{versions.KUBERAY_OPERATOR.version} (the version of the CRDs in schemas/kuberay/, which the RayService is validated against)",
        change=(
            IN_PLACE,
            "pinned to the CRDs in schemas/kuberay/; when a commit moves it, preflight refuses the deploy until `make kuberay-crds` "
            "has applied the new CRDs (Helm never upgrades them)",
        ),
    ),
    SettingSpec(
        "KUBERAY_NAMESPACE",
        "kuberay-operator",
        "Namespace of the KubeRay operator release",
        "",
        parser=DnsLabel(),
        change=(
            REFUSED,
            "the chart's cluster-scoped objects have fixed names, so two releases cannot coexist: `make destroy STACKS=CLUSTER_NAME-system` "
            "(takes the serving stack, and with OBSERVABILITY=on the observability stack, with it; the GPU nodes stay), then deploy",
        ),
    ),
    SettingSpec(
        "RAY_VERSION",
        versions.RAY_VERSION,
        "Ray version inside DLC_IMAGE",
        "X.Y.Z, at least 2.52 (token authentication; build_pd_openai_app since 2.49)",
        change=(RECREATE, _RECREATE_HOW),
    ),
    SettingSpec(
        "RAY_SERVICE_NAME",
        "ray-llm",
        "RayService name; the endpoint Service is NAME-serve-svc",
        "",
        parser=DnsLabel(53),
        change=(
            REPLACEMENT,
            "new RayService applied, then the old one deleted (it would otherwise keep the GPU nodes). With HF_TOKEN_SECRET_NAME set the "
            "token's SecretProviderClass keeps its name, so the preflight refuses it: `make destroy STACKS=CLUSTER_NAME-serving` first",
        ),
    ),
    SettingSpec(
        "MODEL_ID",
        "qwen3.5-9b",
        "Model name clients send in requests",
        "letters, digits, '.', '_', '-'",
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
    ),
    SettingSpec(
        "MODEL_SOURCE",
        "Qwen/Qwen3.5-9B",
        "Hugging Face repository of the weights",
        "ORG/NAME of an architecture vLLM 0.26 serves, fitting the GPUs (checked at synth when its facts are known: built in, or `make lookup`)",
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application (new weights are downloaded)"),
    ),
    SettingSpec(
        "PREFILL_REPLICAS",
        "1",
        "Prefill replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)",
        "",
        parser=Integer(1, 64),
        change=(IN_PLACE, "serveConfigV2, and KubeRay scales the prefill worker group (the GPU nodegroup follows when GPU_NODE_COUNT is empty)"),
    ),
    SettingSpec(
        "DECODE_REPLICAS",
        "1",
        "Decode replicas (one vLLM engine of TENSOR_PARALLEL_SIZE GPUs each)",
        "",
        parser=Integer(1, 64),
        change=(IN_PLACE, "serveConfigV2, and KubeRay scales the decode worker group (the GPU nodegroup follows when GPU_NODE_COUNT is empty)"),
    ),
    SettingSpec(
        "TENSOR_PARALLEL_SIZE",
        "1",
        "GPUs of one vLLM engine (tensor parallelism), inside one node; one value for both phases (NIXL cannot mix TP sizes for Qwen3.5's hybrid layers)",
        "1, 2, 4 or 8, at most the GPUs of GPU_NODE_TYPE",
        change=(IN_PLACE, "serveConfigV2 (the engines' bundles), and KubeRay scales the worker groups when the node counts change"),
    ),
    SettingSpec(
        "MAX_MODEL_LEN",
        "4096",
        "vLLM max_model_len: sized to the KV cache that fits on the GPU",
        "at most the model's native context, and one sequence of it must fit the GPU (checked at synth; docs/models.md)",
        parser=Integer(256, 1048576),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
    ),
    SettingSpec(
        "MODEL_IMAGES",
        "off",
        "off: a multimodal model (Qwen3.5) serves text only and vLLM loads no vision tower (language_model_only), which leaves more of an L4 to the KV cache; on: it keeps it",
        "",
        parser=Choice(("on", "off")),
        change=(IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
    ),
    SettingSpec(
        "SERVE_CLIENT_NAMESPACES",
        "",
        "Namespaces whose pods may call the OpenAI endpoint (port 8000; Ray's token does not cover it); empty = NAMESPACE only",
        "comma-separated namespace names",
        change=(IN_PLACE, "the NetworkPolicy of the Serve port"),
    ),
    SettingSpec(
        "METRICS_NAMESPACE",
        "monitoring",
        "Namespace of an in-cluster metrics collector (your Prometheus) allowed to scrape the Ray pods' port 8080; OBSERVABILITY's managed collector is let in by address",
        "",
        parser=DnsLabel(),
        change=(IN_PLACE, "the NetworkPolicy of the metrics port"),
    ),
    SettingSpec(
        "OBSERVABILITY",
        "off",
        "CloudWatch metrics (Container Insights with GPU and EFA; the Ray pods' Prometheus metrics through a managed collector, queried with PromQL), a dashboard and alarms; costs money while idle",
        "",
        parser=Choice(("on", "off")),
        change=(
            RECREATE,
            "`on` adds the CLUSTER_NAME-observability stack and lets the managed collector's subnets reach the Ray pods' metrics port (NetworkPolicy); "
            f"the Ray workers give up a core and a GiB to the add-on's pods (and take them back with `off`): {_RECREATE_HOW}. Back to `off`: first `OBSERVABILITY=on make destroy STACKS=CLUSTER_NAME-observability` (a stack left out of the app is neither deleted by a deploy nor found by `cdk destroy`)",
        ),
    ),
    SettingSpec(
        "HF_TOKEN_SECRET_NAME",
        "",
        "Secrets Manager secret holding a Hugging Face token (empty = none)",
        "a Secrets Manager secret name",
        change=(
            RECREATE,
            f"the CSI driver and Pod Identity are added in place; the workers' token volume is a RayCluster change: {_RECREATE_HOW}",
        ),
    ),
)

SPECS_BY_CONTEXT_KEY: Mapping[str, SettingSpec] = {spec.context_key: spec for spec in SPECS}
CHANGE_EFFECTS: Final[dict[str, tuple[str, str]]] = {spec.env: spec.change for spec in SPECS if spec.change}


def settings_table_markdown() -> str:
    """The docs' settings table (docs/settings.md), generated from SPECS so the two cannot drift apart."""
    rows = ["| Environment variable | Context key (`-c`) | Default | Meaning | Allowed |", "|---|---|---|---|---|"]
    for spec in SPECS:
        default = f"`{spec.default}`" if spec.default else "(empty)"
        rows.append(f"| `{spec.env}` | `{spec.context_key}` | {default} | {spec.meaning} | {spec.allowed_text} |")
    return "\n".join(rows)


def change_table_markdown() -> str:
    """The docs' "Changing a deployed stack" table (docs/day2.md)."""
    rows = ["| Setting | Effect on a deployed stack | What happens, or how to apply it |", "|---|---|---|"]
    rows += [f"| `{name}` | {effect} | {how} |" for name, (effect, how) in CHANGE_EFFECTS.items()]
    return "\n".join(rows)
