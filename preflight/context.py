"""What every preflight check works with: the input (the settings that matter and the synthesized
templates), the AWS clients of one run, their shared answers, and one error path.

boto3/botocore ship no type information and the repository pins no stubs: responses are Any here and
every value we keep is converted (int(), str(), float()) at the point it is read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from preflight.deployed import Deployed, read_deployed
from preflight.redeploy import Redeploy
from preflight.results import CheckResult, fail
from settings.ci_access import CDK_TOOLKIT_STACK
from settings.instance_types import on_demand_quota_of
from settings.versions import HelmChartPin

# A preflight should answer in seconds: fail fast on an unreachable endpoint instead of botocore's
# default 60 s connect timeout with legacy retries.
_CLIENT_CONFIG = Config(
    connect_timeout=5,
    read_timeout=20,
    retries={"max_attempts": 3, "mode": "standard"},
)

# Families whose first letter matches a quota class below but that have quotas of their own
# (Inf, Trn, DL, HPC, Mac): without this, inf2 would count as "i" and trn1 as "t".
OPTED_IN = ("opt-in-not-required", "opted-in")
_CREDENTIAL_ERROR_CODES = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "SignatureDoesNotMatch",
    }
)
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
TRANSIENT_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"})


# Where each input comes from (a field's metadata): SETTING, the Settings attribute at a dotted path, which
# tools/preflight.py reads; or DERIVED, what tools/preflight.py computes from the settings and the run (its
# derived_inputs() gives exactly these). tests/test_preflight_inputs.py checks the declarations both ways.
SETTING = "setting"
DERIVED = "derived"


def setting(path: str, default: Any = MISSING, **optional_input: Any) -> Any:
    """An input read from the Settings at `path` (dotted: "serve_endpoint.hostname")."""
    return _input({SETTING: path}, default, **optional_input)


def derived(how: str, default: Any = MISSING, **optional_input: Any) -> Any:
    """An input tools/preflight.py computes (`how` says from what)."""
    return _input({DERIVED: how}, default, **optional_input)


def _input(
    source: dict[str, str],
    default: Any,
    *,
    switched_on: Any = MISSING,
    on: Mapping[str, str] | None = None,
    factory: Callable[[], Any] | None = None,
) -> Any:
    """An optional input has `switched_on`: its default leaves its check(s) with nothing to do, `switched_on` is a
    value that makes them run. The recording test (tests/test_preflight_observability.py) runs every check with every
    optional input at its `switched_on`, so an AWS call of a new check that preflight/registry.py does not declare
    fails it. `on`: the settings (environment names) that switch it on in a real run ({}: the tests' pinned
    configuration already does); tests/test_preflight_inputs.py builds the input from them and fails when it stays
    at its default - an input the tool never feeds."""
    metadata: dict[str, Any] = dict(source)
    if switched_on is not MISSING:
        if on is None:
            raise TypeError(f"an optional preflight input ({source}) needs on=: the settings that switch it on")
        metadata |= {"switched_on": switched_on, "on": dict(on)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class PreflightInput:
    region: str = setting("region")
    gpu_az: str = setting("gpu_az")
    gpu_instance_type: str = setting("gpu_node.name")  # e.g. "g6.8xlarge"
    gpu_vcpus: int = setting("gpu_node.vcpus")  # vCPUs of one GPU node (32 for g6.8xlarge)
    # The most nodes this deploy may run (both phases at their maxima): the quota, the reservation and the placement
    # group must hold them all.
    gpu_node_count: int = setting("gpu_node_max")
    # "L-DB2E81BA" (Running On-Demand G and VT instances) or "L-417A185B" (P instances), and the quota's name
    gpu_quota_code: str = derived("the GPU type's On-Demand quota")
    gpu_quota_name: str = derived("the GPU type's On-Demand quota")
    system_instance_type: str = setting("system_node.name")
    system_vcpus: int = setting("system_node.vcpus")
    system_node_count: int = setting("system_node_count")
    cluster_name: str = setting("cluster_name")  # the nodes this cluster already runs count as held
    bootstrap_stack_name: str = derived("the CDK bootstrap stack the project deploys with", CDK_TOOLKIT_STACK)
    # Extra nodes a rolling update of each nodegroup launches before it drains the old ones.
    gpu_update_surge_nodes: int = setting(
        "gpu_update_surge_nodes", 0, switched_on=2, on={"GPU_UPDATE_STRATEGY": "default"}
    )
    system_update_surge_nodes: int = setting("system_update_surge_nodes", 0, switched_on=6, on={})
    # The Kubernetes API endpoint: "public-and-private" | "private" | "public", and its public allow-list.
    endpoint_access: str = setting("endpoint_access", "public-and-private")
    public_access_cidrs: tuple[str, ...] = setting(
        "public_access_cidrs", (), switched_on=("203.0.113.0/24",), on={"PUBLIC_ACCESS_CIDRS": "203.0.113.0/24"}
    )
    # A deploy over deployed stacks: the synthesized templates to compare with them (None: skip).
    redeploy: Redeploy | None = derived("the settings and the synthesized templates", None)  # noqa: RUF009 (a field())
    helm_charts: tuple[HelmChartPin, ...] = derived("the add-ons this configuration installs", ())
    # OBSERVABILITY=on: the managed Prometheus collector and CloudWatch's OpenTelemetry metrics store.
    observability: bool = setting("observability", False, switched_on=True, on={"OBSERVABILITY": "on"})
    # ours: held, not another collector
    metrics_collector_alias: str = setting("metrics_collector_alias", "", switched_on="ray-llm-multinode-ray", on={})
    # This cluster's optional stacks the configuration leaves out (OBSERVABILITY=off: the observability one).
    stacks_left_out: tuple[str, ...] = setting(
        "stacks_left_out", (), switched_on=("ray-llm-multinode-observability",), on={"OBSERVABILITY": "off"}
    )
    # Cluster-admin access entries to create, and the CDK bootstrap's CloudFormation execution role (the cluster
    # creator) as the assembly names it, ${AWS::AccountId} and ${AWS::Partition} still in it.
    admin_principal_arns: tuple[str, ...] = setting("admin_principal_arns", ())
    execution_role_arn: str = derived("the synthesized assembly's manifest", "")
    vpc_azs: tuple[str, ...] = setting("availability_zones", ())  # every AZ the network stack puts subnets in
    gpu_capacity_reservation_id: str = setting(
        "gpu_capacity_reservation_id",
        "",
        switched_on="cr-0123456789abcdef0",
        on={"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0", "GPU_PLACEMENT_GROUP": "off"},
    )
    gpu_capacity_reservation_type: str = setting("gpu_capacity_reservation_type", "on-demand")
    gpu_placement_group: str = setting("gpu_placement_group", "on")
    # PREFILL/DECODE_MAX_REPLICAS: the Cluster Autoscaler adds GPU nodes after the deploy
    autoscaling: bool = setting("autoscaling", False, switched_on=True, on={"DECODE_MAX_REPLICAS": "2"})
    # MODEL_SOURCE: checked on the Hub, or its S3 prefix
    model_source: str = setting("model_source", "", switched_on="s3://example-models/qwen3.5-9b", on={})
    # MODEL_SOURCE_KMS_KEY_ARN is set
    model_source_kms_key: bool = derived(
        "MODEL_SOURCE_KMS_KEY_ARN set or not",
        False,
        switched_on=True,
        on={
            "MODEL_SOURCE": "s3://example-models/qwen3.5-9b",
            "MODEL_SOURCE_KMS_KEY_ARN": "arn:aws:kms:sa-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        },
    )
    # MODEL_NEXT_SOURCE: the prefix the mirror fills next (in MODEL_SOURCE's bucket); its state is reported
    model_next_source: str = setting(
        "model_next_source",
        "",
        switched_on="s3://example-models/qwen3.5-9b-next",
        on={
            "MODEL_SOURCE": "s3://example-models/qwen3.5-9b",
            "MODEL_NEXT_SOURCE": "s3://example-models/qwen3.5-9b-next",
        },
    )
    # GCS_FAULT_TOLERANCE=redis: the store's node type; "" = no store
    gcs_store_node_type: str = derived(
        "GCS_STORE_NODE_TYPE when GCS_FAULT_TOLERANCE=redis, else none",
        "",
        switched_on="cache.t4g.micro",
        on={"GCS_FAULT_TOLERANCE": "redis"},
    )
    # HF_TOKEN_SECRET_NAME: read only for a gated model
    hf_token_secret_name: str = setting(
        "hf_token_secret_name", "", switched_on="prod/hf-token", on={"HF_TOKEN_SECRET_NAME": "prod/hf-token"}
    )
    dlc_image: str = setting("dlc_image", "")  # the reference the pods pull
    # SERVE_EXPOSURE beyond the cluster: the load balancer's certificate ("" or "none": none) and DNS name.
    serve_exposure: str = setting("serve_endpoint.exposure", "cluster")
    serve_certificate_arn: str = setting("serve_endpoint.certificate_arn", "")
    serve_hostname: str = setting(
        "serve_endpoint.hostname",
        "",
        switched_on="llm.example.com",
        on={
            "SERVE_EXPOSURE": "internet-facing",
            "SERVE_ALLOWED_CIDRS": "203.0.113.0/24",
            "SERVE_CERTIFICATE_ARN": (
                "arn:aws:acm:sa-east-1:123456789012:certificate/12345678-1234-1234-1234-123456789012"
            ),
            "SERVE_HOSTNAME": "llm.example.com",
            "SERVE_HOSTED_ZONE_ID": "Z0123456789ABCDEFGHIJ",
        },
    )
    serve_hosted_zone_id: str = setting("serve_endpoint.hosted_zone_id", "")
    # Where the tools run (RUNNER_ENVIRONMENT tells a GitHub-hosted runner): a private API must be reachable from it.
    environ: Mapping[str, str] = derived("the run's environment", factory=dict)


def quota_code_of(instance_type: str) -> str | None:
    """Service Quotas code of the On-Demand vCPU quota `instance_type` counts against, if one we check."""
    quota = on_demand_quota_of(instance_type)
    return quota[0] if quota else None


def error_result(name: str, err: Exception) -> CheckResult:
    """Turn a botocore error into a failed check with a fix matching its cause."""
    if isinstance(err, NoCredentialsError):
        return fail(
            name,
            "no AWS credentials found",
            "configure credentials (`aws configure`, `aws sso login` or AWS_PROFILE) and run the preflight again",
        )
    if isinstance(err, EndpointConnectionError):
        return fail(
            name,
            f"cannot reach AWS: {err}",
            "check the network connection and that REGION names an existing Region",
        )
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code", "Unknown"))
        message = str(err.response.get("Error", {}).get("Message", ""))
        operation = str(err.operation_name)
        detail = f"{operation} failed: {code}: {message}"
        if code in _CREDENTIAL_ERROR_CODES:
            return fail(
                name, detail, "refresh the AWS credentials (they are expired or invalid) and run the preflight again"
            )
        if code in ACCESS_DENIED_CODES:
            return fail(
                name, detail, f"allow {operation} for the deploying identity in IAM and run the preflight again"
            )
        if code == "InvalidInstanceType":
            return fail(name, detail, "set GPU_NODE_TYPE / SYSTEM_NODE_TYPE to an instance type that exists")
        return fail(name, detail, f"resolve the {code} error from {operation} and run the preflight again")
    return fail(
        name,
        f"AWS configuration error: {err}",
        "check the AWS profile, Region and network settings and run the preflight again",
    )


class Context:
    """Clients and answers shared by the checks of one run."""

    def __init__(self, inp: PreflightInput, session: Any) -> None:
        self.inp = inp
        self.session = session
        self.account = "ACCOUNT"
        self.region_usable = True  # False once the region check finds REGION disabled or unknown
        self._clients: dict[tuple[str, str], Any] = {}
        self._running: Counter[tuple[str, bool]] | None = None
        self._vcpus: dict[str, int] = {}
        self._deployed: Deployed | None = None

    def client(self, service: str, region: str | None = None) -> Any:
        key = (service, region or self.inp.region)
        if key not in self._clients:
            self._clients[key] = self.session.client(service, region_name=key[1], config=_CLIENT_CONFIG)
        return self._clients[key]

    def deployed(self) -> Deployed:
        """What is deployed under this cluster's name (read once per run)."""
        if self._deployed is None:
            stacks = self.inp.redeploy.templates if self.inp.redeploy else {}
            self._deployed = read_deployed(self.client, cluster_name=self.inp.cluster_name, stack_names=list(stacks))
        return self._deployed

    def nodes_in_reservation(self, reservation_id: str) -> int:
        """This cluster's pending/running instances that run in the capacity reservation."""
        pages = (
            self.client("ec2")
            .get_paginator("describe_instances")
            .paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
        )
        return sum(
            1
            for page in pages
            for reservation in page["Reservations"]
            for instance in reservation["Instances"]
            if instance.get("CapacityReservationId") == reservation_id
            and any(
                t["Key"] == "eks:cluster-name" and t["Value"] == self.inp.cluster_name for t in instance.get("Tags", [])
            )
        )

    def running_vcpus(self, quota_code: str) -> tuple[int, int]:
        """(this cluster's, everything else's) vCPUs of pending/running On-Demand instances in the region
        that count against `quota_code`. This cluster's nodes carry EKS's eks:cluster-name tag."""
        if self._running is None:
            ec2 = self.client("ec2")
            running: Counter[tuple[str, bool]] = Counter()
            pages = ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
            )
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        # Spot instances count against the Spot quotas, not the On-Demand ones.
                        if instance.get("InstanceLifecycle") == "spot":
                            continue
                        tags = {str(t["Key"]): str(t["Value"]) for t in instance.get("Tags", [])}
                        running[
                            (str(instance["InstanceType"]), tags.get("eks:cluster-name") == self.inp.cluster_name)
                        ] += 1
            types = sorted({t for t, _ in running})
            # DescribeInstanceTypes takes at most 100 names per call.
            for start in range(0, len(types), 100):
                for page in ec2.get_paginator("describe_instance_types").paginate(
                    InstanceTypes=types[start : start + 100]
                ):
                    for info in page["InstanceTypes"]:
                        self._vcpus[str(info["InstanceType"])] = int(info["VCpuInfo"]["DefaultVCpus"])
            self._running = running
        own = sum(
            self._vcpus[t] * n for (t, mine), n in self._running.items() if mine and quota_code_of(t) == quota_code
        )
        other = sum(
            self._vcpus[t] * n for (t, mine), n in self._running.items() if not mine and quota_code_of(t) == quota_code
        )
        return own, other


def home_region(region: str) -> str:
    # Caller identity and the Region list are account-wide: ask a Region that is always enabled, so a
    # disabled opt-in REGION shows up in the region check instead of looking like bad credentials.
    if region.startswith("cn-"):
        return "cn-north-1"
    if region.startswith("us-gov-"):
        return "us-gov-west-1"
    return "us-east-1"


CheckFunction = Callable[[Context], CheckResult]
