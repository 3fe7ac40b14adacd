"""What the one-host check recorded, judged: greedy parity, vLLM's memory report against the fit check's prediction,
and the report itself (saved after every step). Standard library only, like tools/local_check/shape.py."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.local_check.shape import Change


@dataclass(frozen=True)
class ParityRow:
    prompt_tokens: int
    pd_tokens: list[int]
    reference_tokens: list[int]

    @property
    def equal(self) -> bool:
        return bool(self.pd_tokens) and self.pd_tokens == self.reference_tokens

    @property
    def first_difference(self) -> int | None:
        for index, (a, b) in enumerate(zip(self.pd_tokens, self.reference_tokens, strict=False)):
            if a != b:
                return index
        return (
            None
            if len(self.pd_tokens) == len(self.reference_tokens)
            else min(len(self.pd_tokens), len(self.reference_tokens))
        )


def parity_lengths(max_model_len: int, max_tokens: int, *, count: int = 4, shortest: int = 40) -> list[int]:
    """Prompt lengths from `shortest` to the longest that leaves room for the answer, spread geometrically."""
    longest = max_model_len - max_tokens - 8  # a few tokens of room for the chat-free completion
    if longest < shortest:
        return [max(1, longest)]
    if count == 1:
        return [longest]
    ratio = (longest / shortest) ** (1 / (count - 1))
    return sorted({round(shortest * ratio**k) for k in range(count - 1)} | {longest})


# vLLM 0.26's memory report (v1/worker/gpu_worker.py, gpu_model_runner.py, utils/mem_utils.py, core.py): the profile
# line is logged at DEBUG, so the lone engine runs with VLLM_LOGGING_LEVEL=DEBUG.
_MEMORY_PATTERNS = {
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "activation_peak_gib": r"torch peak memory increase: ([\d.]+) ?GiB",
    "non_torch_gib": r"non-torch forward increase memory: ([\d.]+) ?GiB",
    "kv_cache_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "graphs_gib": r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB",
    "engine_init_s": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
}


def memory_report(log_text: str) -> dict[str, float]:
    """The figures of vLLM's memory report found in an engine's log (the last of each)."""
    found: dict[str, float] = {}
    for key, pattern in _MEMORY_PATTERNS.items():
        matches = re.findall(pattern, log_text)
        if matches:
            found[key] = float(matches[-1].replace(",", ""))
    return found


@dataclass(frozen=True)
class MemoryRow:
    figure: str
    predicted_gib: float
    measured_gib: float | None
    ok: bool
    note: str


def compare_memory(predicted: dict[str, float], measured: dict[str, float]) -> list[MemoryRow]:
    """The fit check's prediction against the lone engine's report. The check must be conservative: its overhead
    (activation peak + memory outside torch + CUDA graphs) at or above what vLLM measured, so that a config it
    passes starts; the weights within 3 %."""
    rows = []
    weights = measured.get("weights_gib")
    rows.append(
        MemoryRow(
            "weights",
            predicted["weights_gib"],
            weights,
            weights is not None and abs(weights - predicted["weights_gib"]) <= 0.03 * predicted["weights_gib"],
            "within 3 %",
        )
    )
    parts = [measured.get(k) for k in ("activation_peak_gib", "non_torch_gib")]
    overhead = (
        sum(p for p in parts if p is not None) + measured.get("graphs_gib", 0.0)
        if all(p is not None for p in parts)
        else None
    )
    rows.append(
        MemoryRow(
            "overhead",
            predicted["overhead_gib"],
            overhead,
            overhead is not None and overhead <= predicted["overhead_gib"],
            "activation peak + outside torch (+ CUDA graphs): the prediction must not be below it",
        )
    )
    kv = measured.get("kv_cache_gib")
    rows.append(
        MemoryRow(
            "KV cache",
            predicted["kv_cache_gib"],
            kv,
            kv is not None and kv >= predicted["one_sequence_gib"],
            f"at least one sequence of max_model_len ({predicted['one_sequence_gib']:.2f} GiB); predicted is what the"
            " budget leaves",
        )
    )
    return rows


@dataclass
class Step:
    name: str
    ok: bool
    detail: str
    at_s: float = 0.0  # seconds since the run started, when the step ended


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    parity: list[ParityRow] = field(default_factory=list)
    memory: dict[str, list[MemoryRow]] = field(default_factory=dict)
    bench: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None  # where add() saves the report after each step
    started: float = field(default_factory=time.monotonic)

    def add(self, name: str, ok: bool, detail: str) -> Step:
        step = Step(name, ok, detail, round(time.monotonic() - self.started, 1))
        self.steps.append(step)
        # Printed as it happens too: a run cut short shows how far it got and when.
        print(f"[{step.at_s:7.1f} s] {'ok  ' if ok else 'FAIL'} {name}: {detail[:300]}", flush=True)
        if self.path is not None:
            self.save(self.path)
        return step

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, default=str) + "\n")

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(step.ok for step in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "steps": [asdict(s) for s in self.steps],
            "changes": [asdict(c) for c in self.changes],
            "parity": [{**asdict(p), "equal": p.equal, "first_difference": p.first_difference} for p in self.parity],
            "memory": {phase: [asdict(row) for row in rows] for phase, rows in self.memory.items()},
            "bench": self.bench,
            **self.facts,
        }
