"""parliament (duo-labs) on every IAM policy: every identity policy of every template, in each configuration
that changes them and of the CI access stack, and the documented CloudFormation execution policies.

Each finding is fixed or accepted, with its reason, in accepted-findings.yaml; a new finding fails, and so
does an accepted one that no longer occurs.
"""

from __future__ import annotations

import inspect
import json
import string
from pathlib import Path
from typing import Any

import pytest

from tests import conftest, test_ci_access
from tests.conftest import REPO, Synth
from tests.iam_documents import findings_of, identity_policies
from tools.maintainer.accepted_findings import Finding, accepted, unaccepted, unused

ci = test_ci_access.ci  # the CI access stack, synthesized once for this module
# Every configuration tests/conftest.py synthesizes under a fixture of its own (the ones that reuse another's synth,
# s3/autoscaling/gcs of features_synth, add nothing); tests/test_setting_landing.py checks each setting's flip.
SYNTHS = tuple(
    name
    for name, fixture in vars(conftest).items()
    if name.endswith("_synth") and "synthesize(" in inspect.getsource(getattr(fixture, "__wrapped__", fixture))
)
assert {"default_synth", "endpoint_synth", "features_synth"} <= set(SYNTHS), SYNTHS  # the finding itself can fail
DOCUMENTED = sorted(p.name for p in (REPO / "docs").glob("cfn-execution-policy*.json"))


def documented_policy(name: str) -> dict[str, Any]:
    text = string.Template((REPO / "docs" / name).read_text()).substitute(
        ACCOUNT="123456789012", REGION="us-east-2", CLUSTER_NAME="ray-llm-multinode", CDK_QUALIFIER="hnb659fds"
    )
    document: dict[str, Any] = json.loads(text)
    return document


@pytest.fixture(scope="module")
def all_findings(request: pytest.FixtureRequest, ci: Any) -> list[Finding]:
    found: list[Finding] = []
    for synth_name in SYNTHS:
        synth: Synth = request.getfixturevalue(synth_name)
        templates = {synth.settings.stack_names[part]: template for part, template in synth.templates.items()}
        policies = list(identity_policies(templates, synth.settings.region))
        assert policies
        for where, document in policies:
            found += findings_of(where, document)
    for where, document in identity_policies({ci.settings.stack_name: ci.template_json}, ci.settings.region):
        found += findings_of(where, document)
    for name in DOCUMENTED:
        found += findings_of(f"docs/{name}", documented_policy(name))
    return found


def test_every_policy_is_clean_or_its_finding_accepted(all_findings: list[Finding]) -> None:
    assert [str(f) for f in unaccepted(all_findings, accepted())] == []


def test_no_accepted_finding_is_stale(all_findings: list[Finding]) -> None:
    assert [f"{e.check} at {e.where} ({e.subject})" for e in unused(all_findings, accepted(), "parliament")] == []


def test_actions_accepted_as_unknown_to_parliament_exist() -> None:
    """parliament's IAM data predates some actions: each accepted as unknown is in the Service Authorization
    Reference that cfn-lint ships (newer), so it is parliament that is behind, not a typo of ours."""
    import cfnlint

    reference = json.loads((Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json").read_text())
    unknown = [e.subject for e in accepted() if e.validator == "parliament" and e.check == "UNKNOWN_ACTION"]
    assert unknown
    for action in unknown:
        service, name = action.split(":")
        assert name.lower() in reference[service]["Actions"], action


def test_parliament_does_catch_a_bad_policy() -> None:
    bad = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket"}],
    }
    assert [f.check for f in findings_of("x", bad)] == ["RESOURCE_MISMATCH"]
    typo = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "eks:DescribeClusterz", "Resource": "*"}],
    }
    assert unaccepted(findings_of("docs/cfn-execution-policy-eks.json", typo), accepted())
