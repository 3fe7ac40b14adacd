"""Settings of the CI access app (ci_app.py): who may assume the GitHub Actions roles, and what for.

The CI access stack is the trust anchor of the deploy pipeline, so it is a separate app with a settings
object of its own; CLUSTER_NAME and REGION are read and checked exactly as the main app reads them (the
roles are scoped to that cluster's stacks), the rest only from the environment. A bad value raises
SettingError naming the setting, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settings.errors import SettingError
from settings.loader import raw_values
from settings.model_source import S3Prefix, parse_model_source, parse_next_source, parse_s3_prefix, s3_source
from settings.parsers import Integer, region_name
from settings.specs import SPECS, SettingSpec

DEFAULT_CDK_QUALIFIER = "hnb659fds"  # `cdk bootstrap`'s default qualifier
CDK_TOOLKIT_STACK = "CDKToolkit"  # `cdk bootstrap`'s default stack name: the bootstrap stack `make preflight` reads
# The context key the CDK's DefaultStackSynthesizer reads its qualifier from (cdk.json).
BOOTSTRAP_QUALIFIER_CONTEXT_KEY = "@aws-cdk/core:bootstrapQualifier"
GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
IAM_ROLE_NAME_MAX = 64

# GitHub: an owner is 1-39 letters, digits and single inner hyphens; a repository name 1-100 letters,
# digits, '.', '_' and '-', but not '.' or '..'. No '*' or '?': they would be wildcards in StringLike.
_GITHUB_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")
_OIDC_PROVIDER_ARN = re.compile(rf"arn:aws:iam::\d{{12}}:oidc-provider/{re.escape(GITHUB_OIDC_HOST)}")
_QUALIFIER = re.compile(r"[a-z0-9]{1,10}")

_MAIN_SPECS = {spec.env: spec for spec in SPECS}

CI_SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "GITHUB_REPOSITORY",
        "",
        "GitHub repository whose workflows may assume the CI roles (required)",
        "OWNER/NAME, e.g. octo-org/ray-llm",
    ),
    _MAIN_SPECS["REGION"],
    _MAIN_SPECS["CLUSTER_NAME"],
    _MAIN_SPECS["GPU_NODEGROUP_NAME"],
    _MAIN_SPECS["HF_TOKEN_SECRET_NAME"],
    _MAIN_SPECS["MODEL_SOURCE"],
    SettingSpec(
        "GITHUB_OIDC_PROVIDER_ARN",
        "",
        "Existing GitHub OIDC provider of the account to reuse (empty = the stack creates one; an account holds only"
        " one)",
        f"arn:aws:iam::ACCOUNT:oidc-provider/{GITHUB_OIDC_HOST}",
    ),
    SettingSpec(
        "CDK_QUALIFIER",
        DEFAULT_CDK_QUALIFIER,
        "Qualifier of the CDK bootstrap the service stacks deploy with (default: cdk.json's"
        f" {BOOTSTRAP_QUALIFIER_CONTEXT_KEY}, else {DEFAULT_CDK_QUALIFIER})",
        "lowercase letters and digits, at most 10 characters",
    ),
    SettingSpec(
        "CI_SESSION_HOURS",
        "2",
        "MaxSessionDuration of the deploy role (role-duration-seconds up to this)",
        parser=Integer(1, 12),
    ),
)


_CI_SPECS_BY_ENV = {spec.env: spec for spec in CI_SPECS}


@dataclass(frozen=True)
class CiAccessSettings:
    """What the CI access stack needs, parsed and validated once in ci_app.py."""

    github_repository: str  # OWNER/NAME, exactly as GitHub spells it (the OIDC subject is case-sensitive)
    region: str
    cluster_name: str
    github_oidc_provider_arn: str  # "" = create the provider
    cdk_qualifier: str
    session_hours: int
    hf_token_secret_name: str = ""  # the preflight may read this one secret (a gated model's Hub check)
    model_source: str = ""  # an s3:// MODEL_SOURCE: the preflight reads that bucket's Region and the prefix
    model_next_source: str = ""  # MODEL_NEXT_SOURCE (same bucket): the preflight reads its `hash`
    gpu_nodegroup_name: str = "gpu-workers"  # the one nodegroup the schedule role may scale

    @property
    def model_s3(self) -> S3Prefix | None:
        return s3_source(self.model_source)

    @property
    def model_prefixes(self) -> tuple[S3Prefix, ...]:
        """The prefixes the preflight reads: MODEL_SOURCE's, and MODEL_NEXT_SOURCE's when set."""
        following = parse_s3_prefix("MODEL_NEXT_SOURCE", self.model_next_source) if self.model_next_source else None
        return tuple(p for p in (self.model_s3, following) if p is not None)

    @property
    def stack_name(self) -> str:
        return f"{self.cluster_name}-ci-access"

    @property
    def service_stack_prefix(self) -> str:
        """The main app's stacks are named CLUSTER_NAME-network, -cluster, -gpu, -serving."""
        return self.cluster_name

    @property
    def deploy_role_name(self) -> str:
        # IAM names are account-wide, the roles are per Region: the Region is part of the name.
        return f"{self.cluster_name}-ci-deploy-{self.region}"

    @property
    def diff_role_name(self) -> str:
        return f"{self.cluster_name}-ci-diff-{self.region}"

    @property
    def schedule_role_name(self) -> str:
        return f"{self.cluster_name}-ci-park-{self.region}"

    @property
    def gpu_stack_name(self) -> str:
        return f"{self.service_stack_prefix}-gpu"

    @property
    def schedule_subject(self) -> str:
        """The OIDC `sub` of the park workflow's scheduled job, in the GitHub environment `schedule` (no reviewers)."""
        return f"repo:{self.github_repository}:environment:schedule"

    @property
    def session_seconds(self) -> int:
        return self.session_hours * 3600

    @property
    def pull_request_subject(self) -> str:
        """The OIDC `sub` of a workflow run for a pull request (no environment)."""
        return f"repo:{self.github_repository}:pull_request"

    @property
    def deploy_subjects(self) -> tuple[str, str]:
        """The OIDC `sub` of jobs that run in the GitHub environments `deploy` and `destroy`."""
        return (
            f"repo:{self.github_repository}:environment:deploy",
            f"repo:{self.github_repository}:environment:destroy",
        )


def _github_repository(raw: str) -> str:
    if not raw:
        raise SettingError(
            "GITHUB_REPOSITORY",
            raw,
            "required: OWNER/NAME of the GitHub repository whose workflows may assume the CI roles",
        )
    if not _GITHUB_REPOSITORY.fullmatch(raw):
        raise SettingError(
            "GITHUB_REPOSITORY",
            raw,
            "OWNER/NAME as GitHub spells it: the owner 1-39 letters, digits and '-', the name letters, digits, '.', '_'"
            " and '-'",
        )
    return raw


def _oidc_provider_arn(raw: str) -> str:
    if raw and not _OIDC_PROVIDER_ARN.fullmatch(raw):
        raise SettingError(
            "GITHUB_OIDC_PROVIDER_ARN",
            raw,
            f"empty (create one) or arn:aws:iam::123456789012:oidc-provider/{GITHUB_OIDC_HOST}",
        )
    return raw


def _qualifier(raw: str) -> str:
    if not _QUALIFIER.fullmatch(raw):
        raise SettingError(
            "CDK_QUALIFIER", raw, "the `cdk bootstrap --qualifier`: lowercase letters and digits, at most 10 characters"
        )
    return raw


def load_ci_access_settings(
    environ: Mapping[str, str], context: Mapping[str, Any], defaults: Mapping[str, str] | None = None
) -> CiAccessSettings:
    """Parse and check the CI access settings; raise SettingError on the first bad one.

    CLUSTER_NAME, REGION, HF_TOKEN_SECRET_NAME, MODEL_SOURCE and MODEL_NEXT_SOURCE come from where the main app
    reads them (environment, `-c`, cdk.json, default)
    so both apps agree on the cluster; the CI-only settings come from the environment.
    """
    main_raw = raw_values(environ, context, defaults)
    region = region_name(main_raw["REGION"])
    cluster_name = _MAIN_SPECS["CLUSTER_NAME"].parse(main_raw["CLUSTER_NAME"])
    default_qualifier = str(context.get(BOOTSTRAP_QUALIFIER_CONTEXT_KEY, DEFAULT_CDK_QUALIFIER))
    next_raw = main_raw["MODEL_NEXT_SOURCE"].strip()
    model_next_source = parse_next_source("MODEL_NEXT_SOURCE", next_raw, main_raw["MODEL_SOURCE"])
    settings = CiAccessSettings(
        github_repository=_github_repository(environ.get("GITHUB_REPOSITORY", "").strip()),
        region=region,
        cluster_name=cluster_name,
        github_oidc_provider_arn=_oidc_provider_arn(environ.get("GITHUB_OIDC_PROVIDER_ARN", "").strip()),
        cdk_qualifier=_qualifier(environ.get("CDK_QUALIFIER", default_qualifier).strip()),
        session_hours=_CI_SPECS_BY_ENV["CI_SESSION_HOURS"].parse(environ.get("CI_SESSION_HOURS", "2")),
        hf_token_secret_name=main_raw["HF_TOKEN_SECRET_NAME"].strip(),
        model_source=parse_model_source(main_raw["MODEL_SOURCE"]),
        model_next_source=model_next_source,
        gpu_nodegroup_name=_MAIN_SPECS["GPU_NODEGROUP_NAME"].parse(main_raw["GPU_NODEGROUP_NAME"]),
    )
    longest = max(settings.deploy_role_name, settings.diff_role_name, settings.schedule_role_name, key=len)
    if len(longest) > IAM_ROLE_NAME_MAX:
        raise SettingError(
            "CLUSTER_NAME",
            cluster_name,
            f"at most {IAM_ROLE_NAME_MAX - len(longest) + len(cluster_name)} characters in {region}: the CI role name"
            f" {longest} must fit IAM's {IAM_ROLE_NAME_MAX}",
        )
    return settings


def ci_settings_table_markdown() -> str:
    """The docs' table of the CI access app's settings (docs/ci.md), from CI_SPECS."""
    rows = ["| Environment variable | Default | Meaning | Allowed |", "|---|---|---|---|"]
    for spec in CI_SPECS:
        shared = spec.env in _MAIN_SPECS
        default = "as the main app" if shared else f"`{spec.default}`" if spec.default else "(empty)"
        meaning = (
            f"{spec.meaning}; read as the main app reads it (environment, `-c`, cdk.json), so both apps agree"
            if shared
            else spec.meaning
        )
        rows.append(f"| `{spec.env}` | {default} | {meaning} | {spec.allowed_text} |")
    return "\n".join(rows)
