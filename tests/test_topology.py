"""Phase-pinned prefill/decode topology: each phase on GPU nodes of its own, on any EFA GPU type.

Two kinds of proof: the synthesized RayService passes KubeRay 1.7's own rules (validation.go), and a
real local multi-node Ray cluster (Ray 2.58, no GPUs needed: the stand-in nodes advertise the same
GPU count and custom resources the worker groups would) places the placement groups Ray Serve LLM would
build from our serveConfigV2 only on the nodes of their phase, and leaves one group too many pending.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from k8s_constructs.ray_service import build_rayservice_chart
from k8s_constructs.serve_config import PHASE_RESOURCES
from settings import Settings
from settings.sizing import gpu_worker_resources
from tests.conftest import Synth, settings_for
from tests.ray_local import OBJECT_STORE_BYTES, QUIET_HEAD
from tests.test_serving import _ray_service
from tests.validators import crd_errors, kuberay_cluster_errors, ray_serve_errors, ray_serve_llm_placement

G6_12 = {"GPU_NODE_TYPE": "g6.12xlarge"}
P5_TP8 = {"GPU_NODE_TYPE": "p5.48xlarge", "TENSOR_PARALLEL_SIZE": "8", "REGION": "us-east-2", "GPU_AZ": "us-east-2b"}


def _rayservice(settings: Settings) -> dict[str, Any]:
    obj: dict[str, Any] = build_rayservice_chart(settings).ray_service.to_json()
    return obj


def _llm_configs(ray_service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    args = yaml.safe_load(ray_service["spec"]["serveConfigV2"])["applications"][0]["args"]
    return {"prefill": args["prefill_config"], "decode": args["decode_config"]}


# --- KubeRay's and Ray's own rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "env", [{}, G6_12, P5_TP8, {"GPU_NODE_TYPE": "g6.12xlarge", "TENSOR_PARALLEL_SIZE": "2", "PREFILL_REPLICAS": "3"}]
)
def test_every_topology_passes_kuberay_and_ray(env: dict[str, str]) -> None:
    ray_service = _rayservice(settings_for(env))
    assert crd_errors(ray_service) == []
    assert kuberay_cluster_errors(ray_service["spec"]["rayClusterConfig"]) == []
    assert ray_serve_errors(yaml.safe_load(ray_service["spec"]["serveConfigV2"])) == []


def test_kuberay_rules_catch_resources_given_twice(default_synth: Synth) -> None:
    cluster = _ray_service(default_synth)["spec"]["rayClusterConfig"]
    cluster["workerGroupSpecs"][0]["rayStartParams"] = {"num-gpus": "1"}
    assert kuberay_cluster_errors(cluster) == [
        "resource fields should not be set in both rayStartParams and Resources for prefill group"
    ]


def test_g6_12xlarge_alone_pins_each_phase_to_its_own_node() -> None:
    settings = settings_for(G6_12)
    groups = {g["groupName"]: g for g in _rayservice(settings)["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    assert {name: (g["replicas"], g["resources"]) for name, g in groups.items()} == {
        "prefill": (1, {"GPU": "4", "pd_prefill": "4"}),
        "decode": (1, {"GPU": "4", "pd_decode": "4"}),
    }
    assert settings.gpu_node_count == 2


def test_the_head_offers_no_cpu_and_the_workers_keep_room_for_serve() -> None:
    for env in ({}, G6_12, P5_TP8):
        settings = settings_for(env)
        ray_service = _rayservice(settings)
        assert ray_service["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
        worker_cpus = gpu_worker_resources(settings.gpu_node, observability=settings.observability).cpu_milli // 1000
        for llm in _llm_configs(ray_service).values():
            bundles, _ = ray_serve_llm_placement(llm)
            engine_cpus = sum(b.get("CPU", 0) for b in bundles) * settings.engines_per_node
            assert worker_cpus - engine_cpus >= 2, (settings.gpu_node.name, worker_cpus, engine_cpus)


# --- a real Ray cluster ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[dict[str, Any]]:
    """One local Ray cluster (a CPU-only head, as the RayCluster's) for every placement test of this module: each test
    places its groups on stand-ins of its GPU worker pods and removes its placement groups after; the stand-ins stay
    for the next test when it needs the same pods (started and stopped only when the pods change)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args=QUIET_HEAD,
    )
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield {"ray": ray, "cluster": cluster, "pods": None, "nodes": []}
    finally:
        ray.shutdown()
        cluster.shutdown()


def _nodes_of(ray: Any, pg: Any, timeout: float) -> set[str] | None:
    """The nodes the placement group's bundles landed on; None while it is still pending after `timeout` s."""
    try:
        ray.get(pg.ready(), timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        return None
    return set(ray.util.placement_group_table(pg)["bundles_to_node_id"].values())


def _stand_ins(ray_cluster: dict[str, Any], settings: Settings, groups: list[dict[str, Any]]) -> dict[str, str]:
    """Stand-ins of the GPU worker pods, one node each (same GPUs, CPUs and phase resources as the worker groups and
    Ray's auto-detected accelerator type): those of the test before when the pods are the same. Each node's phase."""
    cluster = ray_cluster["cluster"]
    worker_cpus = gpu_worker_resources(settings.gpu_node, observability=settings.observability).cpu_milli // 1000
    pods = [
        (
            group["groupName"],
            int(group["resources"]["GPU"]),
            {name: float(value) for name, value in group["resources"].items() if name != "GPU"}
            | {f"accelerator_type:{settings.gpu_node.gpu_model}": 1.0},
        )
        for group in groups
        for _ in range(group["replicas"])
    ]
    if ray_cluster["pods"] != (worker_cpus, pods):
        ray_cluster["pods"] = None
        while ray_cluster["nodes"]:
            cluster.remove_node(ray_cluster["nodes"].pop())
        for _, gpus, resources in pods:
            ray_cluster["nodes"].append(
                cluster.add_node(
                    num_cpus=worker_cpus, num_gpus=gpus, resources=resources, object_store_memory=OBJECT_STORE_BYTES
                )
            )
        cluster.wait_for_nodes()
        ray_cluster["pods"] = (worker_cpus, pods)
    return {node.node_id: phase for node, (phase, _, _) in zip(ray_cluster["nodes"], pods, strict=True)}


def _place(ray_cluster: dict[str, Any], settings: Settings) -> tuple[dict[str, list[set[str] | None]], dict[str, str]]:
    """On stand-ins of the GPU worker pods, create every placement group Ray Serve LLM would, plus one more per phase,
    and report the nodes each group landed on (None: still pending) and each node's phase."""
    ray = ray_cluster["ray"]
    ray_service = _rayservice(settings)
    node_phase = _stand_ins(ray_cluster, settings, ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"])
    pgs_made = []
    try:
        placed: dict[str, list[set[str] | None]] = {}
        extras = []
        for phase, llm in _llm_configs(ray_service).items():
            bundles, strategy = ray_serve_llm_placement(llm)
            pgs = [
                ray.util.placement_group(bundles, strategy=strategy)
                for _ in range(llm["deployment_config"]["num_replicas"] + 1)
            ]
            pgs_made += pgs
            placed[phase] = [_nodes_of(ray, pg, timeout=20) for pg in pgs[:-1]]
            extras.append((phase, pgs[-1]))
        # The extra groups, waited for together: each given at least 1.5 s from its creation (prefill's was made
        # before decode's groups, as when each phase's were waited for in turn).
        deadline = time.monotonic() + 1.5
        for phase, pg in extras:
            placed[phase].append(_nodes_of(ray, pg, timeout=max(0.1, deadline - time.monotonic())))
        return placed, node_phase
    finally:
        # A pending group left behind would take the next test's nodes.
        for pg in pgs_made:
            ray.util.remove_placement_group(pg)


G6_12_FULL = {**G6_12, "PREFILL_REPLICAS": "4", "DECODE_REPLICAS": "4"}  # four 1-GPU engines per 4-GPU node


@pytest.mark.parametrize(
    ("env", "engines"),
    [
        ({}, 1),  # g6.8xlarge: one 1-GPU engine per phase, one node each
        (P5_TP8, 1),  # one 8-way tensor-parallel engine per 8-GPU node
        (G6_12_FULL, 4),  # last: the control below keeps its pods
    ],
    ids=["g6.8xlarge", "p5.48xlarge-tp8", "g6.12xlarge"],
)
def test_placement_groups_land_only_on_their_phase_and_an_extra_one_waits(
    ray_cluster: dict[str, Any], env: dict[str, str], engines: int
) -> None:
    placed, node_phase = _place(ray_cluster, settings_for(env))
    for phase in ("prefill", "decode"):
        # Every engine of the phase on one node (STRICT_PACK keeps TP inside it), a node of that phase ...
        assert all(nodes is not None and len(nodes) == 1 for nodes in placed[phase][:engines]), placed
        assert [{node_phase[n] for n in nodes or ()} for nodes in placed[phase][:engines]] == [{phase}] * engines, (
            placed
        )
        # ... and one more waits instead of spilling onto the other phase's free GPUs.
        assert placed[phase][engines:] == [None], placed


def test_without_the_phase_resource_ray_would_mix_the_phases(ray_cluster: dict[str, Any]) -> None:
    """The control: the same pods as g6.12xlarge's above (its stand-ins, kept) and its prefill engines plus the one too
    many, with bundles that leave out the phase's resource. The fifth no longer waits: with the prefill pod full, Ray
    places it on the decode pod's free GPUs, and its KV cache would never touch EFA."""
    ray = ray_cluster["ray"]
    settings = settings_for(G6_12_FULL)
    ray_service = _rayservice(settings)
    node_phase = _stand_ins(ray_cluster, settings, ray_service["spec"]["rayClusterConfig"]["workerGroupSpecs"])
    llm = _llm_configs(ray_service)["prefill"]
    bundles, strategy = ray_serve_llm_placement(llm)
    assert all(bundle.get(PHASE_RESOURCES["prefill"]) for bundle in bundles), bundles  # what the control leaves out
    bundles = [{k: v for k, v in bundle.items() if k != PHASE_RESOURCES["prefill"]} for bundle in bundles]
    engines = llm["deployment_config"]["num_replicas"] + 1
    pgs = [ray.util.placement_group(bundles, strategy=strategy) for _ in range(engines)]
    try:
        placed = [_nodes_of(ray, pg, timeout=20) for pg in pgs]
    finally:
        for pg in pgs:
            ray.util.remove_placement_group(pg)
    assert engines == 5 and all(nodes is not None for nodes in placed), placed
    # Five 1-GPU engines, four GPUs on the prefill pod: one at least on the decode pod.
    assert {"decode"} in [{node_phase[n] for n in nodes or ()} for nodes in placed], (placed, node_phase)
