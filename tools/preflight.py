"""`make preflight`: check the AWS account, and what is deployed, before a deploy: every check of
preflight/registry.py, in its order (the table of docs/deploy.md lists them). Prints a table; exits 1 when a
check fails.

It compares the deployed stacks with the synthesized assembly (`cdk.out/`, written by `make synth`),
which `make deploy` then deploys unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import fields
from functools import reduce
from pathlib import Path
from typing import Any

from preflight.context import DERIVED, SETTING
from preflight.redeploy import Redeploy
from preflight.runner import PreflightInput
from preflight.runner import main as run_preflight
from settings import SettingError, Settings
from settings.ci_access import CDK_TOOLKIT_STACK
from settings.context_files import REPO
from stacks.addons import chart_pins
from tools.entry import one_line_errors, project_settings

ASSEMBLY = REPO / "cdk.out"


def read_assembly(settings: Settings, assembly: Path) -> dict[str, dict[str, object]]:
    """Stack name -> synthesized template, for every stack of this configuration."""
    templates: dict[str, dict[str, object]] = {}
    for name in settings.stack_names.values():
        path = assembly / f"{name}.template.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run `make synth` first (with the same settings)")
        templates[name] = json.loads(path.read_text())
    return templates


def execution_role_arn(assembly: Path, stack_name: str) -> str:
    """The CloudFormation execution role the CDK CLI deploys `stack_name` with, as the assembly names it."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    properties = manifest.get("artifacts", {}).get(stack_name, {}).get("properties", {})
    return str(properties.get("cloudFormationExecutionRoleArn", ""))


def derived_inputs(
    settings: Settings,
    templates: dict[str, dict[str, object]] | None,
    execution_role: str,
    environ: Mapping[str, str] | None,
) -> dict[str, object]:
    """The inputs preflight/context.py declares `derived`: exactly those (preflight_input refuses a difference)."""
    quota_code, quota_name = settings.gpu_node.on_demand_quota
    return {
        "gpu_quota_code": quota_code,
        "gpu_quota_name": quota_name,
        "bootstrap_stack_name": CDK_TOOLKIT_STACK,
        "redeploy": Redeploy.of(settings, templates) if templates is not None else None,
        "helm_charts": chart_pins(settings),
        "execution_role_arn": execution_role,
        "model_source_kms_key": bool(settings.model_source_kms_key_arn),
        "gcs_store_node_type": settings.gcs_store_node_type if settings.gcs_redis else "",
        "environ": dict(environ or {}),
    }


def preflight_input(
    settings: Settings,
    templates: dict[str, dict[str, object]] | None = None,
    *,
    execution_role: str = "",
    environ: Mapping[str, str] | None = None,
) -> PreflightInput:
    """Each input from where preflight/context.py declares it comes from: a Settings attribute, or derived here."""
    declared = {f.name: f.metadata for f in fields(PreflightInput)}
    computed = derived_inputs(settings, templates, execution_role, environ)
    undeclared = set(computed) ^ {name for name, metadata in declared.items() if DERIVED in metadata}
    if undeclared:
        raise RuntimeError(f"preflight inputs derived here and declared derived differ: {sorted(undeclared)}")
    read = {
        name: reduce(getattr, metadata[SETTING].split("."), settings)
        for name, metadata in declared.items()
        if SETTING in metadata
    }
    inputs: dict[str, Any] = read | computed
    return PreflightInput(**inputs)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--assembly", type=Path, default=ASSEMBLY, help="the synthesized cloud assembly (default: cdk.out)"
    )
    args = parser.parse_args(argv)
    try:
        settings = project_settings()
        templates = read_assembly(settings, args.assembly)
    except (SettingError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not settings.admin_principal_arns:
        print(
            "note: ADMIN_PRINCIPAL_ARNS is empty: only the CloudFormation execution role and the kubectl provider "
            "will be cluster admins, so your own kubectl will be refused (add your role's ARN)."
        )
    execution_role = execution_role_arn(args.assembly, settings.stack_names["cluster"])
    return run_preflight(preflight_input(settings, templates, execution_role=execution_role, environ=os.environ))


if __name__ == "__main__":
    sys.exit(main())
