"""Every preflight check, registered once: its name (in run order), what it runs, when it fails (the docs'
table) and the read-only IAM actions it calls (the CI deploy role's policy is derived from them).

A new check is a function returning a CheckResult and one `Check(...)` entry here, plus its test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from preflight import account_checks as account
from preflight import capacity
from preflight import observability_checks as observability
from preflight import quota_checks as quotas
from preflight import redeploy as day2
from preflight import redeploy_live as live
from preflight.charts import check_helm_charts
from preflight.context import CheckFunction, Context
from preflight.deployed import Deployed
from preflight.endpoint_checks import check_certificate, check_hosted_zone
from preflight.gcs_store_checks import check_gcs_store
from preflight.hub import check_model_source
from preflight.image_checks import check_image
from preflight.model_bucket import check_s3_model_source
from preflight.redeploy import Redeploy
from preflight.results import CheckResult, ok
from settings.model_source import s3_source
from settings.versions import GCS_ENGINE, GCS_ENGINE_VERSION


def _check_model_source(ctx: Context) -> CheckResult:
    source = ctx.inp.model_source
    if not source:
        return ok("model-source", "not set")
    s3 = s3_source(source)
    if s3 is not None:
        following = s3_source(ctx.inp.model_next_source) if ctx.inp.model_next_source else None
        return check_s3_model_source(
            ctx.client("s3"),
            s3,
            region=ctx.inp.region,
            gpu_nodes=ctx.inp.gpu_node_count,
            kms_key=ctx.inp.model_source_kms_key,
            next_source=following,
        )
    return check_model_source(source, token=_hub_token(ctx))


@dataclass(frozen=True)
class Check:
    name: str
    run: CheckFunction
    fails_when: str  # the docs' "Fails when" column (docs/deploy.md)
    actions: tuple[str, ...] = ()  # the read-only AWS calls it makes (IAM actions)


def _redeploy_check(check: Callable[[Redeploy, Deployed], CheckResult], name: str) -> CheckFunction:
    def run(ctx: Context) -> CheckResult:
        if ctx.inp.redeploy is None:
            return ok(name, "no synthesized assembly to compare (first deploy checks only)")
        return check(ctx.inp.redeploy, ctx.deployed())

    return run


def _check_log_group(ctx: Context) -> CheckResult:
    if ctx.inp.redeploy is None:
        return ok("control-plane-log-group", "no synthesized assembly to compare (first deploy checks only)")
    return live.check_control_plane_log_group(ctx.inp.redeploy, ctx.deployed(), ctx.client("logs"))


def _check_charts(ctx: Context) -> CheckResult:
    return check_helm_charts(ctx.inp.helm_charts)


def _hub_token(ctx: Context) -> Callable[[], str] | None:
    """Reads the token of HF_TOKEN_SECRET_NAME only if the model turns out to be gated."""
    name = ctx.inp.hf_token_secret_name
    if not name:
        return None
    return lambda: str(ctx.client("secretsmanager").get_secret_value(SecretId=name).get("SecretString", "")).strip()


# What reading the deployed stacks costs (preflight.deployed.read_deployed, once per run).
_DEPLOYED = (
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "eks:DescribeCluster",
    "eks:ListNodegroups",
    "eks:DescribeNodegroup",
)

CHECKS: tuple[Check, ...] = (
    Check("credentials", account.check_credentials, "no or expired credentials", ("sts:GetCallerIdentity",)),
    Check("region", account.check_region, "REGION unknown or not enabled", ("ec2:DescribeRegions",)),
    Check(
        "gpu-az-offering",
        capacity.check_gpu_offering,
        "GPU_NODE_TYPE not offered in GPU_AZ (the fix lists the AZs that offer it)",
        ("ec2:DescribeInstanceTypeOfferings",),
    ),
    Check("gpu-efa", capacity.check_gpu_efa, "GPU_NODE_TYPE has no EFA", ("ec2:DescribeInstanceTypes",)),
    Check(
        "vpc-azs",
        capacity.check_availability_zones,
        "an AZ of the VPC is not one of this account's available AZs in REGION (without a cached look-up the VPC takes"
        " REGION + a, b, c, which us-west-1 and some ap-northeast-1 accounts do not have): the network stack would fail"
        " in minute 1; fix: `make lookup`",
        ("ec2:DescribeAvailabilityZones",),
    ),
    Check(
        "gpu-capacity-reservation",
        capacity.check_reservation,
        "with `GPU_CAPACITY_RESERVATION_ID`: the reservation is not found, not `active`, of another instance type, in"
        " another AZ than GPU_AZ, of the other kind (`GPU_CAPACITY_RESERVATION_TYPE`), in another placement group than"
        " `GPU_PLACEMENT_GROUP`, or has fewer free instances than the nodes this deploy adds to it (this cluster's"
        " nodes already in it count as held); with `GPU_NODE_COUNT=0` (parked) only warned about; warns when a Capacity"
        " Block ends, and when autoscaling (`PREFILL/DECODE_MAX_REPLICAS`) adds nodes into a cluster placement group"
        " without a reservation",
        ("ec2:DescribeCapacityReservations", "ec2:DescribeInstances"),
    ),
    Check(
        "stack-states",
        _redeploy_check(day2.check_stack_states, "stack-states"),
        "a stack is busy (`*_IN_PROGRESS`), stuck in `UPDATE_ROLLBACK_FAILED` (fix: `npx cdk rollback`) or in a state"
        " it cannot be updated from; an EKS cluster of the name exists that no stack of ours owns (made by eksctl?)",
        _DEPLOYED,
    ),
    Check(
        "kubernetes-version",
        _redeploy_check(day2.check_kubernetes_version, "kubernetes-version"),
        "K8S_VERSION skips a minor version or goes down (DescribeCluster); an upgrade whose add-on versions were not"
        " looked up",
        _DEPLOYED,
    ),
    Check(
        "ray-cluster-change",
        _redeploy_check(day2.check_ray_cluster_change, "ray-cluster-change"),
        "the RayCluster would change under a running RayService (the serving stack's RayClusterConfigFingerprint"
        " output): KubeRay applies only the serve config in place, so the deploy is refused with the command that"
        " re-creates the serving stack (API keys turning on would otherwise leave the keyless application serving)",
        _DEPLOYED,
    ),
    Check(
        "stack-changes",
        _redeploy_check(day2.check_stack_changes, "stack-changes"),
        "the deployed templates (GetTemplate) against the synthesized ones: a protected resource replaced, a nodegroup"
        " replaced under its fixed name, a GPU nodegroup replaced while it runs, a Kubernetes version change mixed with"
        " other nodegroup changes, Kubernetes objects that would be applied and then deleted with an old resource, a"
        " resource created while the old one of the same identity still exists (an access entry, a Pod Identity"
        " association), a Helm release moving namespace; each with its procedure (the change table)",
        _DEPLOYED,
    ),
    Check(
        "removed-exports",
        lambda ctx: (
            live.check_removed_exports(ctx.inp.redeploy, ctx.deployed(), ctx.client("cloudformation"))
            if ctx.inp.redeploy is not None
            else ok("removed-exports", "no synthesized assembly to compare (first deploy checks only)")
        ),
        "the deploy would delete a stack's export that a deployed stack still imports (CloudFormation refuses, e.g."
        " `GCS_FAULT_TOLERANCE` `redis` -> `off`: the system stack's store exports, imported by the serving stack);"
        " fix: destroy the importing stack, then deploy",
        (*_DEPLOYED, "cloudformation:ListImports"),
    ),
    Check(
        "kuberay-crds",
        _redeploy_check(live.check_kuberay_crds, "kuberay-crds"),
        "KUBERAY_VERSION differs from the deployed release and the cluster's CRDs are not the new ones (fix: `make"
        " kuberay-crds`)",
        _DEPLOYED,
    ),
    Check(
        "control-plane-log-group",
        _check_log_group,
        "`/aws/eks/CLUSTER_NAME/cluster` exists but no deployed stack owns it (EKS made it for an earlier cluster of"
        " the name — EKS never deletes it — or before the cluster stack owned it); fix: delete it (export its logs"
        " first if you need them)",
        ("logs:DescribeLogGroups",),
    ),
    Check(
        "gpu-vcpu-quota",
        quotas.check_gpu_quota,
        "other workloads + the most this deploy holds at once exceed the GPU family's On-Demand vCPU quota: the larger"
        " of what this cluster holds and the new count, plus the surge when the plan rolls the nodegroup (`default`"
        " strategy), or old + new when it is replaced beside the old one",
        (
            "servicequotas:GetServiceQuota",
            "servicequotas:GetAWSDefaultServiceQuota",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceTypes",
        ),
    ),
    Check(
        "standard-vcpu-quota",
        quotas.check_standard_quota,
        "the same for the system nodes and the Standard On-Demand vCPU quota",
        (
            "servicequotas:GetServiceQuota",
            "servicequotas:GetAWSDefaultServiceQuota",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceTypes",
        ),
    ),
    Check(
        "cdk-bootstrap", account.check_bootstrap, "no usable CDK bootstrap stack", ("cloudformation:DescribeStacks",)
    ),
    Check(
        "admin-principals",
        account.check_admin_principals_of,
        "an `ADMIN_PRINCIPAL_ARNS` entry is no IAM role or user of the account (IAM GetRole / GetUser: a typo, a"
        " deleted role, a path left out), or is the CDK bootstrap's CloudFormation execution role, which creates the"
        " cluster and already has its access entry: EKS would refuse the access entry about 12 minutes into the cluster"
        " stack and roll the control plane back (duplicates are refused at synth); another account's principals are"
        " warned about, not read",
        ("iam:GetRole", "iam:GetUser"),
    ),
    Check(
        "api-endpoint",
        account.check_api_endpoint_of,
        "`ENDPOINT_ACCESS=private` on a GitHub-hosted runner (`RUNNER_ENVIRONMENT=github-hosted`): the deploy would"
        " work, then `make kubeconfig`, `wait-ready`, `verify` and the teardown could not reach the API (fix: a"
        " self-hosted runner in the VPC); warns for `private` elsewhere (run the post-deploy tools from inside the VPC)"
        " and for a public endpoint open to 0.0.0.0/0",
    ),
    Check(
        "model-source",
        _check_model_source,
        "MODEL_SOURCE is not a repository of the Hugging Face Hub (404), or it is gated (401/403) and no"
        " HF_TOKEN_SECRET_NAME is set or its token cannot read it; warns when the Hub does not answer. An s3:// source:"
        " the bucket does not exist, or the prefix is empty (no `make mirror-model` yet) while GPU nodes are deployed;"
        " warns for a bucket in another Region. MODEL_NEXT_SOURCE (same bucket) is reported: a finished mirror to"
        " switch to, or not yet",
        ("secretsmanager:GetSecretValue", "s3:GetBucketLocation", "s3:GetObject", "s3:ListBucket"),
    ),
    Check(
        "gcs-store",
        lambda ctx: check_gcs_store(
            ctx.client("elasticache"),
            node_type=ctx.inp.gcs_store_node_type,
            engine=GCS_ENGINE,
            engine_version=GCS_ENGINE_VERSION,
            region=ctx.inp.region,
        ),
        "GCS_FAULT_TOLERANCE=redis and ElastiCache does not offer GCS_STORE_NODE_TYPE or Valkey 8.1 in the Region",
        ("elasticache:DescribeReservedCacheNodesOfferings", "elasticache:DescribeCacheEngineVersions"),
    ),
    Check(
        "dlc-image",
        lambda ctx: (
            check_image(ctx.client("ecr"), ctx.inp.dlc_image, ctx.inp.region)
            if ctx.inp.dlc_image
            else ok("dlc-image", "not set")
        ),
        "DLC_IMAGE (its tag, or its digest once `make lookup` pinned it) does not exist in the Region's registry, or is"
        " another Region's",
        ("ecr:BatchGetImage",),
    ),
    Check(
        "endpoint-certificate",
        lambda ctx: check_certificate(
            ctx.client("acm"),
            certificate_arn=ctx.inp.serve_certificate_arn,
            hostname=ctx.inp.serve_hostname,
            region=ctx.inp.region,
        ),
        "SERVE_CERTIFICATE_ARN does not exist in REGION, is not ISSUED, or does not cover SERVE_HOSTNAME (the load"
        " balancer controller would fail to make the HTTPS listener after the deploy); warns without SERVE_HOSTNAME",
        ("acm:DescribeCertificate",),
    ),
    Check(
        "endpoint-hosted-zone",
        lambda ctx: check_hosted_zone(
            ctx.client("route53"),
            hosted_zone_id=ctx.inp.serve_hosted_zone_id,
            hostname=ctx.inp.serve_hostname,
            exposure=ctx.inp.serve_exposure,
        ),
        "SERVE_HOSTED_ZONE_ID does not exist or SERVE_HOSTNAME is not a name in it; warns for a private zone with an"
        " internet-facing endpoint",
        ("route53:GetHostedZone",),
    ),
    Check(
        "helm-charts",
        _check_charts,
        "a pinned chart version is not in its repository's `index.yaml` (checked before any GPU launches)",
    ),
    Check(
        "metrics-destination",
        observability.check_metrics_destination,
        "with `OBSERVABILITY=on`: CloudWatch's OpenTelemetry metrics (the `default` dataset) not answering in the"
        " Region; warns at 10 other managed collectors (the default quota), and for a Region outside those AWS"
        " documented (2026-11) for managed collectors writing to CloudWatch",
        ("cloudwatch:GetDataset", "aps:ListScrapers"),
    ),
    Check(
        "stacks-left-out",
        observability.check_stacks_left_out,
        "`CLUSTER_NAME-observability` is deployed but the configuration has `OBSERVABILITY=off`: a deploy never deletes"
        " a stack its app leaves out, so its collector would keep running (and billing) while the deploy takes its"
        " NetworkPolicy rule away — scraping nothing, the NIXL alarm reading OK (fix: `OBSERVABILITY=on make destroy"
        " STACKS=…` first)",
        ("cloudformation:DescribeStacks",),
    ),
)

# The other read-only calls the deploy role makes: the destroy's leftovers check (tools/teardown.py).
LEFTOVER_ACTIONS = (
    "ec2:DescribeVolumes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "logs:DescribeLogGroups",
)


def read_only_actions() -> tuple[str, ...]:
    """Every AWS call of the preflight and the leftovers check, each once, in check order."""
    return tuple(dict.fromkeys([*(a for check in CHECKS for a in check.actions), *LEFTOVER_ACTIONS]))


def table_markdown() -> str:
    """The docs' preflight table (docs/deploy.md)."""
    rows = ["| Check | Fails when |", "|---|---|"] + [f"| `{c.name}` | {c.fails_when} |" for c in CHECKS]
    return "\n".join(rows)
