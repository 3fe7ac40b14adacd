"""`make mirror-model HF_MODEL=ORG/NAME [HF_REVISION=main]`: copy a Hugging Face model to the S3 prefix of
MODEL_NEXT_SOURCE when set (the next revision, beside the served one), else MODEL_SOURCE's, with the mirror Job
(k8s_constructs/model_mirror.py) on a system node, show its progress while it runs, and print what it copied and
how long it took. Needs the deployed serving stack (its writer role, scoped to that same prefix)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import replace
from typing import Any

import cdk8s
import yaml

from k8s_constructs.model_mirror import MirrorJobChart, MirrorJobProps
from k8s_constructs.model_mirror_script import RESULT_MARKER
from k8s_constructs.ray_facts import NODE_TYPE_LABEL, selector
from k8s_constructs.synced_secrets import hf_token_of
from preflight.cluster_access import Kubectl
from settings import Settings
from settings.model_source import HUB_REPOSITORY
from stacks.model_access import MIRROR_SERVICE_ACCOUNT
from tools.entry import on_cluster, one_line_errors, project_settings

JOB_NAME = "model-mirror"
WORKER_LABEL = (NODE_TYPE_LABEL, "worker")
POLL_SECONDS = 10
# A pod that has printed nothing after this long is stuck (no room on a system node, the token volume not
# mounting, the image not pulling): say why instead of polling for hours.
SILENT_SECONDS = 900


def target_line(settings: Settings) -> str:
    """The tool's first line: which prefix the Job writes, and under which setting."""
    if settings.model_next_s3 is not None:
        return (
            f"mirror-model: writing MODEL_NEXT_SOURCE={settings.model_next_source} (the next revision); the served "
            f"MODEL_SOURCE={settings.model_source} is not written"
        )
    return f"mirror-model: writing MODEL_SOURCE={settings.model_source}"


def mirror_props(settings: Settings, repo: str, revision: str) -> MirrorJobProps:
    source = settings.mirror_s3
    if source is None:
        raise ValueError(
            f"MODEL_SOURCE={settings.model_source!r} is not an S3 prefix: set MODEL_SOURCE=s3://BUCKET/PREFIX (and"
            " deploy) first"
        )
    if not HUB_REPOSITORY.fullmatch(repo):
        raise ValueError(f"HF_MODEL={repo!r} is not allowed: a Hugging Face repository ORG/NAME")
    if not re.fullmatch(r"[\w.-]{1,128}", revision):
        raise ValueError(f"HF_REVISION={revision!r} is not allowed: a branch, tag or commit of the repository")
    token = hf_token_of(settings)
    return MirrorJobProps(
        name=JOB_NAME,
        namespace=settings.namespace,
        service_account=MIRROR_SERVICE_ACCOUNT,
        image=settings.dlc_image,
        repo=repo,
        revision=revision,
        destination=source.uri,
        region=settings.region,
        token_provider_class=token.provider_class if token else None,
    )


def served_now(settings: Settings, destination: str, kubectl: Kubectl) -> bool:
    """Whether the deployed RayService loads from `destination` and GPU workers run: an engine may start (a scale-up, a
    replaced node, a restarted replica) and download the prefix at any moment, so the Job must write nothing there."""
    found = kubectl(
        [
            "get",
            "rayservice",
            "-n",
            settings.namespace,
            settings.ray_service_name,
            "--ignore-not-found",
            "-o",
            "jsonpath={.spec.serveConfigV2}",
        ]
    )
    if found.returncode != 0:
        raise RuntimeError(
            f"cannot read RayService {settings.namespace}/{settings.ray_service_name}: {found.stderr.strip()[:200]}"
        )
    if not found.stdout.strip():
        return False
    sources = set()
    for app in yaml.safe_load(found.stdout).get("applications", []):
        for phase in ("prefill_config", "decode_config"):
            source = app.get("args", {}).get(phase, {}).get("model_loading_config", {}).get("model_source")
            if isinstance(source, dict):
                sources.add(str(source.get("bucket_uri", "")).rstrip("/"))
    if destination.rstrip("/") not in sources:
        return False
    running = kubectl(
        [
            "get",
            "pods",
            "-n",
            settings.namespace,
            "-l",
            selector(*WORKER_LABEL),
            "--field-selector=status.phase=Running",
            "-o",
            "name",
        ]
    )
    return running.returncode != 0 or bool(running.stdout.strip())  # unknown: as served


def manifest(props: MirrorJobProps) -> str:
    return cdk8s.App.of(MirrorJobChart(cdk8s.App(), "mirror", props=props)).synth_yaml()


def run_job(
    props: MirrorJobProps,
    kubectl: Kubectl,
    timeout_s: int,
    *,
    poll_s: float = POLL_SECONDS,
    silent_s: float = SILENT_SECONDS,
) -> dict[str, Any]:
    """Apply the Job, print its log as it grows, and return its MIRROR_RESULT (RuntimeError when it fails). The Job,
    its ConfigMap and its ServiceAccount are deleted afterwards, whatever the outcome (the log is printed)."""
    try:
        return _run(props, kubectl, timeout_s, poll_s=poll_s, silent_s=silent_s)
    finally:
        kubectl(
            [
                "delete",
                "-n",
                props.namespace,
                "job,configmap,serviceaccount",
                "-l",
                f"app.kubernetes.io/name={props.name}",
                "--ignore-not-found",
            ]
        )


def _stuck(props: MirrorJobProps, kubectl: Kubectl) -> str:
    """Why the Job's pod has not started: its waiting reason and the last event."""
    pod = f"job-name={props.name}"
    waiting = kubectl(
        [
            "get",
            "pods",
            "-n",
            props.namespace,
            "-l",
            pod,
            "-o",
            "jsonpath={..waiting.reason} {..conditions[?(@.status=='False')].message}",
        ]
    )
    events = kubectl(
        [
            "get",
            "events",
            "-n",
            props.namespace,
            "--field-selector",
            "type=Warning",
            "-o",
            "jsonpath={.items[-1:].message}",
        ]
    )
    return " ".join(x for x in (waiting.stdout.strip(), events.stdout.strip()) if x) or "no reason reported"


def _run(props: MirrorJobProps, kubectl: Kubectl, timeout_s: int, *, poll_s: float, silent_s: float) -> dict[str, Any]:
    job = ["-n", props.namespace, f"job/{props.name}"]
    kubectl(["delete", "job", "-n", props.namespace, props.name, "--ignore-not-found", "--wait=true"])
    applied = kubectl(["apply", "-f", "-"], manifest(props))
    if applied.returncode != 0:
        raise RuntimeError(f"cannot create Job {props.namespace}/{props.name}: {applied.stderr.strip()}")
    print(f"Job {props.namespace}/{props.name}: {props.repo}@{props.revision} -> {props.destination}", flush=True)
    start, shown, state = time.monotonic(), 0, ""
    while time.monotonic() - start < timeout_s:
        lines = kubectl(["logs", *job]).stdout.splitlines()
        for line in lines[shown:]:
            print(line, flush=True)
        shown = max(shown, len(lines))
        if not lines and time.monotonic() - start > silent_s:
            raise RuntimeError(f"the Job's pod has not started in {int(silent_s) // 60} min: {_stuck(props, kubectl)}")
        state = kubectl(["get", *job, "-o", "jsonpath={.status.succeeded},{.status.failed}"]).stdout.strip()
        if state.startswith("1") or state.endswith(",1"):
            break
        time.sleep(poll_s)
    else:
        raise RuntimeError(
            f"the Job did not finish in {timeout_s // 60} min: `kubectl logs -n {props.namespace} job/{props.name}`"
        )
    lines = kubectl(["logs", *job]).stdout.splitlines()
    for line in lines[shown:]:
        print(line, flush=True)
    results = [json.loads(line[len(RESULT_MARKER) :]) for line in lines if line.startswith(RESULT_MARKER)]
    if not state.startswith("1") or not results:
        errors = [line for line in lines if line.startswith("error:")]
        raise RuntimeError(
            errors[-1].removeprefix("error: ")
            if errors
            else f"the Job failed: `kubectl logs -n {props.namespace} job/{props.name}`"
        )
    result: dict[str, Any] = results[-1]
    return result


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get("HF_MODEL", ""))
    parser.add_argument("--revision", default=os.environ.get("HF_REVISION", "") or "main")
    parser.add_argument("--timeout-minutes", type=int, default=180)
    args = parser.parse_args(argv)
    if not args.model:
        print("error: name the model: make mirror-model HF_MODEL=ORG/NAME", file=sys.stderr)
        return 2
    settings = project_settings()
    try:
        props = mirror_props(settings, args.model, args.revision)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(target_line(settings), flush=True)

    def run(kubectl: Kubectl) -> dict[str, Any]:
        return run_job(
            replace(props, served=served_now(settings, props.destination, kubectl)), kubectl, args.timeout_minutes * 60
        )

    result, code = on_cluster(settings, run, timeout=600)
    if result is None:
        return code
    gib = result["bytes"] / 1024**3
    print(
        f"mirrored {result['repo']}@{result['commit'][:12]}: {result['files']} files, {gib:.1f} GiB in"
        f" {result['copy_seconds']:.0f} s (+{result['verify_seconds']:.0f} s verification) to {result['destination']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
