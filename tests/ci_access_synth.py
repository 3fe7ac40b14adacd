"""The CI access stack synthesized as the CDK CLI synthesizes ci_app.py, and what its tests read from it (the
tests: tests/test_ci_access.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import Environment, Validations
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from settings.ci_access import CiAccessSettings, load_ci_access_settings
from stacks.application import new_app
from stacks.ci_access_stack import CiAccessStack
from tests.conftest import REPO
from tests.pinned import PINNED

REPOSITORY = "octo-org/ray-llm"
EXISTING_PROVIDER = "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"
HOST = "token.actions.githubusercontent.com"
ACCOUNT = "${AWS::AccountId}"  # how _render writes the account pseudo parameter


@dataclass
class CiSynth:
    settings: CiAccessSettings
    stack: CiAccessStack
    outdir: Path
    template_json: dict[str, Any]
    nag_error: str

    @property
    def template(self) -> Template:
        return Template.from_json(self.template_json)

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template_json["Resources"].items() if v["Type"] == resource_type}

    def role_id(self, role_name: str) -> str:
        (logical_id,) = [
            k for k, v in self.resources("AWS::IAM::Role").items() if v["Properties"]["RoleName"] == role_name
        ]
        return logical_id

    def statements_of(self, role_name: str) -> list[dict[str, Any]]:
        """Every statement of every identity policy of the role (inline in the role or an AWS::IAM::Policy)."""
        role_id = self.role_id(role_name)
        role = self.template_json["Resources"][role_id]["Properties"]
        statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
        for policy in self.resources("AWS::IAM::Policy").values():
            if {"Ref": role_id} in policy["Properties"]["Roles"]:
                statements += policy["Properties"]["PolicyDocument"]["Statement"]
        return statements


def _render(value: Any) -> Any:
    """Fn::Join / Ref of pseudo parameters as plain strings, so ARNs compare as text."""
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(str(_render(p)) for p in parts)
    if isinstance(value, dict) and set(value) == {"Ref"} and str(value["Ref"]).startswith("AWS::"):
        return "${" + value["Ref"] + "}"
    return value


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _synthesize(env: Mapping[str, str], outdir: Path) -> CiSynth:
    app = new_app(str(outdir))
    # What the CDK CLI passes to `ci_app.py`: cdk.json's context (feature flags).
    for key, value in json.loads((REPO / "cdk.json").read_text())["context"].items():
        app.node.set_context(key, value)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    settings = load_ci_access_settings(env, app.node.get_all_context(), PINNED)
    stack = CiAccessStack(app, settings.stack_name, settings=settings, env=Environment(region=settings.region))
    nag_error = ""
    try:
        app.synth()
    except Exception as error:  # cdk-nag findings fail the synth; the nag test reports them
        nag_error = str(error)
    template = json.loads((outdir / f"{settings.stack_name}.template.json").read_text())
    return CiSynth(settings=settings, stack=stack, outdir=outdir, template_json=template, nag_error=nag_error)


def _trust(subjects: str | list[str], provider: Any) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Effect": "Allow",
                "Principal": {"Federated": provider},
                "Condition": {"StringEquals": {f"{HOST}:aud": "sts.amazonaws.com", f"{HOST}:sub": subjects}},
            }
        ],
    }
