"""What the workflow tests share: the workflows loaded, their jobs and steps, and a step's script run with bash as
the runner runs it."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent  # the venv's bin: check-jsonschema and zizmor come from requirements-dev.txt

EXPECTED = {"ci", "diff", "deploy", "destroy", "park"}
DEPLOY_ROLE = "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
DIFF_ROLE = "${{ vars.AWS_DIFF_ROLE_ARN }}"
PARK_ROLE = "${{ vars.AWS_PARK_ROLE_ARN }}"
AWS_CREDENTIALS = "aws-actions/configure-aws-credentials"
# Make targets that need AWS credentials: none may run before the credentials step of its job.
AWS_TARGETS = {"preflight", "deploy", "park", "destroy", "diff", "kubeconfig", "wait-ready", "verify", "status"}
# The queue shared by everything that changes the cluster.
CLUSTER_QUEUE = ("deploy", "destroy", "park")
# How GitHub runs `run:` with `shell: bash`.
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]


def load(name: str) -> dict[Any, Any]:
    """The workflow, parsed; a copy each time (a test may change it), parsed once per process (PyYAML builds the
    objects in Python: 140 loads took 2 s)."""
    data: dict[Any, Any] = copy.deepcopy(_parsed(name))
    return data


@cache
def _parsed(name: str) -> dict[Any, Any]:
    data: dict[Any, Any] = yaml.load((WORKFLOWS / f"{name}.yml").read_text(), Loader=yaml.CSafeLoader)
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


SCRIPTS = REPO / ".github" / "scripts"
SCRIPT_CALL = re.compile(r"^bash \.github/scripts/(?P<file>[\w.-]+\.sh)(?: (?P<args>[A-Z_][A-Z0-9_ ]*))?$")


def script_of(step: dict[str, Any]) -> str:
    """What a step runs: its `run:` text, or the text of the .github/scripts/ file it runs."""
    run = str(step["run"]).strip()
    match = SCRIPT_CALL.fullmatch(run)
    if not match:
        return str(step["run"])
    # The file's text, its arguments (plain words) given as the call gives them.
    return (f"set -- {match['args']}\n" if match["args"] else "") + (SCRIPTS / match["file"]).read_text()


def run_scripts(job: dict[str, Any]) -> list[str]:
    return [script_of(s) for s in job.get("steps", []) if "run" in s]


def make_calls(script: str) -> list[str]:
    return re.findall(r"\bmake\s+([a-z][a-z0-9-]*)\b", script)


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    matches: list[dict[str, Any]] = [s for s in job["steps"] if s.get("name") == name]
    assert len(matches) == 1, f"one step named {name!r}"
    return matches[0]


def run_step(step: dict[str, Any], tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a step's script with bash as the runner does, its `env:` replaced by `env`, GITHUB_* files in tmp_path."""
    script = tmp_path / "step.sh"
    script.write_text(script_of(step))
    base = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "LC_ALL", "TZ"}}
    files = {name: tmp_path / name.lower() for name in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_STEP_SUMMARY")}
    for path in files.values():
        path.write_text("")
    full_env = {**base, **{k: str(v) for k, v in files.items()}, **env}
    return subprocess.run([*BASH, str(script)], env=full_env, capture_output=True, text=True, cwd=tmp_path, check=False)


def outputs(tmp_path: Path, name: str = "github_output") -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (tmp_path / name).read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs}
