"""What every preflight check works with: the input (the settings that matter and the synthesized
templates), the AWS clients of one run, their shared answers, and one error path.

boto3/botocore ship no type information and the repository pins no stubs: responses are Any here and
every value we keep is converted (int(), str(), float()) at the point it is read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from preflight.deployed import Deployed, read_deployed
from preflight.redeploy import Redeploy
from preflight.results import CheckResult, fail
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


def optional(default: Any, *, switched_on: Any) -> Any:
    """An optional input: its default leaves its check(s) with nothing to do, `switched_on` is a value that makes them
    run. The recording test (tests/test_preflight_observability.py) runs every check with every optional input at
    its `switched_on`, so an AWS call of a new check that preflight/registry.py does not declare fails it."""
    return field(default=default, metadata={"switched_on": switched_on})


@dataclass(frozen=True)
class PreflightInput:
    region: str
    gpu_az: str
    gpu_instance_type: str  # e.g. "g6.8xlarge"
    gpu_vcpus: int  # vCPUs of one GPU node (32 for g6.8xlarge)
    gpu_node_count: int
    gpu_quota_code: str  # "L-DB2E81BA" (Running On-Demand G and VT instances) or "L-417A185B" (P instances)
    gpu_quota_name: str  # human name of that quota
    system_instance_type: str
    system_vcpus: int
    system_node_count: int
    cluster_name: str  # the nodes this cluster already runs count as held, not as other workloads
    bootstrap_stack_name: str = "CDKToolkit"
    # Extra nodes a rolling update of each nodegroup launches before it drains the old ones.
    gpu_update_surge_nodes: int = optional(0, switched_on=2)
    system_update_surge_nodes: int = optional(0, switched_on=6)
    # The Kubernetes API endpoint: "public-and-private" | "private" | "public", and its public allow-list.
    endpoint_access: str = "public-and-private"
    public_access_cidrs: tuple[str, ...] = optional((), switched_on=("203.0.113.0/24",))
    # A deploy over deployed stacks: the synthesized templates to compare with them (None: skip).
    redeploy: Redeploy | None = None
    helm_charts: tuple[HelmChartPin, ...] = ()
    # OBSERVABILITY=on: the managed Prometheus collector and CloudWatch's OpenTelemetry metrics store.
    observability: bool = optional(False, switched_on=True)
    metrics_collector_alias: str = optional(
        "", switched_on="ray-llm-multinode-ray"
    )  # ours: held, not another collector
    # This cluster's optional stacks the configuration leaves out (OBSERVABILITY=off: the observability one).
    stacks_left_out: tuple[str, ...] = optional((), switched_on=("ray-llm-multinode-observability",))
    # Cluster-admin access entries to create, and the CDK bootstrap's CloudFormation execution role (the cluster
    # creator) as the assembly names it, ${AWS::AccountId} and ${AWS::Partition} still in it.
    admin_principal_arns: tuple[str, ...] = ()
    execution_role_arn: str = ""
    vpc_azs: tuple[str, ...] = ()  # every AZ the network stack puts subnets in
    gpu_capacity_reservation_id: str = optional("", switched_on="cr-0123456789abcdef0")
    gpu_capacity_reservation_type: str = "on-demand"
    gpu_placement_group: str = "on"
    autoscaling: bool = optional(
        False, switched_on=True
    )  # PREFILL/DECODE_MAX_REPLICAS: the Cluster Autoscaler adds GPU nodes after the deploy
    model_source: str = optional(
        "", switched_on="s3://example-models/qwen3.5-9b"
    )  # MODEL_SOURCE: checked on the Hub, or its S3 prefix
    model_source_kms_key: bool = optional(False, switched_on=True)  # MODEL_SOURCE_KMS_KEY_ARN is set
    # MODEL_NEXT_SOURCE: the prefix the mirror fills next (in MODEL_SOURCE's bucket); its state is reported
    model_next_source: str = optional("", switched_on="s3://example-models/qwen3.5-9b-next")
    gcs_store_node_type: str = optional(
        "", switched_on="cache.t4g.micro"
    )  # GCS_FAULT_TOLERANCE=redis: the store's node type; "" = no store
    hf_token_secret_name: str = optional(
        "", switched_on="prod/hf-token"
    )  # HF_TOKEN_SECRET_NAME: read only for a gated model
    dlc_image: str = ""  # the reference the pods pull
    # SERVE_EXPOSURE beyond the cluster: the load balancer's certificate ("" or "none": none) and DNS name.
    serve_exposure: str = "cluster"
    serve_certificate_arn: str = ""
    serve_hostname: str = optional("", switched_on="llm.example.com")
    serve_hosted_zone_id: str = ""
    # Where the tools run (RUNNER_ENVIRONMENT tells a GitHub-hosted runner): a private API must be reachable from it.
    environ: Mapping[str, str] = field(default_factory=dict)


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
