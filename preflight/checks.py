"""Pre-deploy checks: find the account problems that would otherwise fail a deploy an hour in.

Every check turns its AWS error into a failed CheckResult with a one-sentence fix, so the user sees a
table and never a traceback. Only read-only AWS calls are made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# boto3/botocore ship no type information and the repository pins no stubs: responses are Any here and
# every value we keep is converted (int(), str(), float()) at the point it is read.
import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from preflight import redeploy as day2
from preflight.capacity import check_capacity_reservation, check_vpc_azs
from preflight.charts import check_helm_charts
from preflight.deployed import Deployed, existing_stacks, read_deployed
from preflight.principals import check_admin_principals
from preflight.reachability import check_api_endpoint
from preflight.redeploy import Redeploy
from preflight.results import CheckResult, warn
from preflight.results import fail as _fail
from preflight.results import ok as _pass
from settings.instance_types import G_QUOTA, P_QUOTA, STANDARD_QUOTA, on_demand_quota_of
from settings.versions import HelmChartPin

G_QUOTA_CODE, G_QUOTA_NAME = G_QUOTA
P_QUOTA_CODE, P_QUOTA_NAME = P_QUOTA
STANDARD_QUOTA_CODE, STANDARD_QUOTA_NAME = STANDARD_QUOTA

# A preflight should answer in seconds: fail fast on an unreachable endpoint instead of botocore's
# default 60 s connect timeout with legacy retries.
_CLIENT_CONFIG = Config(
    connect_timeout=5,
    read_timeout=20,
    retries={"max_attempts": 3, "mode": "standard"},
)

# Families whose first letter matches a quota class below but that have quotas of their own
# (Inf, Trn, DL, HPC, Mac): without this, inf2 would count as "i" and trn1 as "t".
_OPTED_IN = ("opt-in-not-required", "opted-in")
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
_ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
_TRANSIENT_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"})


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
    gpu_update_surge_nodes: int = 0
    system_update_surge_nodes: int = 0
    # The Kubernetes API endpoint: "public-and-private" | "private" | "public", and its public allow-list.
    endpoint_access: str = "public-and-private"
    public_access_cidrs: tuple[str, ...] = ()
    # A deploy over deployed stacks: the synthesized templates to compare with them (None: skip).
    redeploy: Redeploy | None = None
    helm_charts: tuple[HelmChartPin, ...] = ()
    # OBSERVABILITY=on: the managed Prometheus collector and CloudWatch's OpenTelemetry metrics store.
    observability: bool = False
    metrics_collector_alias: str = ""  # ours: held, not another collector
    # This cluster's optional stacks the configuration leaves out (OBSERVABILITY=off: the observability one).
    stacks_left_out: tuple[str, ...] = ()
    # Cluster-admin access entries to create, and the CDK bootstrap's CloudFormation execution role (the cluster
    # creator) as the assembly names it, ${AWS::AccountId} and ${AWS::Partition} still in it.
    admin_principal_arns: tuple[str, ...] = ()
    execution_role_arn: str = ""
    vpc_azs: tuple[str, ...] = ()  # every AZ the network stack puts subnets in
    gpu_capacity_reservation_id: str = ""
    gpu_capacity_reservation_type: str = "on-demand"
    gpu_placement_group: str = "on"
    # Where the tools run (RUNNER_ENVIRONMENT tells a GitHub-hosted runner): a private API must be reachable from it.
    environ: Mapping[str, str] = field(default_factory=dict)


def quota_code_of(instance_type: str) -> str | None:
    """Service Quotas code of the On-Demand vCPU quota `instance_type` counts against, if one we check."""
    quota = on_demand_quota_of(instance_type)
    return quota[0] if quota else None


def stack_status_usable(status: str) -> bool:
    """Whether a bootstrap stack in `status` can be deployed against."""
    return not (
        status.endswith("_FAILED")
        or status == "ROLLBACK_COMPLETE"
        or status.startswith("DELETE_")
        # A change set created but never executed: the stack exists with no resources.
        or status == "REVIEW_IN_PROGRESS"
    )


def _error_result(name: str, err: Exception) -> CheckResult:
    """Turn a botocore error into a failed check with a fix matching its cause."""
    if isinstance(err, NoCredentialsError):
        return _fail(
            name,
            "no AWS credentials found",
            "configure credentials (`aws configure`, `aws sso login` or AWS_PROFILE) and run the preflight again",
        )
    if isinstance(err, EndpointConnectionError):
        return _fail(
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
            return _fail(name, detail, "refresh the AWS credentials (they are expired or invalid) and run the preflight again")
        if code in _ACCESS_DENIED_CODES:
            return _fail(name, detail, f"allow {operation} for the deploying identity in IAM and run the preflight again")
        if code == "InvalidInstanceType":
            return _fail(name, detail, "set GPU_NODE_TYPE / SYSTEM_NODE_TYPE to an instance type that exists")
        return _fail(name, detail, f"resolve the {code} error from {operation} and run the preflight again")
    return _fail(name, f"AWS configuration error: {err}", "check the AWS profile, Region and network settings and run the preflight again")


class _Context:
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
        pages = self.client("ec2").get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
        return sum(
            1
            for page in pages
            for reservation in page["Reservations"]
            for instance in reservation["Instances"]
            if instance.get("CapacityReservationId") == reservation_id
            and any(t["Key"] == "eks:cluster-name" and t["Value"] == self.inp.cluster_name for t in instance.get("Tags", []))
        )

    def running_vcpus(self, quota_code: str) -> tuple[int, int]:
        """(this cluster's, everything else's) vCPUs of pending/running On-Demand instances in the region
        that count against `quota_code`. This cluster's nodes carry EKS's eks:cluster-name tag."""
        if self._running is None:
            ec2 = self.client("ec2")
            running: Counter[tuple[str, bool]] = Counter()
            pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
            for page in pages:
                for reservation in page["Reservations"]:
                    for instance in reservation["Instances"]:
                        # Spot instances count against the Spot quotas, not the On-Demand ones.
                        if instance.get("InstanceLifecycle") == "spot":
                            continue
                        tags = {str(t["Key"]): str(t["Value"]) for t in instance.get("Tags", [])}
                        running[(str(instance["InstanceType"]), tags.get("eks:cluster-name") == self.inp.cluster_name)] += 1
            types = sorted({t for t, _ in running})
            # DescribeInstanceTypes takes at most 100 names per call.
            for start in range(0, len(types), 100):
                for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=types[start : start + 100]):
                    for info in page["InstanceTypes"]:
                        self._vcpus[str(info["InstanceType"])] = int(info["VCpuInfo"]["DefaultVCpus"])
            self._running = running
        own = sum(self._vcpus[t] * n for (t, mine), n in self._running.items() if mine and quota_code_of(t) == quota_code)
        other = sum(self._vcpus[t] * n for (t, mine), n in self._running.items() if not mine and quota_code_of(t) == quota_code)
        return own, other


def _home_region(region: str) -> str:
    # Caller identity and the Region list are account-wide: ask a Region that is always enabled, so a
    # disabled opt-in REGION shows up in the region check instead of looking like bad credentials.
    if region.startswith("cn-"):
        return "cn-north-1"
    if region.startswith("us-gov-"):
        return "us-gov-west-1"
    return "us-east-1"


def _check_credentials(ctx: _Context) -> CheckResult:
    sts = ctx.client("sts", _home_region(ctx.inp.region))
    identity = sts.get_caller_identity()
    ctx.account = str(identity["Account"])
    return _pass("credentials", f"account {ctx.account} as {identity['Arn']}")


def _check_region(ctx: _Context) -> CheckResult:
    region = ctx.inp.region
    ec2 = ctx.client("ec2", _home_region(region))
    regions = ec2.describe_regions(AllRegions=True)["Regions"]
    status = next((str(r.get("OptInStatus", "")) for r in regions if r["RegionName"] == region), None)
    if status is None:
        ctx.region_usable = False
        return _fail(
            "region",
            f"{region} is not a Region of this AWS partition",
            "set REGION to an existing AWS Region such as us-east-2",
        )
    if status in _OPTED_IN:
        return _pass("region", f"{region} enabled ({status})")
    ctx.region_usable = False
    return _fail(
        "region",
        f"{region} is {status} for account {ctx.account}",
        f"enable {region} for account {ctx.account} in the AWS console (Account > AWS Regions) and wait until it shows Enabled",
    )


def _offered_azs(ctx: _Context, extra_filters: list[dict[str, Any]]) -> list[str]:
    # Filtered EC2 describes may return empty pages with a NextToken: always paginate.
    pages = (
        ctx.client("ec2")
        .get_paginator("describe_instance_type_offerings")
        .paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": [ctx.inp.gpu_instance_type]}, *extra_filters],
        )
    )
    return sorted({str(o["Location"]) for page in pages for o in page["InstanceTypeOfferings"]})


def _check_gpu_offering(ctx: _Context) -> CheckResult:
    inp = ctx.inp
    if _offered_azs(ctx, [{"Name": "location", "Values": [inp.gpu_az]}]):
        return _pass("gpu-az-offering", f"{inp.gpu_instance_type} is offered in {inp.gpu_az}")
    offered = _offered_azs(ctx, [])
    if not offered:
        return _fail(
            "gpu-az-offering",
            f"{inp.gpu_instance_type} is not offered in any AZ of {inp.region}",
            f"set GPU_NODE_TYPE to a type offered in {inp.region}, or deploy to another REGION",
        )
    return _fail(
        "gpu-az-offering",
        f"{inp.gpu_instance_type} is not offered in {inp.gpu_az}",
        f"set GPU_AZ to one of: {', '.join(offered)}",
    )


def _check_gpu_efa(ctx: _Context) -> CheckResult:
    itype = ctx.inp.gpu_instance_type
    infos = ctx.client("ec2").describe_instance_types(InstanceTypes=[itype])["InstanceTypes"]
    network = infos[0].get("NetworkInfo", {}) if infos else {}
    efa = network.get("EfaSupported")
    if efa is True:
        interfaces = network.get("EfaInfo", {}).get("MaximumEfaInterfaces")
        suffix = f" (up to {int(interfaces)} EFA interfaces)" if interfaces is not None else ""
        return _pass("gpu-efa", f"{itype} supports EFA{suffix}")
    fix = "set GPU_NODE_TYPE to a type with EFA (`aws ec2 describe-instance-types --filters Name=network-info.efa-supported,Values=true`)"
    if efa is False:
        return _fail("gpu-efa", f"{itype} does not support EFA", fix)
    # Never assume EFA: the GPU nodegroup attaches EFA interfaces and would fail to launch.
    return _fail(
        "gpu-efa",
        f"EFA support of {itype} unknown: DescribeInstanceTypes returned no NetworkInfo.EfaSupported",
        fix,
    )


def _quota_value(ctx: _Context, code: str) -> tuple[float, bool]:
    """(value, is_aws_default) of an EC2 quota in REGION."""
    sq = ctx.client("service-quotas")
    try:
        return float(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), False
    except ClientError as err:
        # Accounts that never had the quota changed may have no applied value: the default applies.
        if err.response.get("Error", {}).get("Code") != "NoSuchResourceException":
            raise
    default = sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)
    return float(default["Quota"]["Value"]), True


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else f"{value:g}"


_Check = Callable[[_Context], CheckResult]


def _planned_nodegroup_change(ctx: _Context, nodegroup_name: str) -> day2.ResourceChange | None:
    redeploy = ctx.inp.redeploy
    if redeploy is None:
        return None
    return day2.nodegroup_change(redeploy, ctx.deployed(), nodegroup_name)


def _check_quota(
    ctx: _Context,
    name: str,
    code: str,
    quota_name: str,
    instance_type: str,
    node_count: int,
    node_vcpus: int,
    *,
    nodegroup_name: str = "",
    surge_nodes: int = 0,
) -> CheckResult:
    actual = quota_code_of(instance_type)
    if actual != code:
        # Checking the wrong quota would pass or fail for reasons unrelated to the nodes we create.
        return _fail(
            name,
            f"{instance_type} counts against {actual or 'a quota not checked here'}, not {quota_name} ({code})",
            f"pass the quota code of {instance_type} ({actual or 'its family quota'}) to the preflight",
        )
    value, is_default = _quota_value(ctx, code)
    target = node_count * node_vcpus
    # This cluster's own nodes are capacity it already holds: a redeploy asks only for what it adds.
    held, others = ctx.running_vcpus(code)
    change = _planned_nodegroup_change(ctx, nodegroup_name) if nodegroup_name else None
    if change is not None and change.action == day2.REPLACE:
        peak, how = held + target, "the new nodegroup starts beside the old one"
    elif day2.rolls(change):
        # EKS adds the surge to the group's size (after any scaling change), then drains old nodes.
        peak, how = max(held, target) + surge_nodes * node_vcpus, f"rolling update with {surge_nodes} extra node(s)"
    else:
        peak, how = max(held, target), "no node replaced"
    need = others + peak
    detail = (
        f"need {need} vCPU: {node_count} x {node_vcpus} after the deploy, at most {peak} during it ({how}); "
        f"this cluster holds {held}, other workloads {others}; quota {_number(value)}{' (AWS default)' if is_default else ''}"
    )
    if value >= need:
        return _pass(name, detail)
    return _fail(
        name,
        detail,
        f"request an increase of {quota_name} ({code}) in {ctx.inp.region} to at least {need} in the Service Quotas console",
    )


def _check_gpu_quota(ctx: _Context) -> CheckResult:
    inp = ctx.inp
    return _check_quota(
        ctx,
        "gpu-vcpu-quota",
        inp.gpu_quota_code,
        inp.gpu_quota_name,
        inp.gpu_instance_type,
        inp.gpu_node_count,
        inp.gpu_vcpus,
        nodegroup_name=inp.redeploy.gpu_nodegroup_name if inp.redeploy else "",
        surge_nodes=inp.gpu_update_surge_nodes,
    )


def _check_standard_quota(ctx: _Context) -> CheckResult:
    inp = ctx.inp
    return _check_quota(
        ctx,
        "standard-vcpu-quota",
        STANDARD_QUOTA_CODE,
        STANDARD_QUOTA_NAME,
        inp.system_instance_type,
        inp.system_node_count,
        inp.system_vcpus,
        nodegroup_name=inp.redeploy.system_nodegroup_name if inp.redeploy else "",
        surge_nodes=inp.system_update_surge_nodes,
    )


def _redeploy_check(check: Callable[[Redeploy, Deployed], CheckResult], name: str) -> _Check:
    def run(ctx: _Context) -> CheckResult:
        if ctx.inp.redeploy is None:
            return _pass(name, "no synthesized assembly to compare (first deploy checks only)")
        return check(ctx.inp.redeploy, ctx.deployed())

    return run


def _check_log_group(ctx: _Context) -> CheckResult:
    if ctx.inp.redeploy is None:
        return _pass("control-plane-log-group", "no synthesized assembly to compare (first deploy checks only)")
    return day2.check_control_plane_log_group(ctx.inp.redeploy, ctx.deployed(), ctx.client("logs"))


def _check_api_endpoint(ctx: _Context) -> CheckResult:
    return check_api_endpoint(ctx.inp.endpoint_access, ctx.inp.public_access_cidrs, ctx.inp.environ)


def _check_vpc_azs(ctx: _Context) -> CheckResult:
    return check_vpc_azs(ctx.client("ec2"), region=ctx.inp.region, vpc_azs=ctx.inp.vpc_azs)


def _check_capacity_reservation(ctx: _Context) -> CheckResult:
    inp = ctx.inp
    return check_capacity_reservation(
        ctx.client("ec2"),
        reservation_id=inp.gpu_capacity_reservation_id,
        reservation_type=inp.gpu_capacity_reservation_type,
        placement_group=inp.gpu_placement_group,
        instance_type=inp.gpu_instance_type,
        gpu_az=inp.gpu_az,
        # A rolling update with the default strategy launches its surge into the reservation too.
        nodes=inp.gpu_node_count + inp.gpu_update_surge_nodes if inp.gpu_node_count else 0,
        held=ctx.nodes_in_reservation(inp.gpu_capacity_reservation_id) if inp.gpu_capacity_reservation_id else 0,
    )


def _check_admin_principals(ctx: _Context) -> CheckResult:
    partition = "aws-cn" if ctx.inp.region.startswith("cn-") else "aws-us-gov" if ctx.inp.region.startswith("us-gov-") else "aws"
    execution_role = ctx.inp.execution_role_arn.replace("${AWS::AccountId}", ctx.account).replace("${AWS::Partition}", partition)
    return check_admin_principals(
        ctx.client("iam", _home_region(ctx.inp.region)), arns=ctx.inp.admin_principal_arns, account=ctx.account, execution_role_arn=execution_role
    )


# Amazon Managed Service for Prometheus collectors per account and Region, unless raised.
SCRAPER_DEFAULT_QUOTA = 10
# Where AWS documents CloudWatch's OpenTelemetry metrics (OTLP, PromQL) and managed Prometheus collectors
# writing to them: the CloudWatch user guide's PromQL Region table, less Asia Pacific (New Zealand) for the
# collectors (What's New, 2026-07-31). Read in 2026-11: a Region outside it is warned about, not refused.
METRICS_COLLECTOR_REGIONS = frozenset(
    {
        *("us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "ca-west-1", "mx-central-1", "sa-east-1", "af-south-1"),
        *("eu-west-1", "eu-west-2", "eu-west-3", "eu-central-1", "eu-central-2", "eu-north-1", "eu-south-1", "eu-south-2"),
        *("ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2", "ap-east-1", "ap-east-2"),
        *("ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-7"),
    }
)


def _check_metrics_destination(ctx: _Context) -> CheckResult:
    """OBSERVABILITY=on writes the Ray metrics, through a managed collector, into CloudWatch's
    OpenTelemetry metrics store (the account's `default` dataset), which PromQL reads: both must be
    offered in the Region, or the observability stack fails after the cluster is up."""
    name, inp = "metrics-destination", ctx.inp
    if not inp.observability:
        return _pass(name, "OBSERVABILITY=off: nothing to check")
    try:
        ctx.client("cloudwatch").get_dataset(DatasetIdentifier="default")
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", ""))
        if code in _ACCESS_DENIED_CODES:
            raise
        if code in _TRANSIENT_CODES or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
            return warn(name, f"CloudWatch answered {code} for the default dataset in {inp.region}", "not checked: run the preflight again")
        return _fail(
            name,
            f"CloudWatch's OpenTelemetry metrics (PromQL) answer {code or 'an error'} in {inp.region}",
            "set OBSERVABILITY=off, or deploy in a Region that offers CloudWatch OpenTelemetry metrics",
        )
    scrapers, token = [], None
    while True:
        page = ctx.client("amp").list_scrapers(**({"nextToken": token} if token else {}))
        scrapers += [s for s in page.get("scrapers", []) if s.get("status", {}).get("statusCode") != "DELETING"]
        token = page.get("nextToken")
        if not token:
            break
    others = [s for s in scrapers if s.get("alias") != inp.metrics_collector_alias]
    detail = f"dataset default ready; {len(others)} other metrics collector(s) in {inp.region}"
    if len(others) >= SCRAPER_DEFAULT_QUOTA:
        return warn(
            name,
            detail,
            f"the default quota is {SCRAPER_DEFAULT_QUOTA} collectors per Region: unless it was raised, the observability stack will fail",
        )
    if inp.region not in METRICS_COLLECTOR_REGIONS:
        return warn(
            name,
            detail,
            f"{inp.region} is not among the Regions AWS documented (2026-11) for managed Prometheus collectors writing to CloudWatch: "
            "if the observability stack fails on its collector, set OBSERVABILITY=off",
        )
    return _pass(name, detail)


def _check_stacks_left_out(ctx: _Context) -> CheckResult:
    """A deploy never deletes a stack its app leaves out. The observability stack left deployed would keep
    its collector running and billing, while this deploy takes the collector's NetworkPolicy rule away:
    it would scrape nothing, and the NIXL alarm would read OK. Refused: remove it first."""
    name = "stacks-left-out"
    found = existing_stacks(ctx.client, ctx.inp.stacks_left_out)
    if not found:
        return _pass(name, "none deployed" if ctx.inp.stacks_left_out else "this configuration contains every stack")
    return _fail(
        name,
        f"{', '.join(found)} deployed but not in this configuration (OBSERVABILITY=off): its collector would run on, scraping nothing",
        f"OBSERVABILITY=on make destroy STACKS={found[0]} first (or keep OBSERVABILITY=on)",
    )


def _check_charts(ctx: _Context) -> CheckResult:
    return check_helm_charts(ctx.inp.helm_charts)


def _check_bootstrap(ctx: _Context) -> CheckResult:
    inp = ctx.inp
    stack_name = inp.bootstrap_stack_name
    toolkit_flag = "" if stack_name == "CDKToolkit" else f"--toolkit-stack-name {stack_name} "
    bootstrap = f"`npx cdk bootstrap {toolkit_flag}aws://{ctx.account}/{inp.region}`"
    try:
        stacks = ctx.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as err:
        error = err.response.get("Error", {})
        if error.get("Code") != "ValidationError" or "does not exist" not in str(error.get("Message", "")):
            raise
        stacks = []
    if not stacks:
        return _fail("cdk-bootstrap", f"stack {stack_name} not found in {inp.region}", f"run {bootstrap}")
    status = str(stacks[0]["StackStatus"])
    if not stack_status_usable(status):
        return _fail(
            "cdk-bootstrap",
            f"stack {stack_name} is {status}",
            f"delete or repair {stack_name} in the CloudFormation console, then run {bootstrap}",
        )
    versions = [str(o["OutputValue"]) for o in stacks[0].get("Outputs", []) if o.get("OutputKey") == "BootstrapVersion"]
    version = f", bootstrap version {versions[0]}" if versions else ""
    return _pass("cdk-bootstrap", f"stack {stack_name} is {status}{version}")


# After credentials: (name, check) in the order they are reported.
_AWS_CHECKS: tuple[tuple[str, _Check], ...] = (
    ("region", _check_region),
    ("gpu-az-offering", _check_gpu_offering),
    ("gpu-efa", _check_gpu_efa),
    ("vpc-azs", _check_vpc_azs),
    ("gpu-capacity-reservation", _check_capacity_reservation),
    ("stack-states", _redeploy_check(day2.check_stack_states, "stack-states")),
    ("kubernetes-version", _redeploy_check(day2.check_kubernetes_version, "kubernetes-version")),
    ("stack-changes", _redeploy_check(day2.check_stack_changes, "stack-changes")),
    ("kuberay-crds", _redeploy_check(day2.check_kuberay_crds, "kuberay-crds")),
    ("control-plane-log-group", _check_log_group),
    ("gpu-vcpu-quota", _check_gpu_quota),
    ("standard-vcpu-quota", _check_standard_quota),
    ("cdk-bootstrap", _check_bootstrap),
    ("admin-principals", _check_admin_principals),
    ("api-endpoint", _check_api_endpoint),
    ("helm-charts", _check_charts),
    ("metrics-destination", _check_metrics_destination),
    ("stacks-left-out", _check_stacks_left_out),
)


def _guarded(name: str, check: _Check, ctx: _Context) -> CheckResult:
    try:
        return check(ctx)
    except (ClientError, BotoCoreError) as err:
        return _error_result(name, err)


def _skipped(names: list[str], detail: str, fix: str) -> list[CheckResult]:
    return [_fail(name, detail, fix) for name in names]


def _without_credentials(credentials: CheckResult) -> list[CheckResult]:
    # Without an identity every AWS answer would be the same error: report the cause once.
    return [
        credentials,
        *_skipped([name for name, _ in _AWS_CHECKS], "skipped: no credentials", "fix the credentials check first"),
    ]


def run_checks(inp: PreflightInput, session: boto3.session.Session) -> list[CheckResult]:
    """Run every check in order; each is reported, passed or failed, never raised."""
    ctx = _Context(inp, session)
    credentials = _guarded("credentials", _check_credentials, ctx)
    if not credentials.ok:
        return _without_credentials(credentials)
    results = [credentials, _guarded("region", _check_region, ctx)]
    if not ctx.region_usable:
        # A disabled or unknown Region answers every call with an auth or connection error.
        return results + _skipped(
            [name for name, _ in _AWS_CHECKS[1:]],
            f"skipped: region {inp.region} not usable",
            "fix the region check first",
        )
    results.extend(_guarded(name, check, ctx) for name, check in _AWS_CHECKS[1:])
    return results


def format_table(results: list[CheckResult]) -> str:
    """CHECK | RESULT | DETAIL, aligned, then one `fix:` line per failed check."""
    rows = [("CHECK", "RESULT", "DETAIL")] + [(r.name, r.verdict, r.detail) for r in results]
    name_width = max(len(row[0]) for row in rows)
    result_width = max(len(row[1]) for row in rows)
    lines = [f"{a:<{name_width}}  {b:<{result_width}}  {c}".rstrip() for a, b, c in rows]
    lines.insert(1, f"{'-' * name_width}  {'-' * result_width}  {'-' * 6}")
    fixes = [f"fix: {r.name}: {r.fix}" for r in results if not r.ok and r.fix] + [f"warning: {r.name}: {r.warning}" for r in results if r.warning]
    if fixes:
        lines += ["", *fixes]
    return "\n".join(lines)


def main(inp: PreflightInput, session: boto3.session.Session | None = None) -> int:
    """Print the preflight table; 0 when every check passed, 1 otherwise."""
    print(
        f"Preflight for cluster {inp.cluster_name} in {inp.region}: "
        f"{inp.gpu_node_count} x {inp.gpu_instance_type} in {inp.gpu_az}, "
        f"{inp.system_node_count} x {inp.system_instance_type}"
    )
    results: list[CheckResult]
    try:
        if session is None:
            session = boto3.session.Session(region_name=inp.region)
    except BotoCoreError as err:
        # e.g. AWS_PROFILE names a profile that does not exist: fails before any check can run.
        results = _without_credentials(_error_result("credentials", err))
    else:
        results = run_checks(inp, session)
    print(format_table(results))
    failed = sum(not r.ok for r in results)
    print("All checks passed." if not failed else f"{failed} of {len(results)} checks failed.")
    return 0 if not failed else 1
