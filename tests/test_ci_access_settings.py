"""The CI access app's settings (settings/ci_access.py: defaults that follow the main app's, each bad value named)
and ci_app.py as the CDK CLI runs it: one line on a bad setting, two synths byte-identical."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from settings.ci_access import load_ci_access_settings
from settings.errors import SettingError
from settings.specs import SPECS
from tests.conftest import REPO, run_entry_point
from tests.pinned import PINNED, pinned_environ
from tests.test_ci_access import REPOSITORY

# Settings of the CI app that a developer's shell (or a GitHub runner: GITHUB_REPOSITORY) may hold.
CI_ENV_NAMES = (
    "GITHUB_REPOSITORY",
    "GITHUB_OIDC_PROVIDER_ARN",
    "CDK_QUALIFIER",
    "CI_SESSION_HOURS",
    "REGION",
    "CLUSTER_NAME",
)


# --- ci_app.py as the CDK CLI runs it ---------------------------------------------------------------


def _run_ci_app(env: Mapping[str, str], outdir: Path) -> subprocess.Popen[str]:
    tmp = outdir.parent / f"{outdir.name}-tmp"  # jsii unpacks its kernel here: no shared path may leak
    tmp.mkdir(parents=True)
    clean = {k: v for k, v in os.environ.items() if k not in CI_ENV_NAMES}
    full_env = clean | {"CDK_OUTDIR": str(outdir), "TMPDIR": str(tmp)} | pinned_environ(env)
    return subprocess.Popen(
        [sys.executable, "ci_app.py"], cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_ci_app_stops_with_one_line_on_a_bad_setting(tmp_path: Path) -> None:
    """The real process: exit status 2, one line on stderr, nothing else printed (the other bad settings below run
    its main() in this process)."""
    run = _run_ci_app({}, tmp_path / "out")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 2, err
    lines = [
        line for line in err.splitlines() if line.strip() and not line.startswith(("b'", 'b"'))
    ]  # jsii's Node warning, if any
    assert len(lines) == 1 and lines[0].startswith("error: GITHUB_REPOSITORY="), err
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({}, "GITHUB_REPOSITORY"),
        ({"GITHUB_REPOSITORY": "octo-org"}, "GITHUB_REPOSITORY"),
        ({"GITHUB_REPOSITORY": "octo-org/ray-llm:*"}, "GITHUB_REPOSITORY"),
        (
            {
                "GITHUB_REPOSITORY": REPOSITORY,
                "GITHUB_OIDC_PROVIDER_ARN": "arn:aws:iam::123456789012:oidc-provider/example.com",
            },
            "GITHUB_OIDC_PROVIDER_ARN",
        ),
        ({"GITHUB_REPOSITORY": REPOSITORY, "CI_SESSION_HOURS": "13"}, "CI_SESSION_HOURS"),
    ],
    ids=["missing", "no-slash", "wildcard", "other-provider", "session-too-long"],
)
def test_ci_app_main_stops_with_one_line_on_a_bad_setting(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    env: dict[str, str],
    setting: str,
) -> None:
    status, out, err = run_entry_point("ci_app", env, tmp_path / "out", monkeypatch, capfd, unset=CI_ENV_NAMES)
    assert status == 2, err
    lines = [
        line for line in err.splitlines() if line.strip() and not line.startswith(("b'", 'b"'))
    ]  # jsii's Node warning, if any
    assert len(lines) == 1 and lines[0].startswith(f"error: {setting}="), err
    assert "Traceback" not in err and out == ""


def test_two_synths_are_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """ci_app.py in a process of its own and its main() in this one: two Pythons, two jsii kernels (each with its
    own temporary directory), one output."""
    first, second = tmp_path / "a", tmp_path / "b"
    run = _run_ci_app({"GITHUB_REPOSITORY": REPOSITORY}, first)
    status, _, err = run_entry_point(
        "ci_app", {"GITHUB_REPOSITORY": REPOSITORY}, second, monkeypatch, capfd, unset=CI_ENV_NAMES
    )
    assert status == 0, err
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    names = sorted(p.name for p in first.iterdir())
    assert "ray-llm-multinode-ci-access.template.json" in names
    assert names == sorted(p.name for p in second.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(first, second, [n for n in names if (first / n).is_file()], shallow=False)
    assert mismatch == [] and errors == [], mismatch


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.defaults
def test_settings_defaults_follow_the_main_app() -> None:
    settings = load_ci_access_settings({"GITHUB_REPOSITORY": REPOSITORY}, {})
    main_defaults = {spec.env: spec.default for spec in SPECS}
    assert (settings.cluster_name, settings.region) == (main_defaults["CLUSTER_NAME"], main_defaults["REGION"])
    assert (settings.cdk_qualifier, settings.session_hours, settings.session_seconds) == ("hnb659fds", 2, 7200)
    assert settings.github_oidc_provider_arn == ""
    # CLUSTER_NAME and REGION are read where the main app reads them: `-c` / cdk.json context too.
    other = load_ci_access_settings(
        {"GITHUB_REPOSITORY": REPOSITORY}, {"cluster_name": "llm-a", "region": "us-east-2"}, PINNED
    )
    assert (other.stack_name, other.deploy_role_name) == ("llm-a-ci-access", "llm-a-ci-deploy-us-east-2")
    # The qualifier defaults to the one the CDK synthesizer of the main stacks reads from cdk.json.
    assert (
        load_ci_access_settings(
            {"GITHUB_REPOSITORY": REPOSITORY}, {"@aws-cdk/core:bootstrapQualifier": "abc123"}, PINNED
        ).cdk_qualifier
        == "abc123"
    )
    assert (
        load_ci_access_settings({"GITHUB_REPOSITORY": REPOSITORY, "CI_SESSION_HOURS": "12"}, {}, PINNED).session_seconds
        == 43200
    )


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"GITHUB_REPOSITORY": ""}, "GITHUB_REPOSITORY"),
        ({"GITHUB_REPOSITORY": "-octo/ray"}, "GITHUB_REPOSITORY"),
        ({"GITHUB_REPOSITORY": "octo/.."}, "GITHUB_REPOSITORY"),
        ({"GITHUB_REPOSITORY": "octo/ray/extra"}, "GITHUB_REPOSITORY"),
        ({"REGION": "us-east-9"}, "REGION"),
        ({"CLUSTER_NAME": "Ray_LLM"}, "CLUSTER_NAME"),
        (
            {"CLUSTER_NAME": "a" * 40, "REGION": "ap-southeast-2"},
            "CLUSTER_NAME",
        ),  # the role name would pass 64 characters
        (
            {"GITHUB_OIDC_PROVIDER_ARN": "arn:aws:iam::12345:oidc-provider/token.actions.githubusercontent.com"},
            "GITHUB_OIDC_PROVIDER_ARN",
        ),
        ({"CDK_QUALIFIER": "Has-Upper"}, "CDK_QUALIFIER"),
        ({"CDK_QUALIFIER": "elevenchars"}, "CDK_QUALIFIER"),
        ({"CI_SESSION_HOURS": "0"}, "CI_SESSION_HOURS"),
        ({"CI_SESSION_HOURS": "two"}, "CI_SESSION_HOURS"),
    ],
)
def test_each_bad_setting_names_itself(env: dict[str, str], setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        load_ci_access_settings({"GITHUB_REPOSITORY": REPOSITORY} | env, {}, PINNED)
    assert caught.value.env_name == setting
    assert "\n" not in str(caught.value)
