"""The GitHub Actions workflows: GitHub's schema, zizmor's audits (both offline), and the guards this repository relies
on (environments, one deploy queue, least permissions, the destroy confirmation, pinned actions, OIDC session length).

Scripts that decide something (the destroy confirmation, the nightly park, the settings export) are run here with bash,
as the runner runs them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent  # the venv's bin: check-jsonschema and zizmor come from requirements-dev.txt

EXPECTED = {"ci", "diff", "deploy", "destroy", "park"}
DEPLOY_ROLE = "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
DIFF_ROLE = "${{ vars.AWS_DIFF_ROLE_ARN }}"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials"
# Make targets that need AWS credentials: none may run before the credentials step of its job.
AWS_TARGETS = {"preflight", "deploy", "park", "destroy", "diff", "kubeconfig", "wait-ready", "verify", "status"}
# The queue shared by everything that changes the cluster.
CLUSTER_QUEUE = ("deploy", "destroy", "park")
# How GitHub runs `run:` with `shell: bash`.
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]


def load(name: str) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.safe_load((WORKFLOWS / f"{name}.yml").read_text())
    return data


def triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    """The `on:` mapping. YAML 1.1 (PyYAML) reads the bare key `on` as the boolean True."""
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    assert isinstance(on, dict), on
    return on


def jobs(name: str) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = load(name)["jobs"]
    return result


def all_jobs() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for name in sorted(EXPECTED):
        for job_id, job in jobs(name).items():
            yield name, job_id, job


def uses(step: dict[str, Any]) -> str:
    return str(step.get("uses", "")).split("@")[0]


def aws_step(job: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    found = [(i, s) for i, s in enumerate(job.get("steps", [])) if uses(s) == AWS_CREDENTIALS]
    assert len(found) <= 1, "one credentials step per job"
    return found[0] if found else None


def environment_name(job: dict[str, Any]) -> str | None:
    environment = job.get("environment")
    if isinstance(environment, dict):
        return str(environment["name"])
    return None if environment is None else str(environment)


def run_scripts(job: dict[str, Any]) -> list[str]:
    return [str(s["run"]) for s in job.get("steps", []) if "run" in s]


def make_calls(script: str) -> list[str]:
    return re.findall(r"\bmake\s+([a-z][a-z0-9-]*)\b", script)


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [s for s in job["steps"] if s.get("name") == name]
    assert len(matches) == 1, f"one step named {name!r}"
    return matches[0]


def run_step(step: dict[str, Any], tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a step's script with bash as the runner does, its `env:` replaced by `env`, GITHUB_* files in tmp_path."""
    script = tmp_path / "step.sh"
    script.write_text(str(step["run"]))
    base = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "LC_ALL", "TZ"}}
    files = {name: tmp_path / name.lower() for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")}
    for path in files.values():
        path.write_text("")
    full_env = {**base, **{k: str(v) for k, v in files.items()}, **env}
    return subprocess.run([*BASH, str(script)], env=full_env, capture_output=True, text=True, cwd=tmp_path, check=False)


def outputs(tmp_path: Path, name: str = "github_output") -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (tmp_path / name).read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}


# --- The offline checkers -------------------------------------------------------------------------------------------


def test_the_five_workflows() -> None:
    assert {p.stem for p in WORKFLOWS.glob("*.y*ml")} == EXPECTED
    assert not list(WORKFLOWS.glob("*.yaml")), "one extension: .yml"


def tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is missing from {BIN}: `make install-dev` installs requirements-dev.txt"
    return str(path)


def test_github_workflow_schema() -> None:
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    result = subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *files], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("persona", ["regular", "pedantic"])
def test_zizmor_has_no_findings(persona: str) -> None:
    # Offline: no GitHub token, no online audits.
    env = {k: v for k, v in os.environ.items() if k not in {"GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN"}}
    result = subprocess.run(
        [tool("zizmor"), "--offline", "--persona", persona, "--no-progress", str(WORKFLOWS)], capture_output=True, text=True, env=env, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout, result.stdout + result.stderr


def test_every_zizmor_ignore_says_why() -> None:
    """An ignored finding is justified where it is ignored: `# zizmor: ignore[rule] -- reason`."""
    for path in [*WORKFLOWS.glob("*.yml"), REPO / ".github" / "zizmor.yml"]:
        if not path.exists():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.search(r"zizmor:\s*ignore\[[^\]]*\](.*)", line)
            if match:
                assert len(match.group(1).strip(" -—:#")) >= 10, f"{path.name}:{number}: say why the finding is ignored"


# --- Triggers ---------------------------------------------------------------------------------------------------------


def test_triggers() -> None:
    assert set(triggers(load("ci"))) == {"pull_request", "push"}
    assert set(triggers(load("diff"))) == {"pull_request"}
    assert set(triggers(load("deploy"))) == {"push", "workflow_dispatch"}
    assert triggers(load("deploy"))["push"]["branches"] == ["main"]
    assert set(triggers(load("destroy"))) == {"workflow_dispatch"}, "destroy is manual only"
    assert set(triggers(load("park"))) == {"schedule", "workflow_dispatch"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_privileged_triggers(name: str) -> None:
    """pull_request_target and workflow_run run with secrets and a write token on code a fork controls."""
    assert not {"pull_request_target", "workflow_run"} & set(triggers(load(name)))
    assert "pull_request_target" not in (WORKFLOWS / f"{name}.yml").read_text()


def test_the_review_reruns_when_the_label_changes() -> None:
    types = triggers(load("ci"))["pull_request"]["types"]
    assert {"opened", "synchronize", "reopened", "labeled", "unlabeled"} <= set(types)


# --- Permissions ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_top_level_permissions_are_empty_or_read_only(name: str) -> None:
    permissions = load(name).get("permissions")
    assert permissions is not None, "top-level permissions must be set (the default token may write)"
    assert permissions in ({}, "read-all") or (isinstance(permissions, dict) and set(permissions.values()) <= {"read", "none"})


def test_each_job_is_granted_only_what_it_uses() -> None:
    for name, job_id, job in all_jobs():
        where = f"{name}.{job_id}"
        assert "permissions" in job, f"{where}: explicit permissions"
        permissions = job["permissions"] or {}
        assert isinstance(permissions, dict), where
        assert set(permissions.values()) <= {"read", "write", "none"}, where
        writes = {scope for scope, level in permissions.items() if level == "write"}
        allowed = set()
        if aws_step(job):
            allowed.add("id-token")
            assert permissions.get("id-token") == "write", f"{where}: assumes an AWS role, needs id-token: write"
        if (name, job_id) == ("ci", "comment"):
            allowed.add("pull-requests")
        assert writes <= allowed, f"{where}: writes {sorted(writes - allowed)} it does not need"
        assert permissions.get("contents") in (None, "read", "none"), where


def test_only_the_comment_job_writes_to_pull_requests() -> None:
    writers = [(n, j) for n, j, job in all_jobs() if (job.get("permissions") or {}).get("pull-requests") == "write"]
    assert writers == [("ci", "comment")]
    comment = jobs("ci")["comment"]
    assert not [s for s in comment["steps"] if uses(s) == "actions/checkout"], "the job that writes runs no pull-request code"


# --- AWS credentials, environments, session length -------------------------------------------------------------------


def test_aws_roles_environments_and_session_length() -> None:
    roles: dict[tuple[str, str], str] = {}
    for name, job_id, job in all_jobs():
        found = aws_step(job)
        if not found:
            assert environment_name(job) is None, f"{name}.{job_id}: an environment without AWS work"
            continue
        _, step = found
        with_ = step["with"]
        assert with_["aws-region"] == "${{ vars.REGION }}"
        roles[(name, job_id)] = with_["role-to-assume"]
        if with_["role-to-assume"] == DEPLOY_ROLE:
            # The default hour expires mid-deploy; the role's MaxSessionDuration is 2 h to match.
            duration = int(with_["role-duration-seconds"])
            assert duration >= 7200, f"{name}.{job_id}"
            assert job["timeout-minutes"] * 60 <= duration, f"{name}.{job_id}: the job must end before its credentials do"
    assert roles == {
        ("deploy", "deploy"): DEPLOY_ROLE,
        ("park", "park"): DEPLOY_ROLE,
        ("destroy", "destroy"): DEPLOY_ROLE,
        ("diff", "diff"): DIFF_ROLE,
    }
    # The OIDC subjects the roles trust: environment:deploy, environment:destroy, and pull_request for the diff.
    assert environment_name(jobs("deploy")["deploy"]) == "deploy"
    assert environment_name(jobs("park")["park"]) == "deploy"
    assert environment_name(jobs("destroy")["destroy"]) == "destroy"
    assert environment_name(jobs("diff")["diff"]) is None, "an environment would change the OIDC subject from pull_request"


def test_the_diff_runs_only_for_pull_requests_from_this_repository() -> None:
    job = jobs("diff")["diff"]
    condition = re.sub(r"\s+", " ", str(job["if"]))
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition
    scripts = "\n".join(run_scripts(job))
    assert "make diff" in scripts
    assert "--all" not in scripts, "cdk diff has no --all: with no stack names it diffs every stack"
    assert "--method template" in scripts, "read-only: the change-set method needs the deploy role"


def test_no_aws_work_before_the_credentials() -> None:
    for name, job_id, job in all_jobs():
        found = aws_step(job)
        limit = found[0] if found else len(job.get("steps", []))
        for step in job.get("steps", [])[:limit]:
            called = set(make_calls(str(step.get("run", ""))))
            assert not called & AWS_TARGETS, f"{name}.{job_id}: {sorted(called & AWS_TARGETS)} before the credentials"
            assert "aws " not in str(step.get("run", "")), f"{name}.{job_id}: aws CLI before the credentials"


# --- One queue for deploy, destroy and park ----------------------------------------------------------------------------


def test_deploy_destroy_and_park_share_one_queue_that_never_cancels() -> None:
    """Every job that assumes the deploy role is in one group that never cancels a running member."""
    groups = set()
    queued = set()
    others = []
    for name, job_id, job in all_jobs():
        found = aws_step(job)
        if name in CLUSTER_QUEUE:
            assert "concurrency" not in load(name), f"{name}: on the job, so a declined confirmation or a kept night stays out"
        if not (found and found[1]["with"]["role-to-assume"] == DEPLOY_ROLE):
            others.append(job.get("concurrency", {}).get("group"))
            continue
        concurrency = job["concurrency"]
        groups.add(concurrency["group"])
        assert concurrency["cancel-in-progress"] is False, f"{name}.{job_id}"
        queued.add(name)
    assert queued == set(CLUSTER_QUEUE)
    assert len(groups) == 1, groups
    (group,) = groups
    assert "${{" not in group, "a fixed name: the three workflows must compute the same group"
    assert group not in others, "only the jobs that change the cluster queue there"
    for name in EXPECTED - set(CLUSTER_QUEUE):
        assert load(name)["concurrency"]["group"] != group, f"{name} must not queue with (or replace) a deploy"


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


# --- Deploy and park ----------------------------------------------------------------------------------------------------


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


def test_park_deploys_zero_gpus_only_for_an_existing_cluster() -> None:
    job = jobs("park")["park"]
    assert job["needs"] == "decide"
    assert job["if"] == "needs.decide.outputs.park == 'true'"
    park = [s for s in job["steps"] if "make park" in str(s.get("run", ""))]
    assert len(park) == 1
    assert "--require-approval never" in park[0]["run"]
    assert park[0]["if"] == "steps.cluster.outputs.exists == 'true'", "a park after a destroy would build a new cluster"
    decide = jobs("park")["decide"]
    assert decide["permissions"] == {} and environment_name(decide) is None


def today_plus(days: int) -> str:
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=days)).isoformat()


@pytest.mark.parametrize(
    ("event", "keep_until", "parks"),
    [
        ("schedule", "", True),
        ("schedule", today_plus(-1), True),
        ("schedule", today_plus(0), False),  # kept through the named day (UTC)
        ("schedule", today_plus(3), False),
        ("schedule", "next friday", True),  # not a date: a typo must not keep the GPUs up
        ("schedule", "2026-1-5", True),
        ("workflow_dispatch", today_plus(3), True),  # asked by hand: park
        ("workflow_dispatch", "", True),
    ],
)
def test_the_park_decision(tmp_path: Path, event: str, keep_until: str, parks: bool) -> None:
    step = step_named(jobs("park")["decide"], "Park tonight?")
    assert step["env"] == {"KEEP_GPUS_UNTIL": "${{ vars.KEEP_GPUS_UNTIL }}", "EVENT_NAME": "${{ github.event_name }}"}
    result = run_step(step, tmp_path, {"KEEP_GPUS_UNTIL": keep_until, "EVENT_NAME": event})
    assert result.returncode == 0, result.stdout + result.stderr
    assert outputs(tmp_path) == {"park": "true" if parks else "false"}, result.stdout


# --- ci: lint, test, checkov and the review ------------------------------------------------------------------------------


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
    assert "git merge-base" in step["run"]
    assert "make review BASE=" in step["run"] and "REVIEW_FILE=review.md" in step["run"]
    assert "GITHUB_STEP_SUMMARY" in step["run"]
    assert step["env"]["ALLOWED"] == "${{ contains(github.event.pull_request.labels.*.name, 'allow-replacement') }}"
    assert "export ALLOW_REPLACEMENT=1" in step["run"]
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
def test_one_review_comment_updated_in_place(tmp_path: Path, existing: list[dict[str, Any]], expected_call: str) -> None:
    if not shutil.which("jq"):
        pytest.skip("jq (on every GitHub-hosted runner) is not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(GH_STUB)
    (bin_dir / "gh").chmod(0o755)
    (tmp_path / "comments.json").write_text(json.dumps(existing))
    # Longer than a comment may be, with a code block open at the cut.
    (tmp_path / "review.md").write_text("# Review\n\n```diff\n" + "".join(f"+ line {i}\n" for i in range(20000)) + "```\n")
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


# --- Settings from repository variables ----------------------------------------------------------------------------------


SETTINGS_STEP = "Settings from repository variables"


def settings_steps() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, job_id, job in all_jobs():
        for step in job.get("steps", []):
            if step.get("name") == SETTINGS_STEP:
                found.append((f"{name}.{job_id}", step))
    return found


def test_every_job_that_synthesizes_the_deployed_app_reads_the_same_settings() -> None:
    found = dict(settings_steps())
    assert set(found) == {"ci.review", "diff.diff", "deploy.deploy", "park.park", "destroy.destroy"}
    first = next(iter(found.values()))
    for where, step in found.items():
        assert step == first, f"{where}: the settings step differs"
    assert set(first["env"]) >= {"CLUSTER_NAME", "REGION", "ADMIN_PRINCIPAL_ARNS", "GPU_AZ"}
    for variable, value in first["env"].items():
        assert value == f"${{{{ vars.{variable} }}}}"
        assert variable in first["run"], f"{variable} is not exported"


def test_the_settings_step_exports_only_what_is_set(tmp_path: Path) -> None:
    step = settings_steps()[0][1]
    env = dict.fromkeys(step["env"], "")
    env.update(CLUSTER_NAME="ray-llm-prod", REGION="us-east-2")
    result = run_step(step, tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "github_env").read_text().splitlines() == ["CLUSTER_NAME=ray-llm-prod", "REGION=us-east-2"]
    # A line break would smuggle another variable into the job's environment.
    env["GPU_AZ"] = "us-east-2a\nLD_PRELOAD=/tmp/x.so"
    result = run_step(step, tmp_path, env)
    assert result.returncode != 0
    assert "LD_PRELOAD" not in (tmp_path / "github_env").read_text()


def test_required_variables_are_checked_before_deploying(tmp_path: Path) -> None:
    for name, job_id in [("deploy", "deploy"), ("park", "park"), ("destroy", "destroy")]:
        job = jobs(name)[job_id]
        step = step_named(job, "Required repository variables")
        credentials = aws_step(job)
        assert credentials and job["steps"].index(step) < credentials[0]
        good = {"CLUSTER_NAME": "c", "REGION": "us-east-2", "AWS_DEPLOY_ROLE_ARN": "arn:aws:iam::1:role/d", "ADMIN_PRINCIPAL_ARNS": "arn:aws:iam::1:role/d"}
        assert run_step(step, tmp_path, good).returncode == 0
        for missing in ("CLUSTER_NAME", "REGION", "AWS_DEPLOY_ROLE_ARN"):
            assert run_step(step, tmp_path, {**good, missing: ""}).returncode == 1, f"{name}: {missing}"


# --- Every job, every step ---------------------------------------------------------------------------------------------


PINNED = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})\s+#\s*v\d+(?:\.\d+){0,2}\s*$")


def test_actions_are_pinned_to_full_commit_shas_with_the_version_in_a_comment() -> None:
    shas: dict[str, set[str]] = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"^\s*(?:-\s+)?uses:", line):
                match = PINNED.match(line)
                assert match, f"{path.name}:{number}: pin to a 40-hex commit SHA with `# vX.Y.Z`: {line.strip()}"
                shas.setdefault(match["action"], set()).add(match["sha"])
    assert "actions/checkout" in shas and AWS_CREDENTIALS in shas
    for action, pins in shas.items():
        assert len(pins) == 1, f"{action} is pinned to {len(pins)} different commits"
    # And every `uses:` the parser sees was on such a line (no flow style hiding one).
    for name, job_id, job in all_jobs():
        assert "uses" not in job, f"{name}.{job_id}: reusable workflows are not expected here"
        for step in job.get("steps", []):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]


def test_checkouts_do_not_persist_credentials() -> None:
    for name, job_id, job in all_jobs():
        for step in job.get("steps", []):
            if uses(step) == "actions/checkout":
                assert step.get("with", {}).get("persist-credentials") is False, f"{name}.{job_id}"


def test_every_job_has_a_timeout() -> None:
    for name, job_id, job in all_jobs():
        timeout = job.get("timeout-minutes")
        assert isinstance(timeout, int) and 0 < timeout <= 180, f"{name}.{job_id}: timeout-minutes {timeout!r}"


def test_no_expression_inside_a_run_script() -> None:
    """Titles, branch names and inputs reach scripts through `env:` only: an expression is pasted into the script."""
    for name, job_id, job in all_jobs():
        for script in run_scripts(job):
            assert "${{" not in script, f"{name}.{job_id}: pass the value through env: {script[:80]!r}"
    for path in WORKFLOWS.glob("*.yml"):
        text = path.read_text()
        for untrusted in ("github.head_ref", "github.event.pull_request.title", "github.event.pull_request.body", "github.event.head_commit"):
            assert untrusted not in text, f"{path.name}: {untrusted}"


def test_every_make_target_the_workflows_call_exists() -> None:
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (REPO / "Makefile").read_text(), flags=re.M))
    called = set(jobs("ci")["checks"]["strategy"]["matrix"]["target"])
    for _, _, job in all_jobs():
        for script in run_scripts(job):
            called.update(make_calls(script))
    assert called - targets == set(), f"the Makefile lacks {sorted(called - targets)}"


def test_the_jobs_that_reach_the_cluster_can_run_in_the_vpc() -> None:
    """ENDPOINT_ACCESS=private answers only inside the VPC: every job that runs a make target needing the
    Kubernetes API (or the preflight, which refuses a GitHub-hosted runner then) takes its runner from
    CLUSTER_RUNNER; the others stay on GitHub's."""
    cluster_targets = {"deploy", "park", "destroy", "kubeconfig", "wait-ready", "verify", "status"}
    seen = set()
    for name in EXPECTED:
        for job_id, job in jobs(name).items():
            runs = " ".join(str(step.get("run", "")) for step in job.get("steps", []))
            needs_cluster = any(re.search(rf"\bmake {target}\b", runs) for target in cluster_targets)
            if needs_cluster:
                seen.add(f"{name}/{job_id}")
                assert job["runs-on"] == "${{ vars.CLUSTER_RUNNER || 'ubuntu-24.04' }}", (name, job_id)
            else:
                assert job["runs-on"] == "ubuntu-24.04", (name, job_id)
    assert {"deploy/deploy", "destroy/destroy", "park/park"} <= seen
