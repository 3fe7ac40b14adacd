"""GitHub Actions access to the account as code: the OIDC provider and the CI diff and deploy roles.

Not one of the four service stacks: a stack of its own app (ci_app.py) that an administrator deploys
with their own credentials (CliCredentialsStackSynthesizer), never through the CDK bootstrap roles that
the deploy role may assume, so a CI run cannot widen its own access by deploying a changed copy of it.

- diff role (pull requests): may assume only the CDK lookup role and read this cluster's stacks, which
  is what `cdk diff` needs;
- deploy role (jobs in the GitHub environments `deploy` and `destroy`): may assume only the four CDK
  bootstrap roles (deploy, file-publishing, image-publishing, lookup) of this account and Region, plus
  the read-only calls that `make preflight`, the destroy leftovers check and `aws eks update-kubeconfig`
  make with the caller's own credentials. Its Kubernetes access comes from ADMIN_PRINCIPAL_ARNS;
- park role (the park workflow's job in the GitHub environment `schedule`, which has no reviewers): may only read
  and change the scaling of the one GPU nodegroup, and read the GPU stack's outputs (tools/park_schedule.py), so
  the scheduled park and unpark can only move between what a reviewed deploy approved and zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnOutput, CliCredentialsStackSynthesizer, Duration, Environment, Stack, Tags
from aws_cdk import aws_iam as iam
from constructs import Construct

from preflight.registry import read_only_actions
from settings.ci_access import CDK_TOOLKIT_STACK, GITHUB_OIDC_HOST, CiAccessSettings
from stacks import nag
from stacks.app_base import PROJECT_TAG

STS_AUDIENCE = "sts.amazonaws.com"
# The CDK bootstrap roles a `cdk deploy` / `cdk destroy` assumes (bootstrap template names).
CDK_DEPLOY_ROLE_KINDS = ("deploy", "file-publishing", "image-publishing", "lookup")

# Read by `make preflight` and the destroy leftovers check with the caller's own credentials: every call
# preflight/registry.py declares. Those scoped to this cluster's resources get statements of their own below;
# the others support no resource-level permission (Service Authorization Reference): Resource "*".
SCOPED_READS = frozenset(
    {
        "eks:DescribeCluster",
        "eks:ListNodegroups",
        "eks:DescribeNodegroup",
        "cloudformation:DescribeStacks",
        "cloudformation:GetTemplate",
        "servicequotas:GetServiceQuota",
        "cloudwatch:GetDataset",
        "iam:GetRole",
        "iam:GetUser",
        "ecr:BatchGetImage",
        "secretsmanager:GetSecretValue",
        "s3:GetBucketLocation",
        "s3:GetObject",
        "s3:ListBucket",
        "acm:DescribeCertificate",
        "route53:GetHostedZone",
    }
)
DEPLOY_READ_ONLY_UNSCOPED = tuple(a for a in read_only_actions() if a not in SCOPED_READS)
# What `cdk diff` reads when it falls back from the lookup role to the caller's credentials.
DIFF_STACK_READS = (
    "cloudformation:DescribeStacks",
    "cloudformation:DescribeStackEvents",
    "cloudformation:DescribeStackResources",
    "cloudformation:GetTemplate",
    "cloudformation:GetTemplateSummary",
    "cloudformation:ListStackResources",
)
DEPLOY_STACK_READS = ("cloudformation:DescribeStacks", "cloudformation:GetTemplate")
# What a PromQL query of CloudWatch's Prometheus API needs (CloudWatch user guide, PromQL IAM permissions).
PROMQL_QUERY_ACTIONS = ("cloudwatch:GetMetricData", "cloudwatch:ListMetrics")

_NAG_ACCOUNT = "<AWS::AccountId>"  # how cdk-nag names the account pseudo parameter in its findings


def _model_bucket_reads(settings: CiAccessSettings) -> list[iam.PolicyStatement]:
    """The model-source check's reads: the bucket's Region, and the mirror's files under MODEL_SOURCE's prefix (and
    MODEL_NEXT_SOURCE's `hash`); nothing for a Hub source."""
    if settings.model_s3 is None:
        return []
    bucket = settings.model_s3.bucket_arn("aws")
    listed = [f"{p.key_prefix}*" for p in settings.model_prefixes]
    objects = [p.object_arn("aws") for p in settings.model_prefixes]
    return [
        iam.PolicyStatement(sid="ReadTheModelBucketRegion", actions=["s3:GetBucketLocation"], resources=[bucket]),
        iam.PolicyStatement(
            sid="ListTheModelPrefix",
            actions=["s3:ListBucket"],
            resources=[bucket],
            conditions={"StringLike": {"s3:prefix": listed}},
        ),
        iam.PolicyStatement(sid="ReadTheModelPrefix", actions=["s3:GetObject"], resources=objects),
    ]


class CiAccessStack(Stack):
    """The GitHub OIDC provider (created, or an existing one reused) and the two CI roles."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: CiAccessSettings, env: Environment) -> None:
        super().__init__(
            scope,
            construct_id,
            env=env,
            # The admin's own credentials: the stack never goes through the bootstrap roles CI may assume.
            synthesizer=CliCredentialsStackSynthesizer(qualifier=settings.cdk_qualifier),
            description=(
                f"{settings.cluster_name}: GitHub Actions OIDC roles for {settings.github_repository} (CI diff and"
                " deploy)"
            ),
        )
        self._settings = settings

        if settings.github_oidc_provider_arn:
            self.oidc_provider: iam.IOidcProvider = iam.OidcProviderNative.from_oidc_provider_arn(
                self, "GitHubOidcProvider", settings.github_oidc_provider_arn
            )
        else:
            # The native AWS::IAM::OIDCProvider, not the Lambda-backed OpenIdConnectProvider (kept by
            # the CDK for backward compatibility only). No thumbprint: IAM trusts GitHub's certificate
            # authority itself.
            self.oidc_provider = iam.OidcProviderNative(
                self, "GitHubOidcProvider", url=f"https://{GITHUB_OIDC_HOST}", client_ids=[STS_AUDIENCE]
            )

        self.diff_role = iam.Role(
            self,
            "DiffRole",
            role_name=settings.diff_role_name,
            description=f"cdk diff of {settings.cluster_name} from pull requests of {settings.github_repository}",
            assumed_by=self._github_principal([settings.pull_request_subject]),
            max_session_duration=Duration.hours(1),
        )
        iam.Policy(
            self,
            "DiffCdkRolesPolicy",
            roles=[self.diff_role],
            statements=[
                iam.PolicyStatement(
                    sid="AssumeCdkLookupRole", actions=["sts:AssumeRole"], resources=[self._cdk_role_arn("lookup")]
                ),
            ],
        )
        diff_reads = iam.Policy(
            self,
            "DiffReadOnlyPolicy",
            roles=[self.diff_role],
            statements=[
                iam.PolicyStatement(
                    sid="ReadServiceStacks",
                    actions=list(DIFF_STACK_READS),
                    resources=[self._stack_arn(f"{settings.service_stack_prefix}-*")],
                ),
                iam.PolicyStatement(sid="ListStacks", actions=["cloudformation:ListStacks"], resources=["*"]),
            ],
        )
        nag.acknowledge(
            diff_reads,
            "AwsSolutions-IAM5",
            "Read-only CloudFormation calls of cdk diff: the stacks of this cluster by name prefix"
            " (CLUSTER_NAME-network, -cluster, -gpu, -serving), and ListStacks, which supports no resource-level"
            " permission.",
            applies_to=[
                "Resource::*",
                self._nag_resource(self._stack_arn(f"{settings.service_stack_prefix}-*", account=_NAG_ACCOUNT)),
            ],
        )

        self.deploy_role = iam.Role(
            self,
            "DeployRole",
            role_name=settings.deploy_role_name,
            description=(
                f"cdk deploy/destroy of {settings.cluster_name} from the deploy and destroy environments of"
                f" {settings.github_repository}"
            ),
            assumed_by=self._github_principal(list(settings.deploy_subjects)),
            # A 30-minute EKS deploy plus the RayService wait outlives the default hour.
            max_session_duration=Duration.hours(settings.session_hours),
        )
        iam.Policy(
            self,
            "DeployCdkRolesPolicy",
            roles=[self.deploy_role],
            statements=[
                iam.PolicyStatement(
                    sid="AssumeCdkBootstrapRoles",
                    actions=["sts:AssumeRole"],
                    resources=[self._cdk_role_arn(kind) for kind in CDK_DEPLOY_ROLE_KINDS],
                ),
            ],
        )
        nodegroups = self._eks_arn("nodegroup", f"{settings.cluster_name}/*/*")
        service_stacks = self._stack_arn(f"{settings.service_stack_prefix}-*")
        ec2_quotas = self._ec2_quotas_arn()
        deploy_reads = iam.Policy(
            self,
            "DeployReadOnlyPolicy",
            roles=[self.deploy_role],
            statements=[
                iam.PolicyStatement(
                    sid="PreflightAndLeftoverReads", actions=list(DEPLOY_READ_ONLY_UNSCOPED), resources=["*"]
                ),
                # DescribeCluster is also what `aws eks update-kubeconfig` calls.
                iam.PolicyStatement(
                    sid="ReadTheCluster",
                    actions=["eks:DescribeCluster", "eks:ListNodegroups"],
                    resources=[self._cluster_arn()],
                ),
                iam.PolicyStatement(sid="ReadTheNodegroups", actions=["eks:DescribeNodegroup"], resources=[nodegroups]),
                iam.PolicyStatement(
                    sid="ReadEc2Quotas", actions=["servicequotas:GetServiceQuota"], resources=[ec2_quotas]
                ),
                # The preflight checks that each ADMIN_PRINCIPAL_ARNS entry exists before EKS is asked for its entry.
                iam.PolicyStatement(
                    sid="ReadAdminRoles", actions=["iam:GetRole"], resources=[self._arn("iam", "", "role/*")]
                ),
                iam.PolicyStatement(
                    sid="ReadAdminUsers", actions=["iam:GetUser"], resources=[self._arn("iam", "", "user/*")]
                ),
                # The preflight's dlc-image check: the pull the pods make, on the deploy Region's repositories.
                iam.PolicyStatement(
                    sid="ReadTheImage",
                    actions=["ecr:BatchGetImage"],
                    resources=[f"arn:aws:ecr:{settings.region}:*:repository/*"],
                ),
                # The preflight's model-source check of a gated model: the one Hugging Face token secret.
                *(
                    [
                        iam.PolicyStatement(
                            sid="ReadTheHubToken",
                            actions=["secretsmanager:GetSecretValue"],
                            resources=[
                                self._arn(
                                    "secretsmanager", settings.region, f"secret:{settings.hf_token_secret_name}-??????"
                                )
                            ],
                        )
                    ]
                    if settings.hf_token_secret_name
                    else []
                ),
                # The preflight's model-source check of an s3:// MODEL_SOURCE (and MODEL_NEXT_SOURCE, same bucket).
                *_model_bucket_reads(settings),
                # SERVE_EXPOSURE beyond the cluster: the load balancer's certificate (this Region's) and the DNS
                # name's hosted zone.
                iam.PolicyStatement(
                    sid="ReadTheEndpointCertificate",
                    actions=["acm:DescribeCertificate"],
                    resources=[self._arn("acm", settings.region, "certificate/*")],
                ),
                iam.PolicyStatement(
                    sid="ReadTheEndpointZone",
                    actions=["route53:GetHostedZone"],
                    resources=["arn:aws:route53:::hostedzone/*"],
                ),
                # OBSERVABILITY=on: CloudWatch's OpenTelemetry metrics store, the account's implicit dataset,
                # which the preflight reads.
                iam.PolicyStatement(
                    sid="ReadTheMetricsDataset",
                    actions=["cloudwatch:GetDataset"],
                    resources=[self._arn("cloudwatch", settings.region, "dataset/default")],
                ),
                # `make verify` asks it one PromQL query. AWS documents the two actions a query needs, not a
                # resource to scope them to (the classic metric reads take "*"): read-only, on "*".
                iam.PolicyStatement(sid="PromQLQuery", actions=list(PROMQL_QUERY_ACTIONS), resources=["*"]),
                iam.PolicyStatement(
                    sid="ReadServiceAndBootstrapStacks",
                    actions=list(DEPLOY_STACK_READS),
                    resources=[service_stacks, self._stack_arn(CDK_TOOLKIT_STACK)],
                ),
            ],
        )
        nag.acknowledge(
            deploy_reads,
            "AwsSolutions-IAM5",
            "Read-only calls of make preflight and the destroy leftovers check: EC2, ELB, tag, log-group and"
            " default-quota Describe/Get calls support no resource-level permission; the EC2 quotas, and the nodegroups"
            " and stacks of this cluster by name prefix; GetRole/GetUser on the account's roles and users, whose names"
            " ADMIN_PRINCIPAL_ARNS gives (not known to this stack); BatchGetImage (a pull's read) on the Region's"
            " repositories of any account: the DLC image is in AWS's account; DescribeCertificate on the Region's"
            " certificates and GetHostedZone on the account's zones (SERVE_CERTIFICATE_ARN and SERVE_HOSTED_ZONE_ID are"
            " service settings, not known to this stack).",
            applies_to=[
                "Resource::*",
                self._nag_resource(self._eks_arn("nodegroup", f"{settings.cluster_name}/*/*", account=_NAG_ACCOUNT)),
                self._nag_resource(self._stack_arn(f"{settings.service_stack_prefix}-*", account=_NAG_ACCOUNT)),
                self._nag_resource(self._stack_arn(CDK_TOOLKIT_STACK, account=_NAG_ACCOUNT)),
                self._nag_resource(self._ec2_quotas_arn(account=_NAG_ACCOUNT)),
                self._nag_resource(self._arn("iam", "", "role/*", account=_NAG_ACCOUNT)),
                self._nag_resource(self._arn("iam", "", "user/*", account=_NAG_ACCOUNT)),
                f"Resource::arn:aws:ecr:{settings.region}:*:repository/*",
                self._nag_resource(self._arn("acm", settings.region, "certificate/*", account=_NAG_ACCOUNT)),
                "Resource::arn:aws:route53:::hostedzone/*",
            ],
        )

        self.park_role = self._park_role(settings)

        CfnOutput(
            self,
            "DeployRoleArn",
            value=self.deploy_role.role_arn,
            description="role-to-assume of the deploy and destroy workflows; add it to ADMIN_PRINCIPAL_ARNS",
        )
        CfnOutput(
            self,
            "DiffRoleArn",
            value=self.diff_role.role_arn,
            description="role-to-assume of the pull-request diff workflow",
        )
        CfnOutput(
            self,
            "ParkRoleArn",
            value=self.park_role.role_arn,
            description="role-to-assume of the park workflow's scheduled job (repository variable AWS_PARK_ROLE_ARN)",
        )
        CfnOutput(
            self,
            "OidcProviderArn",
            value=self.oidc_provider.oidc_provider_arn,
            description="GitHub Actions OIDC provider of the account",
        )
        Tags.of(self).add("project", PROJECT_TAG)
        Tags.of(self).add("cluster", settings.cluster_name)

    def _park_role(self, settings: CiAccessSettings) -> iam.Role:
        """The scheduled park's role: the GPU nodegroup's scaling and the GPU stack's outputs, nothing else."""
        role = iam.Role(
            self,
            "ParkRole",
            role_name=settings.schedule_role_name,
            description=(
                f"scheduled park/unpark of {settings.cluster_name}'s GPU nodegroup from the schedule environment of"
                f" {settings.github_repository}"
            ),
            assumed_by=self._github_principal([settings.schedule_subject]),
            max_session_duration=Duration.hours(1),
        )
        nodegroup = f"{settings.cluster_name}/{settings.gpu_nodegroup_name}/*"
        policy = iam.Policy(
            self,
            "ParkPolicy",
            roles=[role],
            statements=[
                # IAM has no condition key for the fields of UpdateNodegroupConfig: it may also change this
                # nodegroup's labels, taints and update settings (tools/park_schedule.py sends scalingConfig only).
                iam.PolicyStatement(
                    sid="ScaleTheGpuNodegroup",
                    actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"],
                    resources=[self._eks_arn("nodegroup", nodegroup)],
                ),
                # DescribeUpdate authorizes on the cluster and the nodegroup (Service Authorization Reference).
                iam.PolicyStatement(
                    sid="FollowTheUpdate",
                    actions=["eks:DescribeUpdate"],
                    resources=[self._cluster_arn(), self._eks_arn("nodegroup", nodegroup)],
                ),
                iam.PolicyStatement(
                    sid="ReadTheApprovedCount",
                    actions=["cloudformation:DescribeStacks"],
                    resources=[self._stack_arn(settings.gpu_stack_name)],
                ),
            ],
        )
        nag.acknowledge(
            policy,
            "AwsSolutions-IAM5",
            "The GPU nodegroup's ARN ends in its generated ID, and a stack's ARN in its stack ID: unknown before they"
            " exist, so the name is given and the ID is '*'.",
            applies_to=[
                self._nag_resource(self._eks_arn("nodegroup", nodegroup, account=_NAG_ACCOUNT)),
                self._nag_resource(self._stack_arn(settings.gpu_stack_name, account=_NAG_ACCOUNT)),
            ],
        )
        return role

    def _github_principal(self, subjects: Sequence[str]) -> iam.OpenIdConnectPrincipal:
        """Web identity from GitHub Actions: our audience and exactly these subjects (StringEquals, no wildcard)."""
        subject: str | list[str] = subjects[0] if len(subjects) == 1 else list(subjects)
        return iam.OpenIdConnectPrincipal(
            self.oidc_provider,
            {"StringEquals": {f"{GITHUB_OIDC_HOST}:aud": STS_AUDIENCE, f"{GITHUB_OIDC_HOST}:sub": subject}},
        )

    # ARNs with a literal `aws` partition: the settings accept only commercial Regions, and the policies
    # read the same whatever the CDK feature flags say about partition literals.
    def _arn(self, service: str, region: str, resource: str, account: str | None = None) -> str:
        return f"arn:aws:{service}:{region}:{account or self.account}:{resource}"

    def _cdk_role_arn(self, kind: str, account: str | None = None) -> str:
        account = account or self.account
        return self._arn(
            "iam", "", f"role/cdk-{self._settings.cdk_qualifier}-{kind}-role-{account}-{self._settings.region}", account
        )

    def _stack_arn(self, stack_name: str, account: str | None = None) -> str:
        return self._arn("cloudformation", self._settings.region, f"stack/{stack_name}/*", account)

    def _eks_arn(self, resource_type: str, name: str, account: str | None = None) -> str:
        return self._arn("eks", self._settings.region, f"{resource_type}/{name}", account)

    def _ec2_quotas_arn(self, account: str | None = None) -> str:
        return self._arn("servicequotas", self._settings.region, "ec2/*", account)

    def _cluster_arn(self) -> str:
        return self._eks_arn("cluster", self._settings.cluster_name)

    @staticmethod
    def _nag_resource(arn: str) -> str:
        return f"Resource::{arn}"
