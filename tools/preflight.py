"""`make preflight`: check the AWS account before a deploy (credentials, region, GPU offering, EFA,
vCPU quotas, CDK bootstrap) and print a table; exits 1 when a check fails."""

from __future__ import annotations

import os
import sys

from preflight.checks import PreflightInput
from preflight.checks import main as run_preflight
from settings import SettingError, Settings, load_settings
from settings.context_files import read_project_context


def preflight_input(settings: Settings) -> PreflightInput:
    quota_code, quota_name = settings.gpu_node.on_demand_quota
    return PreflightInput(
        region=settings.region,
        gpu_az=settings.gpu_az,
        gpu_instance_type=settings.gpu_node.name,
        gpu_vcpus=settings.gpu_node.vcpus,
        gpu_node_count=settings.gpu_node_count,
        gpu_quota_code=quota_code,
        gpu_quota_name=quota_name,
        system_instance_type=settings.system_node.name,
        system_vcpus=settings.system_node.vcpus,
        system_node_count=settings.system_node_count,
        cluster_name=settings.cluster_name,
    )


def main() -> int:
    try:
        settings = load_settings(os.environ, read_project_context())
    except SettingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not settings.admin_principal_arns:
        print(
            "note: ADMIN_PRINCIPAL_ARNS is empty: only the CloudFormation execution role and the kubectl provider "
            "will be cluster admins, so your own kubectl will be refused (add your role's ARN)."
        )
    return run_preflight(preflight_input(settings))


if __name__ == "__main__":
    sys.exit(main())
