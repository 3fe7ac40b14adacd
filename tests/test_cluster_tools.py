"""`make wait-ready` and `make kuberay-crds` on recorded objects of KubeRay 1.7's shape."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from preflight.redeploy_live import KUBERAY_CRD_LABEL
from tests.conftest import settings_for
from tools.cluster import kuberay_crd_documents, ray_service_verdict, wait_ready


def _ray_service(generation: int, observed: int | None, ready: str | None, app: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if ready is not None:
        status["conditions"] = [
            {"type": "Ready", "status": ready, "reason": "NonZeroServeEndpoints" if ready == "True" else "Initializing"}
        ]
    if app is not None:
        status["activeServiceStatus"] = {"applicationStatuses": {"qwen": {"status": app}}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "ray-llm", "generation": generation},
        "status": status,
    }


def test_verdicts() -> None:
    assert ray_service_verdict(_ray_service(1, None, None)) == (
        False,
        "KubeRay has not seen generation 1 yet (observed None)",
    )
    assert ray_service_verdict(_ray_service(1, 1, "False", "DEPLOYING")) == (
        False,
        "Ready=False (Initializing); qwen DEPLOYING",
    )
    assert ray_service_verdict(_ray_service(1, 1, "True", "RUNNING")) == (
        True,
        "Ready=True (NonZeroServeEndpoints); qwen RUNNING",
    )
    # A serve-config change: the old Ready=True is for generation 1, not the new spec.
    assert ray_service_verdict(_ray_service(2, 1, "True", "RUNNING"))[0] is False


class Recorded:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.calls = 0

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        obj = self.objects[min(self.calls, len(self.objects) - 1)]
        self.calls += 1
        return subprocess.CompletedProcess(args, 0, json.dumps(obj), "")


def test_wait_ready_waits_until_ready_for_this_generation(capsys: Any) -> None:
    kubectl = Recorded(
        [
            _ray_service(2, 1, "True", "RUNNING"),
            _ray_service(2, 2, "False", "DEPLOYING"),
            _ray_service(2, 2, "True", "RUNNING"),
        ]
    )
    now = [0.0]
    assert (
        wait_ready(settings_for(), kubectl, 600, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
        == 0
    )
    out = capsys.readouterr().out
    assert "[00:00] RayService inference/ray-llm: KubeRay has not seen generation 2 yet" in out
    assert "[00:30] RayService inference/ray-llm: Ready=True" in out


def test_wait_ready_times_out_with_the_command_to_look_closer(capsys: Any) -> None:
    kubectl = Recorded([_ray_service(1, 1, "False", "DEPLOYING")])
    now = [0.0]
    assert (
        wait_ready(settings_for(), kubectl, 60, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
        == 1
    )
    assert "kubectl describe rayservice -n inference ray-llm" in capsys.readouterr().err


def test_kuberay_crds_are_the_repositorys_labelled_with_their_version() -> None:
    documents = list(
        yaml.load_all(kuberay_crd_documents(settings_for()), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    )
    assert sorted(d["metadata"]["name"] for d in documents) == ["rayclusters.ray.io", "rayservices.ray.io"]
    assert all(d["metadata"]["labels"][KUBERAY_CRD_LABEL] == "1.7.0" for d in documents)
