"""A random checkpoint that is not degenerate, for `make local-check --weights random` (the default without weights).

vLLM's `load_format: dummy` fills every tensor from one seed with values in ±1e-3 that depend only on the tensor's
size and dtype (vllm 0.26 `model_executor/model_loader/weight_utils.py`, `initialize_dummy_weights`): `lm_head`
equals the embedding, the layers add almost nothing, and every greedy answer is the prompt's last token repeated.
The decode engine recomputes the last prompt token itself, so with such weights an answer does not depend on the
transferred KV cache at all, and PD parity cannot fail.

This writes what a trained checkpoint looks like to the loader instead: the architecture's own parameter names and
shapes (transformers builds the model from config.json on the meta device: no memory, no download), one seed per
tensor (crc32 of its name), a trained model's scale (normal, std 0.02), norms 1, biases 0, Gated DeltaNet's `A_log`
and `dt_bias` in the ranges Mamba-2 initialises them to; safetensors shards of at most 4 GiB with
`model.safetensors.index.json`, loaded through vLLM's normal loader. Runs on the GPU host (torch, transformers,
safetensors); a 9B model is ~19 GB, written in about 30 s on one H100.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STD = 0.02  # a trained transformer's weight scale (GPT-2's and most successors' initializer_range)
SHARD_BYTES = 4 * 1024**3
INDEX_FILE = "model.safetensors.index.json"
MARKER = "random-checkpoint.json"  # what was written, and from which config: a rerun reuses a complete checkpoint
RECIPE = (
    "v1: crc32(name) seeds, normal std 0.02, norms 1, biases 0, A_log log U(1,16), dt_bias softplus^-1(exp U(-4,-2))"
)
# Files of the model directory that are not weights: copied beside the random ones.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


def tensor_kind(name: str, shape: tuple[int, ...]) -> str:
    """How a tensor is initialised, from its name and shape (the names transformers gives the architecture)."""
    leaf = name.rsplit(".", 1)[-1]
    owner = name.rsplit(".", 2)[-2] if name.count(".") >= 1 else ""
    if leaf == "A_log":
        return "A_log"
    if leaf == "dt_bias":
        return "dt_bias"
    if leaf == "bias":
        return "zeros"
    if len(shape) == 1 and ("norm" in owner.lower() or "ln" in owner.lower()):
        return "ones"
    return "normal"


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def parameter_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Every parameter of the architecture named in config.json, as transformers names it (the checkpoint's names),
    built on the meta device. Tied parameters appear once (named_parameters' default)."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(str(model_dir))
    architecture = (getattr(config, "architectures", None) or [""])[0]
    model_class = getattr(transformers, architecture, None)
    if model_class is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no class {architecture!r} (config.json)")
    with torch.device("meta"):
        model = model_class._from_config(config)
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


def _tensor(name: str, shape: tuple[int, ...], dtype: Any, device: str) -> Any:
    import torch

    kind = tensor_kind(name, shape)
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    if kind == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    generator = torch.Generator(device=device).manual_seed(seed_of(name))
    if kind == "A_log":  # A = -exp(A_log) in U(-16, -1): Mamba-2's A_init_range
        uniform = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
        return torch.log(1 + 15 * uniform).to(dtype)
    if kind == "dt_bias":  # softplus(dt_bias) = dt, log-uniform in [e^-4, e^-2] (Mamba-2's dt range)
        uniform = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
        dt = torch.exp(-4 + 2 * uniform)
        return (dt + torch.log(-torch.expm1(-dt))).to(dtype)
    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    return (values * STD).to(dtype)


def _shards(shapes: dict[str, tuple[int, ...]], itemsize: int) -> Iterator[list[str]]:
    """Names grouped into shards of at most SHARD_BYTES, in the architecture's order."""
    shard: list[str] = []
    size = 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * itemsize
        if shard and size + nbytes > SHARD_BYTES:
            yield shard
            shard, size = [], 0
        shard.append(name)
        size += nbytes
    if shard:
        yield shard


def _config_digest(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()


def is_complete(target: Path, model_dir: Path) -> bool:
    """A checkpoint this module wrote from the same config.json, with every shard of its index present."""
    try:
        marker = json.loads((target / MARKER).read_text())
        index = json.loads((target / INDEX_FILE).read_text())
    except (OSError, ValueError):
        return False
    files = set(index.get("weight_map", {}).values())
    return (
        marker.get("config_sha256") == _config_digest(model_dir)
        and marker.get("recipe") == RECIPE
        and bool(files)
        and all((target / f).is_file() for f in files)
    )


def copy_model_files(model_dir: Path, target: Path) -> None:
    """The model directory's files other than weights (config, tokenizer) beside the checkpoint, on every run: a
    tokenizer generated after the checkpoint was written (the checkpoint written ahead, then reused) must reach it,
    or vLLM serves the checkpoint without one."""
    for item in model_dir.iterdir():
        if item.is_file() and not item.name.endswith(_WEIGHT_SUFFIXES) and item.name not in (INDEX_FILE, MARKER):
            shutil.copy2(item, target / item.name)


def write_random_checkpoint(model_dir: Path, target: Path, *, device: str = "cuda") -> dict[str, Any]:
    """Write the random checkpoint of model_dir's config.json into target (reused when already complete); the
    model directory's other files (config, tokenizer) are copied beside it. Returns the marker's facts."""
    target.mkdir(parents=True, exist_ok=True)
    copy_model_files(model_dir, target)
    if is_complete(target, model_dir):
        marker: dict[str, Any] = json.loads((target / MARKER).read_text())
        return {**marker, "reused": True}
    import time

    import torch
    from safetensors.torch import save_file

    started = time.monotonic()
    for stale in target.glob("*.safetensors"):
        stale.unlink()
    config = json.loads((model_dir / "config.json").read_text())
    dtype_name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    dtype = getattr(torch, str(dtype_name))
    shapes = parameter_shapes(model_dir)
    itemsize = torch.empty((), dtype=dtype).element_size()
    groups = list(_shards(shapes, itemsize))
    weight_map: dict[str, str] = {}
    total = 0
    for number, names in enumerate(groups, start=1):
        filename = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        tensors = {name: _tensor(name, shapes[name], dtype, device).cpu() for name in names}
        save_file(tensors, str(target / filename), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        weight_map.update(dict.fromkeys(names, filename))
    (target / INDEX_FILE).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    kinds = Counter(tensor_kind(name, shape) for name, shape in shapes.items())
    marker = {
        "recipe": RECIPE,
        "config_sha256": _config_digest(model_dir),
        "tensors": len(shapes),
        "parameters": sum(math.prod(s) for s in shapes.values()),
        "bytes": total,
        "shards": len(groups),
        "kinds": dict(kinds),
        "seconds": round(time.monotonic() - started, 1),
    }
    (target / MARKER).write_text(json.dumps(marker, indent=1))
    return {**marker, "reused": False}


def main(argv: list[str] | None = None) -> int:
    """Run by the check in a process of its own: the GPU it generates on is free again for the engines after it."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.local_check.checkpoint", description=__doc__)
    parser.add_argument("--model-dir", type=Path, required=True, help="a directory with the model's config.json")
    parser.add_argument("--target", type=Path, required=True, help="where the checkpoint goes (reused if complete)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    print(json.dumps(write_random_checkpoint(args.model_dir, args.target, device=args.device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
