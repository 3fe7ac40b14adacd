"""What the one-host GPU check (tools/local_check/shape.py) changes of the deployed shape, on the synthesized
RayService of the pinned configuration: the cluster's groups, GPUs shared in turn, each change a host forces
named, the lone engine's batch sizes, the API keys' directory, the workers' environment, the collocated mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from settings.model_fit import GIB
from tests.conftest import settings_for
from tools.local_check.cluster import worker_env
from tools.local_check.plan import build_plan
from tools.local_check.shape import (
    HEAD_GROUP,
    Change,
    Host,
    Target,
    accelerator_resources,
    cluster_shape,
    collocated_config,
    gpu_assignment,
    patch_api_keys,
    patch_serve_config,
    reference_engine_kwargs,
    serve_config,
    shared_budget_error,
    with_engine_kwargs,
)

H200 = Host(
    gpus=1,
    gpu_name="NVIDIA H200",
    gpu_total_bytes=150_754_820_096,
    compute_capability=(9, 0),
    efa=False,
    cutlass_dsl=False,
)
L4 = Target("L4", 23_034 * 1024 * 1024, hybrid_gdn=True)
# A host like the deployed nodes: the GPU the serve config was sized for, and EFA.
L4_HOST = Host(
    gpus=2,
    gpu_name="NVIDIA L4",
    gpu_total_bytes=L4.gpu_total_bytes,
    compute_capability=(8, 9),
    efa=True,
    cutlass_dsl=False,
)


@pytest.fixture(scope="module")
def plan() -> dict[str, Any]:
    return build_plan(settings_for())


def test_cluster_shape_is_the_rayclusters(plan: dict[str, Any]) -> None:
    shape = cluster_shape(plan["rayservice"])
    assert (shape.head.group, shape.head.num_cpus, shape.head.num_gpus) == (HEAD_GROUP, 0, 0)
    assert [(n.group, n.num_gpus, n.num_cpus, n.resources) for n in shape.workers] == [
        ("prefill", 1, 31, {"pd_prefill": 1.0}),
        ("decode", 1, 31, {"pd_decode": 1.0}),
    ]
    assert shape.workers[0].labels["ray.io/node-group"] == "prefill"


def test_gpus_are_shared_in_turn_when_the_host_has_fewer(plan: dict[str, Any]) -> None:
    shape = cluster_shape(plan["rayservice"])
    assert gpu_assignment(shape, 1) == ([[0], [0]], True)
    assert gpu_assignment(shape, 2) == ([[0], [1]], False)
    with pytest.raises(ValueError, match="no GPU"):
        gpu_assignment(shape, 0)


def test_every_change_one_host_forces_is_named_and_nothing_else_changes(plan: dict[str, Any]) -> None:
    deployed = serve_config(plan["rayservice"])
    patched, changes = patch_serve_config(
        deployed, host=H200, target=L4, model_path="/m", weights="dummy", shared_gpu=True, kv_cache_bytes=2 * GIB
    )
    assert {c.what for c in changes} == {
        "model_source",
        "engine_kwargs.load_format",
        "kv_connector_extra_config.backends",
        "engine_kwargs.gpu_memory_utilization",
        "engine_kwargs.max_num_batched_tokens",
        "engine_kwargs.max_num_seqs",
        "engine_kwargs.kv_cache_memory_bytes",
        "engine_kwargs.gdn_prefill_backend",
    }
    for phase in ("prefill", "decode"):
        before, after = (c["applications"][0]["args"][f"{phase}_config"] for c in (deployed, patched))
        engine = after["engine_kwargs"]
        # The deployed GPU's budget on the bigger one: 0.9 x the L4's total.
        assert engine["gpu_memory_utilization"] * H200.gpu_total_bytes == pytest.approx(
            0.9 * L4.gpu_total_bytes, rel=1e-3
        )
        assert (engine["max_num_batched_tokens"], engine["max_num_seqs"]) == (2048, 256)
        assert engine["kv_transfer_config"]["kv_connector_extra_config"]["backends"] == ["UCX"]
        # What the deploy decides stays: roles, eager, length, placement, accelerator type.
        for key in ("max_model_len", "enforce_eager", "dtype", "tensor_parallel_size"):
            assert engine[key] == before["engine_kwargs"][key]
        assert engine["kv_transfer_config"]["kv_role"] == before["engine_kwargs"]["kv_transfer_config"]["kv_role"]
        assert after["placement_group_config"] == before["placement_group_config"]
        assert after.get("accelerator_type") == before.get("accelerator_type")
    assert deployed == serve_config(plan["rayservice"])  # the input is not modified


def _on_a_host_like_the_target(plan: dict[str, Any]) -> tuple[dict[str, Any], list[Change]]:
    """The serve config patched for a host with the target's GPU, the model's weights and a GPU per engine."""
    return patch_serve_config(
        serve_config(plan["rayservice"]),
        host=L4_HOST,
        target=L4,
        model_path="Qwen/Qwen3.5-9B",
        weights="model",
        shared_gpu=False,
        kv_cache_bytes=None,
    )


def test_a_host_like_the_target_changes_only_the_model(plan: dict[str, Any]) -> None:
    _, changes = _on_a_host_like_the_target(plan)
    assert changes == []
    extra, named = accelerator_resources(serve_config(plan["rayservice"]), L4_HOST)
    assert (extra, named) == ({}, [])


def test_the_bundles_accelerator_is_advertised_on_another_gpu(plan: dict[str, Any]) -> None:
    extra, changes = accelerator_resources(serve_config(plan["rayservice"]), H200)
    assert extra == {"accelerator_type:L4": 1.0}
    assert "H200" in changes[0].why


def test_sharing_a_gpu_needs_the_kv_cache_size(plan: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="KV cache size"):
        patch_serve_config(
            serve_config(plan["rayservice"]),
            host=H200,
            target=L4,
            model_path="/m",
            weights="dummy",
            shared_gpu=True,
            kv_cache_bytes=None,
        )


def test_the_lone_engine_has_the_servers_batch_sizes_whatever_the_host(plan: dict[str, Any]) -> None:
    """vllm.LLM's own defaults (UsageContext LLM_CLASS: 8,192 batched tokens) are not the server's (2,048 on an L4):
    written out even on a host like the target, where they are no change to name."""
    patched, changes = _on_a_host_like_the_target(plan)
    kwargs = reference_engine_kwargs(patched["applications"][0]["args"]["decode_config"])
    assert "kv_transfer_config" not in kwargs
    assert (kwargs["max_num_batched_tokens"], kwargs["max_num_seqs"]) == (2048, 256)
    assert changes == []


def test_engines_that_cannot_share_a_gpu_stop_the_check(plan: dict[str, Any]) -> None:
    shape = cluster_shape(plan["rayservice"])
    deployed = serve_config(plan["rayservice"])
    same_gpu = Host(
        gpus=1,
        gpu_name="NVIDIA L4",
        gpu_total_bytes=L4.gpu_total_bytes,
        compute_capability=(8, 9),
        efa=False,
        cutlass_dsl=False,
    )
    patched, _ = patch_serve_config(
        deployed, host=same_gpu, target=L4, model_path="/m", weights="dummy", shared_gpu=True, kv_cache_bytes=GIB
    )
    assert "2 engines would share each GPU at gpu_memory_utilization 0.9" in shared_budget_error(patched, shape, 1)
    assert shared_budget_error(patched, shape, 2) == ""  # one GPU each
    patched, _ = patch_serve_config(
        deployed, host=H200, target=L4, model_path="/m", weights="dummy", shared_gpu=True, kv_cache_bytes=GIB
    )
    assert shared_budget_error(patched, shape, 1) == ""  # an L4's budget twice is a fifth of an H200


def test_api_keys_come_from_a_directory_the_check_fills() -> None:
    config = {
        "applications": [
            {
                "args": {
                    "ingress_cls_config": {
                        "ingress_cls": "serve_auth_ingress:ApiKeyIngress",
                        "ingress_extra_kwargs": {"api_keys_dir": "/mnt/serve-api-keys"},
                    }
                }
            }
        ]
    }
    patched, changes = patch_api_keys(config, "/tmp/keys")
    assert (
        patched["applications"][0]["args"]["ingress_cls_config"]["ingress_extra_kwargs"]["api_keys_dir"] == "/tmp/keys"
    )
    assert [c.what for c in changes] == ["ingress_extra_kwargs.api_keys_dir"]
    assert patch_api_keys({"applications": [{"args": {}}]}, "/tmp/keys")[1] == []


def test_worker_env_is_the_pods_with_what_a_host_lacks_replaced(plan: dict[str, Any], tmp_path: Path) -> None:
    env, changes = worker_env(plan["rayservice"], tmp_path)
    assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["HF_HOME"] == str(tmp_path)
    assert env["TRITON_CACHE_DIR"] == f"{tmp_path}/triton"
    assert {c.what for c in changes} == {
        "env VLLM_HOST_IP",
        "env HF_HOME",
        "env TRITON_CACHE_DIR",
        "env VLLM_CACHE_ROOT",
    }


def test_collocated_mode_is_the_same_engines_as_ordinary_replicas(plan: dict[str, Any]) -> None:
    deployed = serve_config(plan["rayservice"])
    shape = cluster_shape(plan["rayservice"])
    collocated = collocated_config(deployed, shape)
    (application,) = collocated["applications"]
    assert application["import_path"] == "ray.serve.llm:build_openai_app"
    (llm,) = application["args"]["llm_configs"]
    decode = deployed["applications"][0]["args"]["decode_config"]
    assert llm["engine_kwargs"] == {k: v for k, v in decode["engine_kwargs"].items() if k != "kv_transfer_config"}
    assert llm["deployment_config"] == {"num_replicas": 2}  # one per GPU of the two worker nodes
    assert llm["placement_group_config"]["bundle_per_worker"] == {"GPU": 1, "CPU": 1}  # either node
    assert llm["model_loading_config"] == decode["model_loading_config"]
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    LLMConfig.model_validate(llm)  # Ray's own class at the image's version accepts it


def test_a_remedy_lands_in_both_phases_and_leaves_the_config_it_came_from(plan: dict[str, Any]) -> None:
    config = serve_config(plan["rayservice"])
    before = repr(config)
    patched = with_engine_kwargs(config, {"structured_outputs_config": {"backend": "guidance"}})
    args = patched["applications"][0]["args"]
    for phase in ("prefill_config", "decode_config"):
        assert args[phase]["engine_kwargs"]["structured_outputs_config"] == {"backend": "guidance"}
        assert "kv_transfer_config" in args[phase]["engine_kwargs"]
    assert repr(config) == before


def test_the_lone_engine_gets_only_what_vllm_engine_args_take(plan: dict[str, Any]) -> None:
    """vllm.LLM(**kwargs) refuses FrontendArgs' keys (TypeError: enable_auto_tool_choice), which Ray hands the OpenAI
    frontend: the first GPU run with the chat parsers on failed so."""
    from settings.engine_args import ENGINE_TABLE, vendored

    phase = serve_config(plan["rayservice"])["applications"][0]["args"]["decode_config"]
    assert {"enable_auto_tool_choice", "tool_call_parser"} <= set(phase["engine_kwargs"])  # the case this is about
    kwargs = reference_engine_kwargs(phase)
    assert set(kwargs) <= set(vendored()[ENGINE_TABLE]), set(kwargs) - set(vendored()[ENGINE_TABLE])
    assert kwargs["reasoning_parser"] == phase["engine_kwargs"]["reasoning_parser"]  # an engine field: kept
