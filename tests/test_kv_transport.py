"""KV_TRANSPORT: NIXL's backend for the KV cache between the phases, libfabric (over EFA, the default) or ucx, in the
serve config of both phases, the GPU workers' EFA request and environment, make verify's expectation, the synth's
notice, and the one-host check (which runs UCX anyway and so changes nothing for ucx)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_constructs.kv_path import kv_path
from settings import SettingError
from tests.conftest import run_entry_point, settings_for
from tools.local_check.plan import rayservice_manifest
from tools.local_check.shape import GIB, Host, Target, patch_serve_config, serve_config
from tools.verify_steps import check_kv_path, check_nixl

UCX = {"KV_TRANSPORT": "ucx"}


@cache
def manifest(transport: str) -> dict[str, Any]:
    """The RayService of the pinned configuration with KV_TRANSPORT, built once (a cdk8s synth)."""
    return rayservice_manifest(settings_for({"KV_TRANSPORT": transport}))


def _worker(rayservice: dict[str, Any]) -> dict[str, Any]:
    groups = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    container: dict[str, Any] = groups[0]["template"]["spec"]["containers"][0]
    return container


def _backends(rayservice: dict[str, Any]) -> list[list[str]]:
    args = serve_config(rayservice)["applications"][0]["args"]
    return [
        args[f"{phase}_config"]["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"]["backends"]
        for phase in ("prefill", "decode")
    ]


def test_libfabric_by_default_and_ucx_when_asked_in_both_phases_and_the_workers() -> None:
    default, ucx = manifest("libfabric"), manifest("ucx")
    assert _backends(default) == [["LIBFABRIC"], ["LIBFABRIC"]]
    assert _backends(ucx) == [["UCX"], ["UCX"]]
    for rayservice, efa in ((default, True), (ucx, False)):
        worker = _worker(rayservice)
        env = {e["name"]: e.get("value") for e in worker["env"]}
        assert ("vpc.amazonaws.com/efa" in worker["resources"]["limits"]) is efa
        assert ("vpc.amazonaws.com/efa" in worker["resources"]["requests"]) is efa
        assert (env.get("FI_PROVIDER") == "efa") is efa
        # The log levels that make libfabric and NIXL name the KV path at start (make verify's kv-path step).
        assert (env.get("FI_LOG_LEVEL") == "warn" and env.get("NIXL_LOG_LEVEL") == "INFO") is efa
        assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # Nothing else of the RayService differs but those: the serve config's backends, the EFA request, and the
    # libfabric environment (FI_PROVIDER and the log levels of make verify's kv-path step).
    stripped = yaml.safe_load(yaml.safe_dump(default).replace("LIBFABRIC", "UCX"))
    for group in stripped["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        container["env"] = [
            e for e in container["env"] if e["name"] not in {"FI_PROVIDER", "FI_LOG_LEVEL", "NIXL_LOG_LEVEL"}
        ]
        for amounts in container["resources"].values():
            amounts.pop("vpc.amazonaws.com/efa")
    assert stripped == ucx


def test_a_transport_change_is_a_ray_cluster_change() -> None:
    from k8s_constructs.ray_service import build_rayservice_chart

    fingerprints = {build_rayservice_chart(settings_for(env)).ray_cluster_fingerprint for env in ({}, UCX)}
    assert len(fingerprints) == 2  # the preflight's ray-cluster-change refuses it over a running RayService


def test_another_value_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingError) as refused:
        settings_for({"KV_TRANSPORT": "tcp"})
    assert str(refused.value) == "KV_TRANSPORT='tcp' is not allowed: libfabric or ucx"


def test_make_verify_expects_the_configured_backend() -> None:
    libfabric, ucx = settings_for(), settings_for(UCX)
    assert check_nixl(libfabric, {"prefill-0": "LIBFABRIC", "decode-0": "LIBFABRIC"}).ok
    assert not check_nixl(libfabric, {"prefill-0": "LIBFABRIC", "decode-0": "UCX"}).ok
    assert check_nixl(ucx, {"prefill-0": "UCX", "decode-0": "UCX"}).ok
    assert not check_nixl(ucx, {"prefill-0": "LIBFABRIC", "decode-0": "UCX"}).ok


def test_make_verify_reads_the_kv_path_of_either_transport() -> None:
    """With ucx the kv-path step says UCX and still fails on vLLM's failed transfer during the completion, naming
    libfabric as the other path; with libfabric a path of TCP fails, and no worker at all fails."""
    libfabric, ucx = settings_for(), settings_for(UCX)
    failed = "ERROR 12-06 01:47:11 [base_worker.py:832] NIXL transfer failure: transfer_failed."
    quiet = {"decode-0": kv_path("", over_efa=False)}
    assert check_kv_path(ucx, quiet, quiet).ok
    assert "decode-0: UCX (KV_TRANSPORT=ucx)" in check_kv_path(ucx, quiet, quiet).detail
    refused = check_kv_path(ucx, quiet, {"decode-0": kv_path(failed, over_efa=False)})
    assert not refused.ok and "try KV_TRANSPORT=libfabric" in refused.look_closer
    tcp = {"decode-0": kv_path("Discovered 1 tcp devices (TCP fallback)")}
    assert not check_kv_path(libfabric, tcp, tcp).ok
    assert not check_kv_path(libfabric, {}, {}).ok


def test_the_one_host_check_runs_ucx_as_it_is() -> None:
    """Without EFA the check changes LIBFABRIC to UCX (a `changed` line); KV_TRANSPORT=ucx needs no change."""
    host = Host(1, "NVIDIA H100 80GB HBM3", 80 * GIB, (9, 0), efa=False, cutlass_dsl=True)
    target = Target("L4", 23_034 * 1024 * 1024, True)
    changed = {}
    for name in ("libfabric", "ucx"):
        config = serve_config(manifest(name))
        patched, changes = patch_serve_config(
            config, host=host, target=target, model_path="/m", weights="model", shared_gpu=False, kv_cache_bytes=None
        )
        changed[name] = [c.what for c in changes if "backends" in c.what]
        assert _backends({"spec": {"serveConfigV2": yaml.safe_dump(patched)}}) == [["UCX"], ["UCX"]]
    assert changed == {"libfabric": ["kv_connector_extra_config.backends"], "ucx": []}


def test_the_synth_says_what_ucx_costs_on_an_efa_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """app.py's notices, without the synth behind them (stacks and assembly stubbed: they are tested elsewhere)."""
    import app

    monkeypatch.setattr(app, "build_stacks", lambda *args: None)
    monkeypatch.setattr(app, "synthesize_or_say_why", lambda *args: 0)
    notices = {}
    for name, env in (("libfabric", {}), ("ucx", UCX)):
        status, _, stderr = run_entry_point("app", env, tmp_path / name, monkeypatch, capfd)
        assert status == 0
        notices[name] = [line for line in stderr.splitlines() if line.startswith("notice: KV_TRANSPORT=")]
    assert notices["libfabric"] == []
    (line,) = notices["ucx"]
    assert "g6.8xlarge's EFA carries no KV cache" in line and "over TCP" in line
