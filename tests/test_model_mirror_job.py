"""`make mirror-model`'s Job and tool: the Job's manifest (kubernetes-validate, the writer ServiceAccount on a
system node, the program as its ConfigMap) and tools/mirror_model.py's handling of its progress and log. The
program itself, against a stand-in Hub and moto's S3: tests/test_model_mirror.py."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from k8s_constructs import model_mirror_script as script
from k8s_constructs.model_mirror import MirrorJobProps
from tests.conftest import settings_for
from tests.test_model_mirror import BUCKET, REPO
from tools import mirror_model


def _objects(props: MirrorJobProps) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(mirror_model.manifest(props)))


def test_the_job_runs_on_a_system_node_under_the_writer_service_account() -> None:
    settings = settings_for({"MODEL_SOURCE": f"s3://{BUCKET}/qwen3.5-9b", "HF_TOKEN_SECRET_NAME": "prod/hf-token"})
    objects = _objects(mirror_model.mirror_props(settings, REPO, "main"))
    for obj in objects:
        kubernetes_validate.validate(obj, "1.35", strict=True)
    account, config_map, job = objects
    assert (account["kind"], account["metadata"]["name"]) == ("ServiceAccount", "model-mirror")
    assert config_map["data"]["model_mirror_script.py"] == Path(script.__file__).read_text()
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "model-mirror" and pod["automountServiceAccountToken"] is False
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ] == [{"key": "role", "operator": "In", "values": ["system"]}]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert (
        env["DEST_URI"] == f"s3://{BUCKET}/qwen3.5-9b"
        and env["HF_REPO"] == REPO
        and env["AWS_REGION"] == settings.region
    )
    assert env["HF_TOKEN_FILE"] == "/mnt/secrets-store/token"
    (token_volume,) = [v for v in pod["volumes"] if "csi" in v]
    assert token_volume["csi"]["volumeAttributes"] == {"secretProviderClass": "hf-token"}
    assert pod["containers"][0]["image"] == settings.dlc_image


@pytest.mark.parametrize(
    ("env", "model", "revision", "fragment"),
    [
        ({}, REPO, "main", "is not an S3 prefix: set MODEL_SOURCE=s3://BUCKET/PREFIX"),
        ({"MODEL_SOURCE": "s3://example-models/q"}, "not a repo", "main", "HF_MODEL='not a repo' is not allowed"),
        ({"MODEL_SOURCE": "s3://example-models/q"}, REPO, "a b", "HF_REVISION='a b' is not allowed"),
    ],
)
def test_bad_mirror_input_is_one_line(env: dict[str, str], model: str, revision: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        mirror_model.mirror_props(settings_for(env), model, revision)


class FakeKubectl:
    """kubectl as the Job runs: the log grows over three polls, then the Job succeeds (or fails)."""

    def __init__(self, log: list[str], *, succeeds: bool) -> None:
        self.log, self.succeeds, self.polls, self.calls = log, succeeds, 0, []

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        out = ""
        if args[0] == "logs":
            out = "\n".join(self.log[: 1 + self.polls])
        elif args[0] == "get":
            self.polls += 1
            out = ("1," if self.succeeds else ",1") if self.polls >= 3 else ","
        return subprocess.CompletedProcess(args, 0, out, "")


def test_the_tool_prints_progress_as_it_comes_and_returns_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    props = mirror_model.mirror_props(settings_for({"MODEL_SOURCE": "s3://example-models/q"}), REPO, "main")
    result = {"repo": REPO, "files": 4, "bytes": 10, "copy_seconds": 1.0, "verify_seconds": 1.0}
    kubectl = FakeKubectl(
        ["[1/4] config.json", "[2/4] model", "copied", script.RESULT_MARKER + json.dumps(result)], succeeds=True
    )
    assert mirror_model.run_job(props, kubectl, 60, poll_s=0) == result
    out = capsys.readouterr().out
    assert out.index("[1/4] config.json") < out.index("[2/4] model") < out.index("copied")
    assert ["apply", "-f", "-"] in kubectl.calls
    # Afterwards nothing of it is left: the Job, its ConfigMap and its ServiceAccount, by their label.
    assert kubectl.calls[-1] == [
        "delete",
        "-n",
        "inference",
        "job,configmap,serviceaccount",
        "-l",
        "app.kubernetes.io/name=model-mirror",
        "--ignore-not-found",
    ]


def test_a_pod_that_never_starts_is_reported_with_its_reason() -> None:
    props = mirror_model.mirror_props(settings_for({"MODEL_SOURCE": "s3://example-models/q"}), REPO, "main")

    class Stuck(FakeKubectl):
        def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            self.calls.append(args)
            if args[:2] == ["get", "pods"]:
                return subprocess.CompletedProcess(args, 0, "ContainerCreating", "")
            if args[:2] == ["get", "events"]:
                return subprocess.CompletedProcess(args, 0, "MountVolume.SetUp failed for volume hf-token", "")
            return subprocess.CompletedProcess(args, 0, "" if args[0] == "logs" else ",", "")

    kubectl = Stuck([], succeeds=False)
    with pytest.raises(
        RuntimeError, match=r"has not started in 0 min: ContainerCreating MountVolume\.SetUp failed for volume hf-token"
    ):
        mirror_model.run_job(props, kubectl, 60, poll_s=0, silent_s=0)
    assert kubectl.calls[-1][0] == "delete"


def test_a_failed_job_reports_its_error_line() -> None:
    props = mirror_model.mirror_props(settings_for({"MODEL_SOURCE": "s3://example-models/q"}), REPO, "main")
    kubectl = FakeKubectl(
        ["[1/4] config.json", "error: config.json: the Hub sent 3 bytes that do not match"], succeeds=False
    )
    with pytest.raises(RuntimeError, match=r"^config\.json: the Hub sent 3 bytes that do not match$"):
        mirror_model.run_job(props, kubectl, 60, poll_s=0)


class ClusterKubectl:
    """kubectl against a deployed RayService (its serveConfigV2) and its worker pods."""

    def __init__(self, serve_config: str, running_workers: list[str]) -> None:
        self.serve_config, self.running_workers, self.calls = serve_config, running_workers, []

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        if args[:2] == ["get", "rayservice"]:
            return subprocess.CompletedProcess(args, 0, self.serve_config, "")
        if args[:2] == ["get", "pods"]:
            assert "ray.io/node-type=worker" in args and "--field-selector=status.phase=Running" in args
            return subprocess.CompletedProcess(args, 0, "\n".join(self.running_workers), "")
        raise AssertionError(args)


def test_the_tool_tells_the_job_when_the_running_engines_read_the_prefix() -> None:
    from k8s_constructs.ray_service import build_rayservice_chart

    settings = settings_for({"MODEL_SOURCE": "s3://example-models/q"})
    deployed = build_rayservice_chart(settings).serve_config_yaml
    props = mirror_model.mirror_props(settings, REPO, "main")
    assert mirror_model.served_now(settings, props.destination, ClusterKubectl(deployed, ["pod/ray-llm-decode-x"]))
    assert not mirror_model.served_now(
        settings, props.destination, ClusterKubectl(deployed, [])
    )  # parked: no worker runs
    assert not mirror_model.served_now(
        settings, "s3://example-models/other", ClusterKubectl(deployed, ["pod/ray-llm-decode-x"])
    )
    assert not mirror_model.served_now(
        settings, props.destination, ClusterKubectl("", ["pod/ray-llm-decode-x"])
    )  # no RayService
    (job,) = [o for o in _objects(dataclasses.replace(props, served=True)) if o["kind"] == "Job"]
    assert {"name": "MIRROR_SERVED", "value": "1"} in job["spec"]["template"]["spec"]["containers"][0]["env"]


def test_the_job_and_the_preflight_agree_on_the_completion_object() -> None:
    from settings import model_source

    assert (script.COMPLETION_OBJECT, script.MIRRORED_FROM) == (
        model_source.COMPLETION_OBJECT,
        model_source.MIRRORED_FROM,
    )
