"""The GitHub Actions workflows: GitHub's schema, zizmor's audits (both offline), and the guards this repository relies
on (environments, one deploy queue, least permissions, the destroy confirmation, pinned actions, OIDC session length).

Scripts that decide something (the destroy confirmation, the nightly park, the settings export) are run here with bash,
as the runner runs them.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.workflow_helpers import (
    AWS_CREDENTIALS,
    AWS_TARGETS,
    BIN,
    CLUSTER_QUEUE,
    DEPLOY_ROLE,
    DIFF_ROLE,
    EXPECTED,
    PARK_ROLE,
    REPO,
    WORKFLOWS,
    all_jobs,
    aws_step,
    environment_name,
    jobs,
    load,
    make_calls,
    run_scripts,
    triggers,
    uses,
)

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
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    actions = sorted(str(p) for p in (REPO / ".github" / "actions").glob("*/action.yml"))
    assert actions
    result = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", *actions],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("persona", ["regular", "pedantic"])
def test_zizmor_has_no_findings(persona: str) -> None:
    # Offline: no GitHub token, no online audits.
    env = {k: v for k, v in os.environ.items() if k not in {"GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN"}}
    result = subprocess.run(
        [
            tool("zizmor"),
            "--offline",
            "--persona",
            persona,
            "--no-progress",
            str(WORKFLOWS),
            str(REPO / ".github" / "actions"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
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
    assert permissions in ({}, "read-all") or (
        isinstance(permissions, dict) and set(permissions.values()) <= {"read", "none"}
    )


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
    assert not [s for s in comment["steps"] if uses(s) == "actions/checkout"], (
        "the job that writes runs no pull-request code"
    )


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
            assert job["timeout-minutes"] * 60 <= duration, (
                f"{name}.{job_id}: the job must end before its credentials do"
            )
        if with_["role-to-assume"] == PARK_ROLE:
            # No role-duration-seconds: the park role's hour outlasts the job.
            assert "role-duration-seconds" not in with_ and job["timeout-minutes"] <= 60, f"{name}.{job_id}"
    assert roles == {
        ("deploy", "deploy"): DEPLOY_ROLE,
        ("park", "park"): DEPLOY_ROLE,
        ("park", "scale"): PARK_ROLE,
        ("destroy", "destroy"): DEPLOY_ROLE,
        ("diff", "diff"): DIFF_ROLE,
    }
    # The OIDC subjects the roles trust: environment:deploy, environment:destroy, and pull_request for the diff.
    assert environment_name(jobs("deploy")["deploy"]) == "deploy"
    assert environment_name(jobs("park")["park"]) == "deploy"
    # The one environment without reviewers: its role may only scale the GPU nodegroup (tests/test_ci_access.py).
    assert environment_name(jobs("park")["scale"]) == "schedule"
    assert environment_name(jobs("destroy")["destroy"]) == "destroy"
    assert environment_name(jobs("diff")["diff"]) is None, (
        "an environment would change the OIDC subject from pull_request"
    )


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


# --- One queue for deploy, destroy and park ---------------------------------------------------------------------------


def test_deploy_destroy_and_park_share_one_queue_that_never_cancels() -> None:
    """Every job that assumes the deploy (or park) role is in one group that never cancels a running member."""
    groups = set()
    queued = set()
    others = []
    for name, job_id, job in all_jobs():
        found = aws_step(job)
        if name in CLUSTER_QUEUE:
            assert "concurrency" not in load(name), (
                f"{name}: on the job, so a declined confirmation or a kept night stays out"
            )
        if not (found and found[1]["with"]["role-to-assume"] in (DEPLOY_ROLE, PARK_ROLE)):
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


# --- Every job, every step --------------------------------------------------------------------------------------------


PINNED = re.compile(
    r"^\s*(?:-\s+)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})\s+#\s*v\d+(?:\.\d+){0,2}\s*$"
)


def test_actions_are_pinned_to_full_commit_shas_with_the_version_in_a_comment() -> None:
    shas: dict[str, set[str]] = {}
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"^\s*(?:-\s+)?uses:", line) and not re.match(
                r"^\s*(?:-\s+)?uses:\s*\./", line
            ):  # ./: this repository's own
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
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}|\./\.github/actions/[\w-]+", step["uses"]), step[
                    "uses"
                ]


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
    for path in [*WORKFLOWS.glob("*.yml"), *(REPO / ".github" / "scripts").glob("*.sh")]:
        text = path.read_text()
        assert path.suffix != ".sh" or "${{" not in text, path.name  # GitHub does not expand a file: a mistake
        for untrusted in (
            "github.head_ref",
            "github.event.pull_request.title",
            "github.event.pull_request.body",
            "github.event.head_commit",
        ):
            assert untrusted not in text, f"{path.name}: {untrusted}"


def test_every_script_file_is_run_by_a_step_and_stops_on_the_first_error() -> None:
    """The scripts in .github/scripts/ run as the runner runs an inline one (bash -eo pipefail), each used."""
    from tests.workflow_helpers import SCRIPT_CALL, SCRIPTS

    called = {
        m["file"]
        for _, _, job in all_jobs()
        for s in job.get("steps", [])
        if "run" in s and (m := SCRIPT_CALL.fullmatch(str(s["run"]).strip()))
    }
    files = {p.name for p in SCRIPTS.glob("*.sh")}
    assert files and called == files
    for name in files:
        lines = (SCRIPTS / name).read_text().splitlines()
        assert lines[0] == "#!/usr/bin/env bash" and "set -eo pipefail" in lines[:4], name
    # A script file runs from the checkout: only in jobs that check the repository out first.
    for name, job_id, job in all_jobs():
        steps = job.get("steps", [])
        for index, step in enumerate(steps):
            if "run" in step and SCRIPT_CALL.fullmatch(str(step["run"]).strip()):
                assert any(uses(s) == "actions/checkout" for s in steps[:index]), f"{name}.{job_id}"


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
