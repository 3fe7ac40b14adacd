"""Elastic capacity as Ray's own code decides it: Ray's bin-packer on the node types Ray's KubeRay code
(`_derive_autoscaling_config_from_ray_cr`) derives from the synthesized RayCluster, i.e. what a new node can
take, and the whole chain on a real Ray 2.58 cluster with Ray's autoscaler (its fake multi-node provider;
tests/autoscaling_scenario.py). The synth, settings and preflight: tests/test_autoscaling.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from k8s_constructs.ray_service import build_rayservice_chart
from tests.conftest import AUTOSCALER_PROOF, scenario_result, settings_for
from tests.ray_local import OBJECT_STORE_BYTES
from tests.test_autoscaling import ELASTIC, _llm_configs
from tests.validators import ray_serve_llm_placement


def _node_types(rs: dict[str, Any]) -> dict[str, Any]:
    """The worker node types Ray's KubeRay autoscaler derives from the RayCluster (its own code)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    config = _derive_autoscaling_config_from_ray_cr(
        {"metadata": {"name": "ray-llm", "namespace": "inference"}, "spec": rs["spec"]["rayClusterConfig"]}
    )
    return {name: t for name, t in config["available_node_types"].items() if name != "headgroup"}


# --- what a new node can take: Ray's own bin-packer on Ray's own node types -----------------------------------------


def test_a_new_node_of_the_phases_group_takes_its_bundles_and_only_with_the_fix() -> None:
    from ray.autoscaler._private.resource_demand_scheduler import get_bin_pack_residual

    elastic = _ray_service_of(ELASTIC)
    types = _node_types(elastic)
    assert set(types) == {"prefill", "decode"}
    for phase, llm in _llm_configs(elastic).items():
        bundles, _ = ray_serve_llm_placement(llm)
        own, other = types[phase]["resources"], types["decode" if phase == "prefill" else "prefill"]["resources"]
        assert get_bin_pack_residual([dict(own)], bundles)[0] == [], (phase, own, bundles)
        assert get_bin_pack_residual([dict(other)], bundles)[0] != [], (
            "a phase's bundle must not fit the other phase's node"
        )
    # The control: the same phase with accelerator_type, as a fixed deployment has it.
    fixed = _llm_configs(_ray_service_of({}))["decode"]
    bundles, _ = ray_serve_llm_placement(fixed)
    assert any(k.startswith("accelerator_type:") for b in bundles for k in b)
    assert get_bin_pack_residual([dict(types["decode"]["resources"])], bundles)[0] != []


def _ray_service_of(env: dict[str, str]) -> dict[str, Any]:
    return build_rayservice_chart(settings_for(env)).ray_service.to_json()


# --- the whole chain, on a real Ray cluster with Ray's autoscaler ---------------------------------------------------


def scenario_spec() -> dict[str, Any]:
    """The scenario's input: our RayService's node types, bundles and autoscaling configs, with a test's delays."""
    from ray.serve._private.constants import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S

    rs = _ray_service_of({"PREFILL_MAX_REPLICAS": "2", "DECODE_MAX_REPLICAS": "2"})
    phases, node_types, spread_s = {}, {}, 20
    for phase, llm in _llm_configs(rs).items():
        bundles, strategy = ray_serve_llm_placement(llm)
        scaling = dict(llm["deployment_config"]["autoscaling_config"])
        # Ours, with the delays of a test (seconds, not Ray's 30 s up and 10 min down).
        scaling.update({"upscale_delay_s": 1, "downscale_delay_s": 5, "look_back_period_s": 2})
        draining = llm["deployment_config"].get("graceful_shutdown_timeout_s")  # ours, unchanged
        phases[phase] = {
            "bundles": bundles,
            "strategy": strategy,
            "autoscaling_config": scaling,
            "graceful_shutdown_timeout_s": draining,
        }
    for name, node_type in _node_types(rs).items():
        # The node type as derived; Ray's object store kept small (four raylets on a CI machine) and memory left
        # out (a fake node would try to reserve the GPU node's 113 GiB; no bundle asks for memory).
        resources = {k: v for k, v in node_type["resources"].items() if k != "memory"} | {
            "object_store_memory": OBJECT_STORE_BYTES
        }
        node_types[name] = {**node_type, "resources": resources}
    control, _ = ray_serve_llm_placement(_llm_configs(_ray_service_of({}))["decode"])
    serve_args = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"][0]["args"]
    spec = {
        "ingress": serve_args["ingress_deployment_config"],  # ours, as synthesized
        "node_types": node_types,
        "phase_resources": {"prefill": "pd_prefill", "decode": "pd_decode"},
        "phases": phases,
        "min_nodes": ["decode", "prefill"],
        "decode_in_flight": 3 * phases["decode"]["autoscaling_config"]["target_ongoing_requests"] // 2,
        "idle_timeout_minutes": 0.05,
        "timeout_s": 120,
        "control_bundles": control,
        # Streams that outlive Ray Serve's default graceful_shutdown_timeout_s (20 s) counted from the replica's drain,
        # which begins a downscale delay after the load ends, a little after they start (20 s more for a loaded
        # machine's slower decisions and the streams' spread): with Ray's default they are cut. The test holds each
        # stream on the removed replica to its tokens after the drain began.
        "streams": 4,
        # Up to the target's worth while they wait for the router to use the new replica: once the load ends they are
        # the only ongoing requests, and no more than one replica's target lets the scale-down go on.
        "max_streams": phases["decode"]["autoscaling_config"]["target_ongoing_requests"],
        "spread_s": spread_s,
        "stream_s": (
            DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S + phases["decode"]["autoscaling_config"]["downscale_delay_s"] + spread_s
        ),
    }
    return spec


def test_load_on_decode_adds_a_decode_node_only_and_the_cluster_returns_to_its_minimum(tmp_path: Path) -> None:
    from ray.serve._private.constants import DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S

    spec = scenario_spec()
    # Started in the background at the session's first test when this test was collected (tests/conftest.py,
    # BACKGROUND: it waits most of its minute); run here otherwise.
    seen = scenario_result(AUTOSCALER_PROOF, spec, tmp_path / "spec.json")
    print(json.dumps({"log": seen["log"], "streams": seen["streams"]}))
    assert seen["nodes_at_start"] == ["decode", "prefill"], seen
    assert seen["grew"] and seen["both_running"], seen
    # One more node, of the decode group; the new replica runs on a decode node; prefill untouched.
    assert seen["nodes_under_load"] == ["decode", "decode", "prefill"], seen
    assert seen["decode_replica_phases"] == ["decode", "decode"] and seen["prefill_replicas_under_load"] == 1, seen
    assert seen["shrank"] and seen["nodes_after_load"] == ["decode", "prefill"], seen
    # The ingress's replicas (two, no CPU: issue 27) ran throughout and kept no added node from leaving.
    assert seen["ingress_replicas"] == seen["ingress_replicas_after_load"] == 2, seen
    # Every stream completed, those on the replica the scale-down removed too, and one of those went on streaming for
    # longer after the drain began than Ray Serve's default timeout would have let it.
    assert all(stream["tokens"] == spec["stream_s"] for stream in seen["streams"]), seen
    removed = [stream for stream in seen["streams"] if stream["removed_replica"]]
    assert any(stream["tokens_while_draining"] > DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S for stream in removed), seen
    # Without the fix (the bundle carries accelerator_type): still pending after longer than the autoscaler took to
    # add the decode node under load (the scenario waits that long at least), and no node launched for it.
    assert not seen["control_placed"] and seen["control_nodes_added"] == 0, seen
