"""The workflows' steps that decide something, run with bash as the runner runs them: the destroy confirmation, the
nightly park, the review comment, the settings export; and what the deploy, park and ci jobs run."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.workflow_helpers import (
    CLUSTER_QUEUE,
    REPO,
    all_jobs,
    aws_step,
    environment_name,
    jobs,
    load,
    outputs,
    run_scripts,
    run_step,
    script_of,
    step_named,
    triggers,
    uses,
)

# --- Destroy: the confirmation ----------------------------------------------------------------------------------------


CONFIRM_STEP = "The confirmation must equal CLUSTER_NAME"


def test_destroy_asks_for_the_cluster_name_before_anything() -> None:
    confirm_input = triggers(load("destroy"))["workflow_dispatch"]["inputs"]["confirm"]
    assert confirm_input["required"] is True
    assert confirm_input["type"] == "string"
    destroy_jobs = jobs("destroy")
    confirm = destroy_jobs["confirm"]
    # The gate: no token, no environment (no reviewer asked), no actions, no AWS.
    assert confirm["permissions"] == {}
    assert environment_name(confirm) is None
    assert [s for s in confirm["steps"] if "uses" in s] == []
    # Every other job waits for it, and checks again before its first step that could touch anything.
    for job_id, job in destroy_jobs.items():
        if job_id == "confirm":
            continue
        needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
        assert "confirm" in needs, job_id
        assert job["steps"][0]["name"] == CONFIRM_STEP, f"{job_id}: the check comes first"
        assert job["steps"][0] == step_named(confirm, CONFIRM_STEP)
    step = step_named(confirm, CONFIRM_STEP)
    assert step["env"] == {"CONFIRM": "${{ inputs.confirm }}", "CLUSTER_NAME": "${{ vars.CLUSTER_NAME }}"}


@pytest.mark.parametrize(
    ("confirm", "cluster", "passes"),
    [
        ("ray-llm-prod", "ray-llm-prod", True),
        ("ray-llm-pro", "ray-llm-prod", False),
        ("ray-llm-prod ", "ray-llm-prod", False),
        ("RAY-LLM-PROD", "ray-llm-prod", False),
        ("", "ray-llm-prod", False),
        ("", "", False),  # CLUSTER_NAME not set: nothing to confirm against
        ("yes", "", False),
    ],
)
def test_the_destroy_confirmation_script(tmp_path: Path, confirm: str, cluster: str, passes: bool) -> None:
    step = step_named(jobs("destroy")["confirm"], CONFIRM_STEP)
    result = run_step(step, tmp_path, {"CONFIRM": confirm, "CLUSTER_NAME": cluster})
    assert (result.returncode == 0) is passes, result.stdout + result.stderr


def test_destroy_runs_make_destroy_with_force() -> None:
    job = jobs("destroy")["destroy"]
    scripts = run_scripts(job)
    assert any('make destroy ARGS="--force"' in s for s in scripts)
    kubeconfig = next(i for i, s in enumerate(scripts) if "make kubeconfig" in s)
    destroy = next(i for i, s in enumerate(scripts) if "make destroy" in s)
    assert kubeconfig < destroy, "kubectl must reach the cluster to remove what Kubernetes created"


# --- Deploy and park --------------------------------------------------------------------------------------------------


FORBIDDEN_DEPLOY_FLAGS = re.compile(r"--no-rollback|--rollback[= ]false|(^|\s)-R(\s|$)|--express")


@pytest.mark.parametrize("name", CLUSTER_QUEUE)
def test_never_without_rollback(name: str) -> None:
    for job in jobs(name).values():
        for script in run_scripts(job):
            assert not FORBIDDEN_DEPLOY_FLAGS.search(script), f"{name}: a failed replacement must roll back"


def test_deploy_steps() -> None:
    job = jobs("deploy")["deploy"]
    scripts = run_scripts(job)
    deploy = next(i for i, s in enumerate(scripts) if "make deploy" in s)
    args = re.search(r'make deploy ARGS="([^"]*)"', scripts[deploy])
    assert args, scripts[deploy]
    assert "--require-approval never" in args.group(1)
    assert "--progress events" in args.group(1)
    assert "--outputs-file cdk-outputs.json" in args.group(1)
    # The outputs file is kept, also when a later step fails.
    upload = [s for s in job["steps"] if uses(s) == "actions/upload-artifact"]
    assert [u["with"]["path"] for u in upload] == ["cdk-outputs.json", "verify-result.json"]
    assert all("cancelled()" in u["if"] for u in upload)
    # The post-deploy gate after the deploy: kubectl configured, then `make verify`.
    kubeconfig = next(i for i, s in enumerate(scripts) if "make kubeconfig" in s)
    gate = next(i for i, s in enumerate(scripts) if "make verify" in s)
    assert deploy < kubeconfig < gate
    assert "VERIFY_TIMEOUT=" in scripts[gate]


def test_the_park_jobs() -> None:
    park_jobs = jobs("park")
    assert "0 * * * *" in [c["cron"] for c in triggers(load("park"))["schedule"]]
    decide = park_jobs["decide"]
    # No credentials, no environment, no install: an hour with nothing due asks nobody.
    assert decide["permissions"] == {"contents": "read"} and environment_name(decide) is None
    assert aws_step(decide) is None and not [s for s in decide["steps"] if uses(s) == "actions/setup-python"]
    scale = park_jobs["scale"]
    assert scale["needs"] == "decide"
    assert scale["if"] == "needs.decide.outputs.action == 'park' || needs.decide.outputs.action == 'unpark'"
    assert [s for s in run_scripts(scale) if "make " in s] == [], "the EKS API only: nothing is synthesized"
    park = park_jobs["park"]
    assert park["needs"] == ["decide", "scale"] and park["if"] == "needs.scale.outputs.autoscaled == 'true'"
    deploys = [s for s in park["steps"] if re.match(r"make (park|deploy) ", str(s.get("run", "")))]
    assert [(script_of(s).split()[1], s["if"]) for s in deploys] == [
        ("park", "steps.cluster.outputs.exists == 'true' && needs.decide.outputs.action == 'park'"),
        ("deploy", "steps.cluster.outputs.exists == 'true' && needs.decide.outputs.action == 'unpark'"),
    ], "a park or unpark after a destroy would build a new cluster"
    assert all("--require-approval never" in script_of(s) for s in deploys)


def _decide_step(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    step = step_named(jobs("park")["decide"], "What falls due this hour?")
    assert step["env"] == {"KEEP_GPUS_UNTIL": "${{ vars.KEEP_GPUS_UNTIL }}", "REQUESTED": "${{ inputs.action }}"}
    script = tmp_path / "step.sh"
    script.write_text(script_of(step))
    (tmp_path / "out").write_text("")
    base = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(tmp_path / "out")}
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        env={**base, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return outputs(tmp_path, "out")


@pytest.mark.parametrize(
    ("requested", "schedule", "action"),
    [
        ("", {"PARK_AT": "", "UNPARK_AT": ""}, "nothing"),  # a scheduled run with nothing ever due
        ("park", {"PARK_AT": ""}, "park"),  # a manual run does what it was asked
        ("unpark", {}, "unpark"),
    ],
)
def test_the_decide_step(tmp_path: Path, requested: str, schedule: dict[str, str], action: str) -> None:
    """The step as the runner runs it (the decision itself: tests/test_park_schedule.py)."""
    assert _decide_step(tmp_path, {"KEEP_GPUS_UNTIL": "", "REQUESTED": requested, **schedule}) == {"action": action}


def _fake_python(tmp_path: Path, code: int) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "python"
    fake.write_text(f'#!/bin/sh\necho "python $*"\nexit {code}\n')
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "ACTION": "park"}


@pytest.mark.parametrize(("code", "passes"), [(0, True), (3, True), (1, False), (2, False)])
def test_the_scale_step_leaves_an_autoscaled_nodegroup_to_the_deploy(tmp_path: Path, code: int, passes: bool) -> None:
    step = step_named(jobs("park")["scale"], "Park or unpark")
    assert step["env"] == {"ACTION": "${{ needs.decide.outputs.action }}"}
    result = run_step(step, tmp_path, _fake_python(tmp_path, code))
    assert "python -m tools.park_schedule park" in result.stdout
    assert (result.returncode == 0) is passes, result.stdout + result.stderr


# --- ci: lint, test, checkov and the review ---------------------------------------------------------------------------


def test_ci_runs_lint_test_and_checkov() -> None:
    checks = jobs("ci")["checks"]
    assert set(checks["strategy"]["matrix"]["target"]) == {"lint", "test", "checkov"}
    assert checks["strategy"]["fail-fast"] is False
    assert run_scripts(checks) == ['make "$TARGET"']
    assert not [job_id for job_id, job in jobs("ci").items() if aws_step(job)], "no AWS credentials in ci"


def test_the_review() -> None:
    review = jobs("ci")["review"]
    checkout = next(s for s in review["steps"] if uses(s) == "actions/checkout")
    assert checkout["with"]["fetch-depth"] == 0, "make review needs the history for the merge base"
    step = step_named(review, "make review")
    script = script_of(step)
    assert "git merge-base" in script
    assert "make review BASE=" in script and "REVIEW_FILE=review.md" in script
    assert "GITHUB_STEP_SUMMARY" in script
    assert step["env"]["ALLOWED"] == "${{ contains(github.event.pull_request.labels.*.name, 'allow-replacement') }}"
    assert "export ALLOW_REPLACEMENT=1" in script
    # The check fails after the report is published, not before.
    assert review["steps"][-1]["name"] == "Protected replacements need the allow-replacement label"
    comment = jobs("ci")["comment"]
    assert comment["needs"] == "review"
    assert "head.repo.full_name == github.repository" in comment["if"], "forks get a read-only token"
    script = step_named(comment, "Create or update the review comment")["run"]
    assert "--method PATCH" in script and "<!-- make-review -->" in script, "one comment, updated in place"
    assert "limit=" in script and "job summary" in script, "too long: cut, with a link to the job summary"


def test_the_review_script_fails_the_check_only_on_a_failed_review(tmp_path: Path) -> None:
    step = step_named(jobs("ci")["review"], "Protected replacements need the allow-replacement label")
    (tmp_path / "review-status").write_text("0\n")
    assert run_step(step, tmp_path, {}).returncode == 0
    (tmp_path / "review-status").write_text("2\n")
    result = run_step(step, tmp_path, {})
    assert result.returncode == 1 and "allow-replacement" in result.stdout


GH_STUB = """#!/usr/bin/env bash
# Stands in for `gh api`: lists the comments in $COMMENTS_JSON (through the caller's --jq, as gh does), records writes.
set -euo pipefail
args=("$@")
if [[ " $* " == *" --paginate "* ]]; then
  for i in "${!args[@]}"; do [ "${args[$i]}" = --jq ] && filter="${args[$((i + 1))]}"; done
  jq -r "$filter" "$COMMENTS_JSON"
  exit 0
fi
for i in "${!args[@]}"; do [ "${args[$i]}" = --method ] && method="${args[$((i + 1))]}"; done
echo "$method ${args[-3]}" >> "$GH_CALLS"
cat > "$GH_BODY"
"""


@pytest.mark.parametrize(
    ("existing", "expected_call"),
    [
        ([], "POST repos/o/r/issues/7/comments"),
        (
            [
                {"id": 1, "user": {"login": "someone"}, "body": "<!-- make-review --> quoted by a person"},
                {"id": 2, "user": {"login": "github-actions[bot]"}, "body": "another bot comment"},
                {"id": 3, "user": {"login": "github-actions[bot]"}, "body": "<!-- make-review -->\\nold report"},
            ],
            "PATCH repos/o/r/issues/comments/3",
        ),
    ],
)
def test_one_review_comment_updated_in_place(
    tmp_path: Path, existing: list[dict[str, Any]], expected_call: str
) -> None:
    if not shutil.which("jq"):
        pytest.skip("jq (on every GitHub-hosted runner) is not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(GH_STUB)
    (bin_dir / "gh").chmod(0o755)
    (tmp_path / "comments.json").write_text(json.dumps(existing))
    # Longer than a comment may be, with a code block open at the cut.
    (tmp_path / "review.md").write_text(
        "# Review\n\n```diff\n" + "".join(f"+ line {i}\n" for i in range(20000)) + "```\n"
    )
    step = step_named(jobs("ci")["comment"], "Create or update the review comment")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "COMMENTS_JSON": str(tmp_path / "comments.json"),
        "GH_CALLS": str(tmp_path / "calls"),
        "GH_BODY": str(tmp_path / "body.json"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "99",
        "GITHUB_RUN_ATTEMPT": "1",
        "PR_NUMBER": "7",
        "HEAD_SHA": "a" * 40,
        "GH_TOKEN": "unused",
    }
    result = run_step(step, tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [expected_call]
    body = json.loads((tmp_path / "body.json").read_text())["body"]
    assert body.startswith("<!-- make-review -->\n# Review")
    assert len(body) <= 65536, "GitHub's limit for a comment"
    assert "[job summary](https://github.com/o/r/actions/runs/99/attempts/1)" in body
    assert body.count("```") % 2 == 0, "the code block cut open is closed"


# --- Settings from repository variables -------------------------------------------------------------------------------


SETTINGS_STEP = "Settings from repository variables"


def settings_steps() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, job_id, job in all_jobs():
        for step in job.get("steps", []):
            if step.get("name") == SETTINGS_STEP:
                found.append((f"{name}.{job_id}", step))
    return found


SETTINGS_ACTION = REPO / ".github" / "actions" / "settings-from-variables"


def test_every_job_that_synthesizes_the_deployed_app_reads_the_same_settings() -> None:
    """One composite action, the same in every job, after the checkout (a local action needs the repository)."""
    found = dict(settings_steps())
    assert set(found) == {
        "ci.review",
        "diff.diff",
        "deploy.deploy",
        "park.decide",
        "park.scale",
        "park.park",
        "destroy.destroy",
    }
    for where, step in found.items():
        assert step == {
            "name": SETTINGS_STEP,
            "uses": "./.github/actions/settings-from-variables",
            "with": {"variables": "${{ toJSON(vars) }}"},
        }, where
    for name, job_id, job in all_jobs():
        names = [s.get("name") for s in job.get("steps", [])]
        if SETTINGS_STEP in names:
            checkout = next(i for i, s in enumerate(job["steps"]) if uses(s) == "actions/checkout")
            assert checkout < names.index(SETTINGS_STEP), f"{name}.{job_id}"
    action = yaml.safe_load((SETTINGS_ACTION / "action.yml").read_text())
    assert action["runs"]["using"] == "composite" and action["inputs"]["variables"]["required"] is True


def _export(tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "VARIABLES": json.dumps(variables), "GITHUB_ENV": str(tmp_path / "github_env")}
    (tmp_path / "github_env").write_text("")
    return subprocess.run(
        ["python3", str(SETTINGS_ACTION / "export_settings.py")], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_settings_step_exports_only_what_is_set(tmp_path: Path) -> None:
    result = _export(
        tmp_path,
        {
            "CLUSTER_NAME": "ray-llm-prod",
            "REGION": "us-east-2",
            "GPU_AZ": "",
            "AWS_DEPLOY_ROLE_ARN": "arn:aws:iam::1:role/x",
        },
    )
    assert result.returncode == 0, result.stderr
    # Not a setting (the role ARN) and empty (GPU_AZ): not passed.
    assert (tmp_path / "github_env").read_text().splitlines() == ["CLUSTER_NAME=ray-llm-prod", "REGION=us-east-2"]
    # A line break would smuggle another variable into the job's environment.
    result = _export(tmp_path, {"GPU_AZ": "us-east-2a\nLD_PRELOAD=/tmp/x.so"})
    assert result.returncode != 0 and "holds a line break" in result.stdout
    assert "LD_PRELOAD" not in (tmp_path / "github_env").read_text()


def test_the_exported_settings_are_settings_of_the_app() -> None:
    import ast

    from settings.specs import SPECS

    tree = ast.parse((SETTINGS_ACTION / "export_settings.py").read_text())
    (names,) = [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SETTINGS"
    ]
    exported = {e.value for e in names.elts}  # type: ignore[attr-defined]
    # Derived from the specs (`make docs-tables` writes the tuple): what differs between accounts.
    assert exported == {s.env for s in SPECS if s.ci_variable}
    assert {"CLUSTER_NAME", "REGION", "ADMIN_PRINCIPAL_ARNS", "ENDPOINT_ACCESS"} <= exported


def test_required_variables_are_checked_before_deploying(tmp_path: Path) -> None:
    for name, job_id in [("deploy", "deploy"), ("park", "park"), ("destroy", "destroy")]:
        job = jobs(name)[job_id]
        step = step_named(job, "Required repository variables")
        credentials = aws_step(job)
        assert credentials and job["steps"].index(step) < credentials[0]
        good = {
            "CLUSTER_NAME": "c",
            "REGION": "us-east-2",
            "AWS_DEPLOY_ROLE_ARN": "arn:aws:iam::1:role/d",
            "ADMIN_PRINCIPAL_ARNS": "arn:aws:iam::1:role/d",
        }
        assert run_step(step, tmp_path, good).returncode == 0
        for missing in ("CLUSTER_NAME", "REGION", "AWS_DEPLOY_ROLE_ARN"):
            assert run_step(step, tmp_path, {**good, missing: ""}).returncode == 1, f"{name}: {missing}"
    # The scheduled park's job needs its own role, not the deploy role.
    step = step_named(jobs("park")["scale"], "Required repository variables")
    good = {"CLUSTER_NAME": "c", "REGION": "us-east-2", "AWS_PARK_ROLE_ARN": "arn:aws:iam::1:role/p"}
    result = run_step(step, tmp_path, good)
    assert result.returncode == 0 and "ADMIN_PRINCIPAL_ARNS" not in result.stdout, result.stdout
    for missing in ("CLUSTER_NAME", "REGION", "AWS_PARK_ROLE_ARN"):
        result = run_step(step, tmp_path, {**good, missing: ""})
        assert result.returncode == 1 and f"set the repository variable {missing}" in result.stdout, missing
