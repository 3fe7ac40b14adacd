"""The one-host check's pure parts: the local Ray cluster shaped from the synthesized RayService, the changes one
host forces on the serve config (each named, with its reason), and the verdicts on what the run recorded.

Standard library and PyYAML only: this module runs on the GPU host, inside the Ray LLM image or beside the
image's wheels, where the project's CDK dependencies are not installed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from k8s_constructs.serve_config import GUARD_INGRESS_CLASS
from settings.engine_args import field_owner

GIB = 1024**3
HEAD_GROUP = "headgroup"  # KubeRay's ray.io/group of the head
NODE_GROUP_LABEL = "ray.io/node-group"  # the label KubeRay gives every Ray node of a worker group
# vLLM 0.26's batch defaults for the OpenAI server (engine/arg_utils.py,
# _set_default_max_num_seqs_and_batched_tokens_args): the larger ones from 70 GiB of GPU memory up (A100s excepted).
# A host with a bigger GPU than the target's would otherwise profile, and run, other batch sizes than the deployed
# engine.
LARGE_GPU_BYTES = 70 * GIB
SMALL_GPU_BATCH = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}
LARGE_GPU_BATCH = {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}
SHARED_GPU_LIMIT = (
    0.95  # of a GPU's memory that engines sharing it may ask for together (its CUDA contexts need the rest)
)
# A name -> key object, as the Secrets Store CSI mount holds them (k8s_constructs/endpoint.KEYS_FILE; not imported:
# this module runs where the CDK is not installed). The ingress reads every file of the directory, so only the form
# matters.
API_KEYS_FILE = "api-keys.json"


@dataclass(frozen=True)
class NodeShape:
    """One Ray node of the RayCluster (the head, or one pod of a worker group), as `ray start` would see it."""

    group: str
    num_cpus: int
    num_gpus: int
    resources: dict[str, float] = field(default_factory=dict)  # custom resources: pd_prefill, pd_decode, …
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterShape:
    head: NodeShape
    workers: tuple[NodeShape, ...]  # one per pod: a group of replicas N gives N nodes

    @property
    def gpus(self) -> int:
        return sum(node.num_gpus for node in self.workers)


def _quantity_cpus(value: Any) -> int:
    """A Kubernetes CPU quantity as Ray counts it: whole CPUs ("31", "500m" -> 0)."""
    text = str(value)
    return int(text[:-1]) // 1000 if text.endswith("m") else int(float(text))


def _worker_node(group: dict[str, Any]) -> NodeShape:
    params = group.get("rayStartParams") or {}
    resources = {name: float(amount) for name, amount in (group.get("resources") or {}).items()}
    container = group["template"]["spec"]["containers"][0]
    limits = container.get("resources", {}).get("limits", {})
    # KubeRay 1.7 (pod.go): num-gpus from the group's resources or rayStartParams, else the container's GPU limit;
    # num-cpus likewise, else the container's CPU limit.
    gpus = resources.pop("GPU", None)
    cpus = resources.pop("CPU", None)
    num_gpus = int(gpus if gpus is not None else params.get("num-gpus", limits.get("nvidia.com/gpu", 0)))
    num_cpus = int(cpus) if cpus is not None else _quantity_cpus(params.get("num-cpus", limits.get("cpu", 1)))
    return NodeShape(
        group["groupName"],
        num_cpus,
        num_gpus,
        resources,
        {NODE_GROUP_LABEL: group["groupName"], **(group.get("labels") or {})},
    )


def cluster_shape(rayservice: dict[str, Any]) -> ClusterShape:
    """The RayCluster of a RayService: its head (CPUs and GPUs from rayStartParams) and one node per worker pod."""
    config = rayservice["spec"]["rayClusterConfig"]
    head_params = config["headGroupSpec"].get("rayStartParams") or {}
    head_limits = config["headGroupSpec"]["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    head = NodeShape(
        HEAD_GROUP,
        _quantity_cpus(head_params.get("num-cpus", head_limits.get("cpu", 1))),
        int(head_params.get("num-gpus", 0)),
        labels={NODE_GROUP_LABEL: HEAD_GROUP},
    )
    workers = []
    for group in config.get("workerGroupSpecs", []):
        count = int(group.get("replicas", group.get("minReplicas", 1)))
        workers += [_worker_node(group)] * count
    return ClusterShape(head, tuple(workers))


def serve_config(rayservice: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    return loaded


def gpu_assignment(shape: ClusterShape, host_gpus: int) -> tuple[list[list[int]], bool]:
    """The host's GPU ids each worker node gets (CUDA_VISIBLE_DEVICES of its raylet), and whether some GPU is shared:
    with fewer GPUs than the cluster needs, nodes take them in turn, so two phases can share one GPU."""
    if host_gpus < 1:
        raise ValueError("no GPU on this host")
    ids, next_id = [], 0
    for node in shape.workers:
        ids.append([(next_id + k) % host_gpus for k in range(node.num_gpus)])
        next_id += node.num_gpus
    return ids, shape.gpus > host_gpus


@dataclass(frozen=True)
class Host:
    """What the run found on this machine."""

    gpus: int
    gpu_name: str
    gpu_total_bytes: int
    compute_capability: tuple[int, int]
    efa: bool  # an EFA device and libfabric's efa provider
    cutlass_dsl: bool  # nvidia-cutlass-dsl importable (FlashInfer's SM90 GDN prefill kernel needs it)


@dataclass(frozen=True)
class Target:
    """The deployed GPU the config was written for (the plan's): vLLM's budget there."""

    gpu_model: str
    gpu_total_bytes: int  # what CUDA reports as the GPU's total memory
    hybrid_gdn: bool  # the model has Gated DeltaNet layers (Qwen3.5)


@dataclass(frozen=True)
class Change:
    """One difference between the synthesized serve config (or cluster) and what this host runs."""

    what: str
    deployed: Any
    here: Any
    why: str


def _phases(config: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The engines' LLMConfigs of the application: PD's prefill and decode, or the collocated app's llm_configs."""
    args = config["applications"][0]["args"]
    pd = [(name.removesuffix("_config"), args[name]) for name in ("prefill_config", "decode_config") if name in args]
    return pd + [(f"llm_configs[{index}]", llm) for index, llm in enumerate(args.get("llm_configs", []))]


COLLOCATED_IMPORT_PATH = "ray.serve.llm:build_openai_app"


def collocated_config(config: dict[str, Any], shape: ClusterShape) -> dict[str, Any]:
    """The same model and engine settings as ordinary replicas behind the same ingress, one per engine's worth of
    the cluster's GPUs and no KV connector: what the GPUs would do without disaggregation (issue 29's comparison).
    The decode phase's LLMConfig is the model (its engine kwargs are the prefill's but for the KV role)."""
    application = config["applications"][0]
    decode = copy.deepcopy(application["args"]["decode_config"])
    engine = decode["engine_kwargs"]
    engine.pop("kv_transfer_config", None)
    gpus_per_engine = int(engine.get("tensor_parallel_size", 1)) * int(engine.get("pipeline_parallel_size", 1))
    bundle = {k: v for k, v in decode["placement_group_config"]["bundle_per_worker"].items() if k in ("GPU", "CPU")}
    decode["placement_group_config"] = {**decode["placement_group_config"], "bundle_per_worker": bundle}
    decode["deployment_config"] = {"num_replicas": max(1, shape.gpus // gpus_per_engine)}
    args: dict[str, Any] = {"llm_configs": [decode]}
    for key in ("ingress_cls_config", "ingress_deployment_config"):
        if key in application["args"]:
            args[key] = copy.deepcopy(application["args"][key])
    return {**config, "applications": [{**application, "import_path": COLLOCATED_IMPORT_PATH, "args": args}]}


def lone_config(config: dict[str, Any], shape: ClusterShape) -> dict[str, Any]:
    """One ordinary replica of the decode phase's engine behind the same ingress: the conformance step's lone engine,
    named apart from the PD application."""
    lone = collocated_config(config, shape)
    application = lone["applications"][0]
    application["args"]["llm_configs"][0]["deployment_config"] = {"num_replicas": 1}
    # Without the PD guard: the lone engine shows what one engine serves, which the guard refuses only for PD.
    if application["args"].get("ingress_cls_config", {}).get("ingress_cls") == GUARD_INGRESS_CLASS:
        del application["args"]["ingress_cls_config"]
    return {**lone, "applications": [{**application, "name": f"{application['name']}-lone"}]}


def with_engine_kwargs(config: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The PD serve config with `extra` in both phases' engine kwargs, as ENGINE_ARGS would land it."""
    patched = copy.deepcopy(config)
    args = patched["applications"][0]["args"]
    for phase in ("prefill_config", "decode_config"):
        args[phase]["engine_kwargs"].update(copy.deepcopy(extra))
    return patched


def accelerator_resources(config: dict[str, Any], host: Host) -> tuple[dict[str, float], list[Change]]:
    """Ray Serve LLM adds `accelerator_type:<GPU>: 0.001` to every bundle of a phase that names its GPU; a host with
    another GPU lacks that resource, so every worker node advertises the deployed one as well."""
    wanted = sorted({phase["accelerator_type"] for _, phase in _phases(config) if phase.get("accelerator_type")})
    extra = {
        f"accelerator_type:{name}": 1.0
        for name in wanted
        if name.upper() not in host.gpu_name.upper().replace("NVIDIA ", "").split()
    }
    changes = [
        Change(
            f"worker nodes' resource {name}",
            "from the GPU",
            "advertised",
            f"the bundles ask for it; this host's GPU is {host.gpu_name}",
        )
        for name in extra
    ]
    return extra, changes


# Where the weights come from (--weights), and why the model source changes.
WEIGHTS_REASONS = {
    "model": "a local copy",
    "random": "the deployed source is not reachable from this host: a random checkpoint of the model's architecture"
    " (tools/local_check/checkpoint.py: a seed per tensor, a trained model's scale)",
    "dummy": "the deployed source is not reachable from this host",
}


def patch_serve_config(
    config: dict[str, Any],
    *,
    host: Host,
    target: Target,
    model_path: str,
    weights: str,
    shared_gpu: bool,
    kv_cache_bytes: int | None,
) -> tuple[dict[str, Any], list[Change]]:
    """The serve config this host can run, and every change made to it. Only what one host forces changes:
    where the model comes from, NIXL's backend without EFA, vLLM's budget and batch defaults of the deployed GPU
    on a larger one, the KV cache fixed when two engines share a GPU, FlashInfer's SM90 GDN kernel without its
    dependency."""
    patched = copy.deepcopy(config)
    changes: list[Change] = []

    def change(what: str, deployed: Any, here: Any, why: str) -> None:
        if deployed != here and not any(c.what == what for c in changes):
            changes.append(Change(what, deployed, here, why))

    for name, phase in _phases(patched):
        loading = phase["model_loading_config"]
        change(
            "model_source",
            loading["model_source"],
            model_path,
            WEIGHTS_REASONS[weights],
        )
        loading["model_source"] = model_path
        engine = phase.setdefault("engine_kwargs", {})
        if weights == "dummy":
            change(
                "engine_kwargs.load_format",
                engine.get("load_format", "auto"),
                "dummy",
                "asked for (--weights dummy): vLLM's degenerate random weights, every answer the prompt's last token"
                " repeated; parity cannot see the KV cache (the context control fails)",
            )
            engine["load_format"] = "dummy"
        backends = engine.get("kv_transfer_config", {}).get("kv_connector_extra_config", {}).get("backends")
        if backends and "LIBFABRIC" in backends and not host.efa:
            change(
                "kv_connector_extra_config.backends",
                backends,
                ["UCX"],
                "no EFA device on this host: libfabric cannot load",
            )
            engine["kv_transfer_config"]["kv_connector_extra_config"]["backends"] = ["UCX"]
        utilization = float(engine.get("gpu_memory_utilization", 0.9))
        if host.gpu_total_bytes > target.gpu_total_bytes:
            here = round(utilization * target.gpu_total_bytes / host.gpu_total_bytes, 4)
            change(
                "engine_kwargs.gpu_memory_utilization",
                utilization,
                here,
                f"{host.gpu_name} has {host.gpu_total_bytes / GIB:.1f} GiB: the same budget as on the"
                f" {target.gpu_model}",
            )
            engine["gpu_memory_utilization"] = here
        # vLLM's batch defaults of the deployed GPU, for the OpenAI server Ray Serve LLM runs (UsageContext
        # OPENAI_API_SERVER), written out: the lone engine (vllm.LLM, UsageContext LLM_CLASS) would otherwise profile
        # and chunk other batch sizes, and a host with another GPU would too. Named when this host's defaults differ.
        deployed_batch = SMALL_GPU_BATCH if target.gpu_total_bytes < LARGE_GPU_BYTES else LARGE_GPU_BATCH
        large_host = host.gpu_total_bytes >= LARGE_GPU_BYTES and "A100" not in host.gpu_name.upper()
        host_batch = LARGE_GPU_BATCH if large_host else SMALL_GPU_BATCH
        for key, value in deployed_batch.items():
            if key not in engine:
                engine[key] = value
                if host_batch != deployed_batch:
                    change(
                        f"engine_kwargs.{key}",
                        f"{value} (vLLM's default there)",
                        value,
                        f"vLLM's default here would be {host_batch[key]}",
                    )
        if shared_gpu:
            if kv_cache_bytes is None:
                raise ValueError("two engines share a GPU: the KV cache size to give each is needed")
            change(
                "engine_kwargs.kv_cache_memory_bytes",
                "profiled",
                kv_cache_bytes,
                "the phases share one GPU: profiling side by side is unreliable, so each gets the KV cache the lone"
                " engine measured",
            )
            engine["kv_cache_memory_bytes"] = kv_cache_bytes
        if (
            target.hybrid_gdn
            and host.compute_capability == (9, 0)
            and not host.cutlass_dsl
            and "gdn_prefill_backend" not in engine
        ):
            change(
                "engine_kwargs.gdn_prefill_backend",
                "auto",
                "triton",
                "FlashInfer's SM90 GDN prefill kernel needs nvidia-cutlass-dsl, absent here",
            )
            engine["gdn_prefill_backend"] = "triton"
        del name
    return patched, changes


def shared_budget_error(config: dict[str, Any], shape: ClusterShape, host_gpus: int) -> str:
    """ "" when the engines sharing a GPU fit it together: vLLM refuses to start unless the GPU's free memory is at
    least gpu_memory_utilization x its total (v1/worker/utils.py, request_memory), kv_cache_memory_bytes or not."""
    assignment, _ = gpu_assignment(shape, host_gpus)
    per_gpu: dict[int, int] = {}
    for gpus in assignment:
        for gpu in gpus:
            per_gpu[gpu] = per_gpu.get(gpu, 0) + 1
    sharing = max(per_gpu.values(), default=1)
    utilization = max(float(p.get("engine_kwargs", {}).get("gpu_memory_utilization", 0.9)) for _, p in _phases(config))
    if sharing > 1 and sharing * utilization > SHARED_GPU_LIMIT:
        return (
            f"{sharing} engines would share each GPU at gpu_memory_utilization {utilization}"
            f" ({sharing * utilization:.2f} of it): run on a host with {shape.gpus} GPUs, or with a GPU at least"
            f" {sharing * utilization / SHARED_GPU_LIMIT:.1f} x the deployed one's memory"
        )
    return ""


def patch_api_keys(config: dict[str, Any], keys_dir: str) -> tuple[dict[str, Any], list[Change]]:
    """With SERVE_API_KEYS=on the ingress reads its keys from the Secrets Store CSI mount: here, a directory with a key
    the check generates. The ingress module's directory is on the Ray nodes' PYTHONPATH (the runner sets it)."""
    patched = copy.deepcopy(config)
    ingress = patched["applications"][0]["args"].get("ingress_cls_config") or {}
    kwargs = ingress.get("ingress_extra_kwargs") or {}
    if "api_keys_dir" not in kwargs:
        return patched, []
    change = Change(
        "ingress_extra_kwargs.api_keys_dir",
        kwargs["api_keys_dir"],
        keys_dir,
        "the Secrets Store CSI mount of the pods: a key generated for the run",
    )
    kwargs["api_keys_dir"] = keys_dir
    return patched, [change]


def batch_boundary(config: dict[str, Any], target: Target) -> int:
    """One past the decode engine's max_num_batched_tokens (the deployed GPU's vLLM default where unset): a prompt of
    this length has its last token computed in a step of its own by a lone engine too, from the state and KV cache
    of the tokens before it - what the decode engine does with the transferred ones."""
    engine = config["applications"][0]["args"]["decode_config"].get("engine_kwargs", {})
    default = SMALL_GPU_BATCH if target.gpu_total_bytes < LARGE_GPU_BYTES else LARGE_GPU_BATCH
    return int(engine.get("max_num_batched_tokens", default["max_num_batched_tokens"])) + 1


def reference_engine_kwargs(phase: dict[str, Any]) -> dict[str, Any]:
    """One non-disaggregated engine with a phase's engine kwargs: no KV connector, the same everything else. The
    keys Ray 2.58 hands vLLM's OpenAI frontend rather than the engine (the tool-call parser) are left out: the
    lone engine is vLLM's LLM class, which takes EngineArgs only."""
    kwargs = {
        key: value
        for key, value in phase.get("engine_kwargs", {}).items()
        if key != "kv_transfer_config" and field_owner(key) != "FrontendArgs"
    }
    kwargs.pop("kv_cache_memory_bytes", None)  # the lone engine profiles: its figures are the ones compared
    return kwargs
