"""Does the model fit the GPUs? vLLM 0.26's own arithmetic, at synth, before anything is deployed.

vLLM 0.26 (v1/worker/gpu_worker.py, determine_available_memory; v1/worker/utils.py, request_memory) gives the
KV cache what is left of `total GPU memory x gpu_memory_utilization` after the weights, the activation peak of
a profile run and the memory outside torch (CUDA allocations, NCCL, cuBLAS); the CUDA context is paid from
the (1 - utilization) headroom, and with enforce_eager there is no CUDA graph estimate. An engine refuses to
start unless one sequence of max_model_len fits: its full-attention KV cache, and for hybrid models the fixed
state of every linear-attention layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from settings.instance_types import BUILT_IN, BUILT_IN_GPU_TYPES, InstanceFacts
from settings.model_facts import DTYPE_BYTES, ENGINE_DTYPE_BYTES, ModelFacts

GIB = 1024**3
# The serve config's (k8s_constructs/serve_config.py reads it from here).
GPU_MEMORY_UTILIZATION = 0.90
# What CUDA reports as a GPU's total memory (torch.cuda.mem_get_info, nvidia-smi's memory.total): less than
# the nominal size EC2 lists. Other GPUs: 94% of EC2's figure.
CUDA_TOTAL_MIB = {"L4": 23_034, "A10G": 23_028, "L40S": 46_068, "A100": 40_960, "H100": 81_559}
# What vLLM keeps beside the weights and the KV cache, per GPU, with enforce_eager: the profile run's activation
# peak plus the memory outside torch. Measured: Qwen3.5-9B (16.8 GiB of weights, an L4's 2,048 batched tokens)
# 1.00 + 0.22 GiB by the one-host check (`make local-check`, vLLM 0.26.0 on an H200 at an L4's budget,
# docs/local-check.md; 1.00 + 0.23 again on 2026-12-02); an 8B model on an H100 (8,192 batched tokens)
# 1.26 + 0.16 GiB (vllm-project/vllm #10511).
# The estimate grows with the weights (the peak follows the hidden size) and stays above both: by 0.36 and 0.13
# GiB, so a config it passes starts, at the price of refusing one within ~0.4 GiB of the edge.
OVERHEAD_BASE_BYTES = int(1.25 * GIB)
OVERHEAD_PER_WEIGHT_BYTE = 0.02
# Compiled with CUDA graphs (enforce_eager false), vLLM 0.26 also holds the captured graphs (its profile counts
# them since v0.21) and torch.compile's larger activation peak: Qwen3.5-9B on the same budget measured 1.98 GiB
# of peak (+0.98) and 0.54 GiB of graphs (+1.52 in all; the run of 2026-12-01 that issue 25 quotes); 0.23 GiB kept.
# The dense Llama-3.1-8B compiled at an L40S's budget (the check's run of 2026-12-02) kept 1.01 + 0.22 + 0.59 GiB
# of graphs = 1.82 GiB against the 3.30 estimated: the surcharge is the hybrid model's, conservative for dense ones.
GRAPHS_OVERHEAD_BYTES = int(1.75 * GIB)
# Where CUDA graphs are chosen (ENFORCE_EAGER=auto): only when, with their memory, the KV cache still holds this
# many sequences of max_model_len — half the decode phase's autoscaling target, the streams one decode engine is
# meant to carry. Below it, eager decode keeps the concurrency; on an L4 the decode step is bandwidth-bound
# (the whole model read per token), so eager costs it little, where an H100's 5 ms step is launch-bound.
MIN_SEQUENCES_WITH_GRAPHS = 8
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Fit:
    budget: int  # bytes vLLM may use on one GPU
    weights: int
    overhead: int
    kv_per_token: int
    state: int  # hybrid layers' state for one sequence
    eager: bool = True

    @property
    def needed_without_kv(self) -> int:
        return self.weights + self.overhead + self.state

    def needed(self, max_model_len: int) -> int:
        return self.needed_without_kv + self.kv_per_token * max_model_len

    def fits(self, max_model_len: int) -> bool:
        return self.needed(max_model_len) <= self.budget

    def sequences(self, max_model_len: int) -> int:
        """How many sequences of max_model_len the KV cache holds (0: not one)."""
        per_sequence = self.kv_per_token * max_model_len + self.state
        room = self.budget - self.weights - self.overhead
        return max(0, room // per_sequence) if per_sequence else 0

    @property
    def largest_context(self) -> int:
        """The largest max_model_len one sequence of which fits (0: not even the weights)."""
        room = self.budget - self.needed_without_kv
        return max(0, room // self.kv_per_token) if self.kv_per_token else 0


# torch reports a little less than nvidia-smi (H100: 79.22 GiB against 81,559 MiB in vLLM #10511's log; L40S
# 44.53 GiB against 46,068 MiB): 1% off, so a configuration at the edge is not passed wrongly.
TORCH_SHARE = 0.99


def gpu_budget(gpu: InstanceFacts) -> int:
    total_mib = CUDA_TOTAL_MIB.get(gpu.gpu_model, int(gpu.gpu_memory_mib * 0.94)) * TORCH_SHARE
    return int(total_mib * 1024 * 1024 * GPU_MEMORY_UTILIZATION)


def overhead_bytes(weights: int, *, eager: bool) -> int:
    """vLLM's memory beside the weights and the KV cache on one GPU (see the constants above)."""
    return OVERHEAD_BASE_BYTES + int(OVERHEAD_PER_WEIGHT_BYTE * weights) + (0 if eager else GRAPHS_OVERHEAD_BYTES)


def fit(
    model: ModelFacts, gpu: InstanceFacts, tensor_parallel_size: int, *, text_only: bool, eager: bool = True
) -> Fit:
    checkpoint = model.weight_bytes - (model.text_only_skipped_bytes if text_only else 0)
    # Loaded as bfloat16 (the serve config's dtype): a float32 checkpoint takes half its size on the GPU.
    loaded = checkpoint * ENGINE_DTYPE_BYTES // DTYPE_BYTES.get(model.dtype, ENGINE_DTYPE_BYTES)
    weights = loaded // tensor_parallel_size
    state = model.linear_layers * model.linear_state_bytes_per_layer // tensor_parallel_size
    return Fit(
        budget=gpu_budget(gpu),
        weights=weights,
        overhead=overhead_bytes(weights, eager=eager),
        kv_per_token=model.kv_bytes_per_token(tensor_parallel_size),
        state=state,
        eager=eager,
    )


def graphs_fit(
    model: ModelFacts, gpu: InstanceFacts, tensor_parallel_size: int, max_model_len: int, *, text_only: bool
) -> bool:
    """Compilation and CUDA graphs leave the KV cache MIN_SEQUENCES_WITH_GRAPHS sequences of max_model_len."""
    compiled = fit(model, gpu, tensor_parallel_size, text_only=text_only, eager=False)
    return compiled.sequences(max_model_len) >= MIN_SEQUENCES_WITH_GRAPHS


def phase_eager(
    setting: str,
    phase: str,
    model: ModelFacts | None,
    gpu: InstanceFacts,
    tensor_parallel_size: int,
    max_model_len: int,
    *,
    text_only: bool,
) -> bool:
    """enforce_eager of one phase's engine. ENFORCE_EAGER true/false forces both phases; auto compiles a phase where
    graphs_fit leaves it room on its GPU (both phases run the same model on one GPU type today, so they agree;
    PD's greedy output then equals one engine's, which mixed modes would not promise); an unknown model stays eager."""
    del phase  # the rule is per phase; its inputs are the same for both until the phases get GPU types of their own
    if setting != "auto":
        return setting == "true"
    if model is None:
        return True
    return not graphs_fit(model, gpu, tensor_parallel_size, max_model_len, text_only=text_only)


def _gib(value: int) -> str:
    return f"{value / GIB:.1f} GiB"


def misfit(
    model: ModelFacts,
    gpu: InstanceFacts,
    tensor_parallel_size: int,
    max_model_len: int,
    *,
    text_only: bool,
    eager: bool = True,
) -> str:
    """ "" when one sequence of max_model_len fits each GPU; else one line: the model, the GPU, needed and
    available, and what would fit (the largest context, the smallest tensor-parallel size, other GPU types)."""
    this = fit(model, gpu, tensor_parallel_size, text_only=text_only, eager=eager)
    if this.fits(max_model_len):
        return ""
    ways = []
    if this.largest_context >= 256:
        ways.append(f"MAX_MODEL_LEN up to {min(this.largest_context, model.native_context)}")
    tp = next(
        (
            t
            for t in TENSOR_PARALLEL_SIZES
            if t <= gpu.gpus and fit(model, gpu, t, text_only=text_only).fits(max_model_len)
        ),
        None,
    )
    if tp is not None and tp != tensor_parallel_size:
        ways.append(f"TENSOR_PARALLEL_SIZE={tp}")
    others = sorted(
        _fitting_types(model, max_model_len, text_only=text_only),
        key=lambda found: (found[1], BUILT_IN[found[0]].gpus, found[0]),
    )
    if others:
        ways.append("GPU_NODE_TYPE " + ", ".join(f"{name} (TP {t})" for name, t in others[:4]))
    return (
        f"{model.source} on {gpu.name} ({gpu.gpu_model}, TP {tensor_parallel_size}) needs"
        f" {_gib(this.needed(max_model_len))} per GPU (weights {_gib(this.weights)}, KV cache of one"
        f" {max_model_len}-token sequence"
        f" {_gib(this.kv_per_token * max_model_len)}{f', hybrid state {_gib(this.state)}' if this.state else ''},"
        f" vLLM's overhead {_gib(this.overhead)}) of {_gib(this.budget)} available; "
        + ("fits with: " + "; ".join(ways) if ways else "no built-in GPU type fits it")
    )


def table_gpu_types() -> tuple[str, ...]:
    """The GPU types of the docs' table: of each built-in GPU model, the type with fewest GPUs per node (then fewest
    vCPUs) and the one with most; a new built-in type or GPU model reaches the table without an edit here."""
    by_model: dict[str, list[InstanceFacts]] = {}
    for name in BUILT_IN_GPU_TYPES:
        by_model.setdefault(BUILT_IN[name].gpu_model, []).append(BUILT_IN[name])
    chosen: list[str] = []
    for types in by_model.values():
        fewest = min(types, key=lambda gpu: (gpu.gpus, gpu.vcpus))
        most = max(types, key=lambda gpu: (gpu.gpus, -gpu.vcpus))
        chosen += [fewest.name] if most is fewest else [fewest.name, most.name]
    return tuple(chosen)


def fit_table_markdown(models: Iterable[ModelFacts]) -> str:
    """The largest MAX_MODEL_LEN that fits (capped at the model's native context), per model, GPU type and
    tensor-parallel size, text only: the docs' table (docs/models.md)."""
    rows = ["| Model | GPU type | TP 1 | TP 2 | TP 4 | TP 8 |", "|---|---|---|---|---|---|"]
    gpu_types = table_gpu_types()
    for model in models:
        for name in gpu_types:
            gpu = BUILT_IN[name]
            cells = []
            for tp in TENSOR_PARALLEL_SIZES:
                largest = (
                    min(fit(model, gpu, tp, text_only=True).largest_context, model.native_context)
                    if tp <= gpu.gpus
                    else -1
                )
                cells.append("—" if largest < 0 else "no fit" if largest < 256 else f"{largest:,}")
            rows.append(f"| `{model.source}` | {name} ({gpu.gpus} × {gpu.gpu_model}) | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _fitting_types(model: ModelFacts, max_model_len: int, *, text_only: bool) -> Iterable[tuple[str, int]]:
    for name in BUILT_IN_GPU_TYPES:
        gpu = BUILT_IN[name]
        tp = next(
            (
                t
                for t in TENSOR_PARALLEL_SIZES
                if t <= gpu.gpus and fit(model, gpu, t, text_only=text_only).fits(max_model_len)
            ),
            None,
        )
        if tp is not None:
            yield name, tp
