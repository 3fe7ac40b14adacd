"""cfn-lint and cdk-nag over every synthesized template, and synthesis determinism."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Synth, run_entry_point


def test_cfn_lint_reports_no_error(default_synth: Synth, features_synth: Synth) -> None:
    # The default, and the features that add resources of their own (S3 model roles, the Cluster Autoscaler, the GCS
    # store).
    templates = sorted(
        str(p) for synth in (default_synth, features_synth) for p in synth.outdir.glob("*.template.json")
    )
    assert len(templates) == 10
    # A template byte for byte the same as one before it (the features leave the network and cluster stacks as they
    # are) is the same input to cfn-lint: linted once (a second of the run).
    distinct: dict[bytes, str] = {}
    for template in templates:
        distinct.setdefault(Path(template).read_bytes(), template)
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--format", "parseable", *distinct.values()], capture_output=True, text=True, timeout=300
    )
    # Exit bits: 2 = error, 4 = warning, 8 = informational. Warnings are CDK's own (W3005 in its
    # generated Lambda roles) and are reported, not failed on.
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert errors == [] and not result.returncode & 2, result.stdout


@pytest.mark.parametrize("synth_name", ["default_synth", "features_synth", "hf_token_synth"])
def test_cdk_nag_aws_solutions_has_no_unacknowledged_finding(synth_name: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(synth_name)
    report = synth.nag_report
    findings = [
        f"{v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
    ]
    assert findings == [] and synth.nag_error == "", "\n".join(findings)


def test_every_nag_acknowledgement_has_a_reason(default_synth: Synth) -> None:
    acknowledged: dict[str, str] = {}
    for metadata_file in default_synth.outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata_file.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    acknowledged.update(
                        {f"{path} {rule}": reason for rule, reason in entry["data"].items() if "AwsSolutions" in rule}
                    )
    # The node roles' and the kubectl provider's managed policies, its wildcard and its runtime.
    assert len(acknowledged) >= 8, acknowledged
    assert all(len(reason) > 40 for reason in acknowledged.values())


def test_nag_catches_a_real_finding(tmp_path: Path) -> None:
    """The nag check can fail: an unencrypted, public bucket is reported."""
    from aws_cdk import App, Stack, Validations
    from aws_cdk import aws_s3 as s3
    from cdk_nag import AwsSolutionsChecks

    app = App(builtin_cloud_formation_validation=False, outdir=str(tmp_path))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    s3.Bucket(Stack(app, "Bad"), "Bucket")
    with pytest.raises(Exception, match="AwsSolutions-S1"):
        app.synth()


def _synth_in_subprocess(outdir: Path) -> subprocess.Popen[str]:
    # A temporary directory of its own per run: jsii unpacks its kernel there, and no path may leak.
    tmp = outdir.parent / f"{outdir.name}-tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items()} | {"CDK_OUTDIR": str(outdir), "TMPDIR": str(tmp)}
    return subprocess.Popen(
        [sys.executable, "app.py"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_synths_are_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """app.py in a process of its own and its main() in this one: two Pythons, two jsii kernels (each with its own
    temporary directory), one output."""
    first, second = tmp_path / "a", tmp_path / "b"
    run = _synth_in_subprocess(first)
    status, _, err = run_entry_point("app", {}, second, monkeypatch, capfd)
    assert status == 0, err
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(first, second, [n for n in names if (first / n).is_file()], shallow=False)
    assert mismatch == [] and errors == [], mismatch


def test_changing_one_setting_changes_only_what_it_should(default_synth: Synth, parked_synth: Synth) -> None:
    parked = parked_synth
    for stack in ("network", "cluster", "serving"):
        assert parked.templates[stack] == default_synth.templates[stack], stack
    before, after = default_synth.templates["gpu"]["Resources"], parked.templates["gpu"]["Resources"]
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert changed == [k for k, v in before.items() if v["Type"] == "AWS::EKS::Nodegroup"]
