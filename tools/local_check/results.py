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
class Answer:
    """One greedy completion: its token ids and, per generated position, the top-k logprobs by token id."""

    tokens: list[int]
    top_logprobs: list[dict[int, float]] = field(default_factory=list)

    @staticmethod
    def from_json(value: dict[str, Any]) -> Answer:
        return Answer(
            [int(t) for t in value.get("tokens", [])],
            [{int(k): float(v) for k, v in position.items()} for position in value.get("top_logprobs") or []],
        )

    def to_json(self) -> dict[str, Any]:
        """As the lone engine writes its answers (token ids as strings: JSON keys)."""
        return {"tokens": self.tokens, "top_logprobs": [{str(k): v for k, v in p.items()} for p in self.top_logprobs]}

    def margin(self, position: int) -> float | None:
        """Top-1 minus top-2 logprob at a generated position: how far greedy is from choosing another token."""
        if position >= len(self.top_logprobs) or len(self.top_logprobs[position]) < 2:
            return None
        first, second = sorted(self.top_logprobs[position].values(), reverse=True)[:2]
        return first - second


def logprob_shift(a: Answer, b: Answer, position: int = 0) -> float | None:
    """The largest |logprob difference| at one position over the tokens both answers rank in their top-k, and
    infinity where their top-1 tokens differ outside each other's top-k (None: no logprobs to compare)."""
    if position >= len(a.top_logprobs) or position >= len(b.top_logprobs):
        return None
    left, right = a.top_logprobs[position], b.top_logprobs[position]
    shared = set(left) & set(right)
    if not shared:
        return float("inf")
    return max(abs(left[token] - right[token]) for token in shared)


def first_difference(a: list[int], b: list[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


# Two tolerances for the first generated token's logprobs through PD against the lone engine's.
#
# Matched: a prompt of max_num_batched_tokens + 1 tokens has its last token computed by the lone engine in a step of
# its own, from the KV cache (and the hybrid state) of the tokens before it - what the decode engine does with the
# transferred ones. There the two compute the same thing, and PD must equal the lone engine: on one H100 (2026-12-05)
# the first-token logprobs were identical (shift 0.000) and all 32 greedy tokens equal, for Qwen3.5-9B and
# Llama-3.1-8B alike, where a changed first prompt token moved them by 0.25 and 0.35. MATCHED_TOLERANCE is well
# below one bf16 step of these logprobs (1/16 at their magnitude: the other lengths differed by multiples of it).
#
# Other lengths: the lone engine computes the last prompt token inside a larger chunk, the decode engine alone,
# so they differ by bf16 rounding - as much as the lone engine differs from itself in another batch composition
# (the noise floor): NOISE_FACTOR x that floor, never below MIN_TOLERANCE. With random weights that tolerance is
# wide (1.49 nats for Qwen3.5, 0.63 for Llama on 2026-12-05): these rows catch gross faults only.
MATCHED_TOLERANCE = 0.01
NOISE_FACTOR = 4.0
MIN_TOLERANCE = 0.02
# The context control: on the matched prompts, a changed first token must move the first answer token's logprobs by
# this multiple of the matched tolerance, or parity there could not see a fault in the transferred KV cache.
CONTEXT_FACTOR = 5.0


@dataclass(frozen=True)
class NoiseFloor:
    """The lone engine against itself: each prompt alone, then all in one batch."""

    floor: float  # the largest logprob shift before the two answers' tokens part
    positions: int  # positions compared
    flips: list[int | None]  # per prompt: where the batched answer's tokens part from the lone one's

    @property
    def tolerance(self) -> float:
        return max(NOISE_FACTOR * self.floor, MIN_TOLERANCE)


def noise_floor(alone: list[Answer], batched: list[Answer]) -> NoiseFloor | None:
    """None when the lone engine returned no logprobs (nothing to measure)."""
    shifts: list[float] = []
    flips: list[int | None] = []
    for a, b in zip(alone, batched, strict=True):
        part = first_difference(a.tokens, b.tokens)
        flips.append(part)
        for position in range(part if part is not None else len(a.tokens)):
            shift = logprob_shift(a, b, position)
            if shift is None:
                return None
            shifts.append(shift)
    if not shifts:
        return None
    return NoiseFloor(max(shifts), len(shifts), flips)


@dataclass(frozen=True)
class ParityRow:
    prompt_tokens: int
    pd_tokens: list[int]
    reference_tokens: list[int]
    first_token_shift: float | None = None  # PD against the lone engine, at the first generated token
    tolerance: float | None = None
    near_tie_at: int | None = None  # the first position where the lone engine's top-2 margin is below tolerance
    context_shift: float | None = None  # the lone engine against itself on the prompt with its first token changed
    transfer_bytes: float | None = None  # what the decode engine received for this request (NIXL's statistics)
    matched: bool = False  # the lone engine computed the last prompt token alone, as the decode engine does

    @property
    def equal(self) -> bool:
        return bool(self.pd_tokens) and self.pd_tokens == self.reference_tokens

    @property
    def first_difference(self) -> int | None:
        return first_difference(self.pd_tokens, self.reference_tokens)

    @property
    def ok(self) -> bool:
        """The first token's logprobs within tolerance, and the tokens equal up to the first near-tie (a greedy
        choice bf16 noise can flip); without logprobs (a stand-in without them), exact token equality."""
        if not self.pd_tokens:
            return False
        if self.tolerance is None:
            return self.equal
        if self.first_token_shift is None or self.first_token_shift > self.tolerance:
            return False
        part = self.first_difference
        return part is None or (self.near_tie_at is not None and part >= self.near_tie_at)

    def describe(self) -> str:
        part = self.first_difference
        text = f"{self.prompt_tokens} tokens{' (matched)' if self.matched else ''}: " + (
            "equal" if part is None else f"differs at {part}" + ("" if self.ok else " (not at a near-tie)")
        )
        if self.first_token_shift is not None:
            text += f", first-token shift {self.first_token_shift:.3f}"
        if self.near_tie_at is not None and part is not None:
            text += f", near-tie at {self.near_tie_at}"
        return text


def parity_row(
    prompt_tokens: int,
    pd: Answer,
    lone: Answer,
    noise: NoiseFloor | None,
    variant: Answer | None = None,
    *,
    matched: bool = False,
) -> ParityRow:
    """One prompt's verdict: on the matched path against MATCHED_TOLERANCE, elsewhere against the noise floor's
    tolerance (no logprobs at all: exact token equality)."""
    tolerance = MATCHED_TOLERANCE if matched else (noise.tolerance if noise is not None else None)
    near_tie = None
    if tolerance is not None:
        near_tie = next(
            (i for i in range(len(lone.tokens)) if (m := lone.margin(i)) is not None and m < tolerance), None
        )
    return ParityRow(
        prompt_tokens,
        pd.tokens,
        lone.tokens,
        logprob_shift(pd, lone) if tolerance is not None else None,
        tolerance,
        near_tie,
        logprob_shift(lone, variant) if variant is not None else None,
        matched=matched,
    )


def context_sees(shift: float | None, tolerance: float) -> bool:
    """Whether a changed first prompt token moved the first answer token's logprobs clearly past the tolerance."""
    return shift is not None and shift > CONTEXT_FACTOR * tolerance


def parity_lengths(
    max_model_len: int, max_tokens: int, *, count: int = 4, shortest: int = 40, alone: int | None = None
) -> list[int]:
    """Prompt lengths from `shortest` to the longest that leaves room for the answer, spread geometrically, and
    `alone` (the length whose last token the lone engine computes in a step of its own, as the decode engine does:
    one past its max_num_batched_tokens) where it fits."""
    longest = max_model_len - max_tokens - 8  # a few tokens of room for the chat-free completion
    if longest < shortest:
        return [max(1, longest)]
    if count == 1:
        return [longest]
    ratio = (longest / shortest) ** (1 / (count - 1))
    lengths = {round(shortest * ratio**k) for k in range(count - 1)} | {longest}
    if alone is not None and shortest < alone < longest:
        lengths.add(alone)
    return sorted(lengths)


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


# The KV cache vLLM gives, against what the fit check predicts: never less (the check would pass a config that does
# not start), and at most this much more (a check this pessimistic refuses configurations that fit).
KV_ABOVE = 0.30
WEIGHTS_WITHIN = 0.03


def compare_memory(predicted: dict[str, float], measured: dict[str, float]) -> list[MemoryRow]:
    """The fit check's prediction against one engine's report. The weights within 3 %; the overhead (activation
    peak + memory outside torch + CUDA graphs) at or below the prediction, where the engine profiled (an engine given
    kv_cache_memory_bytes does not); the KV cache at least the prediction and at most 30 % above it."""
    rows = []
    weights = measured.get("weights_gib")
    rows.append(
        MemoryRow(
            "weights",
            predicted["weights_gib"],
            weights,
            weights is not None
            and abs(weights - predicted["weights_gib"]) <= WEIGHTS_WITHIN * predicted["weights_gib"],
            "within 3 %",
        )
    )
    parts = [measured.get(k) for k in ("activation_peak_gib", "non_torch_gib")]
    if all(p is not None for p in parts):
        overhead = sum(p for p in parts if p is not None) + measured.get("graphs_gib", 0.0)
        rows.append(
            MemoryRow(
                "overhead",
                predicted["overhead_gib"],
                overhead,
                overhead <= predicted["overhead_gib"],
                "activation peak + outside torch (+ CUDA graphs): the prediction must not be below it",
            )
        )
    kv = measured.get("kv_cache_gib")
    low, high = predicted["kv_cache_gib"], predicted["kv_cache_gib"] * (1 + KV_ABOVE)
    rows.append(
        MemoryRow(
            "KV cache",
            predicted["kv_cache_gib"],
            kv,
            kv is not None and low <= kv <= high,
            f"between the prediction and {KV_ABOVE:.0%} above it ({low:.2f}-{high:.2f} GiB)",
        )
    )
    return rows


def describe_memory(rows: list[MemoryRow]) -> str:
    return (
        "; ".join(
            f"{r.figure} {r.measured_gib:.2f}" if r.measured_gib is not None else f"{r.figure} not logged" for r in rows
        )
        + " (predicted "
        + ", ".join(f"{r.predicted_gib:.2f}" for r in rows)
        + ")"
    )


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
