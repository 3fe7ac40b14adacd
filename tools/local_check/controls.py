"""The lone engine's controls, each a step of the report: its noise floor (each prompt alone against all of them in
one batch), which sets parity's tolerance off the matched path, and the context control (each prompt with its first
token changed), which shows that parity on the matched path can fail."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.local_check.results import (
    CONTEXT_FACTOR,
    MATCHED_TOLERANCE,
    Answer,
    NoiseFloor,
    Report,
    context_sees,
    logprob_shift,
    noise_floor,
)


@dataclass(frozen=True)
class LoneEngine:
    """What the lone engine gives the application's checks: its answers (alone, batched, first token changed), the
    noise floor they set, the matched prompts' length, and its memory report."""

    result: dict[str, Any]
    noise: NoiseFloor | None
    matched_length: int
    measured: dict[str, float]

    @property
    def answers(self) -> list[dict[str, Any]]:
        answers: list[dict[str, Any]] = self.result.get("answers", [])
        return answers


def lone_controls(
    report: Report, lone: dict[str, Any], prompts: list[list[int]], matched_length: int
) -> NoiseFloor | None:
    """The lone engine's two controls, each a step: its noise floor (alone against batched) and whether its answers
    depend on the context (each prompt with its first token changed), judged where parity is exact: the matched
    prompts."""
    alone = [Answer.from_json(a) for a in lone.get("answers", [])]
    batched = [Answer.from_json(a) for a in lone.get("batched", [])]
    variants = [Answer.from_json(a) for a in lone.get("variants", [])]
    noise = noise_floor(alone, batched) if alone and len(batched) == len(alone) else None
    if noise is None:
        report.add("noise floor", False, "the lone engine returned no logprobs: nothing to set parity's tolerance from")
        return None
    report.facts["noise_floor"] = {
        "floor": noise.floor,
        "tolerance": noise.tolerance,
        "positions": noise.positions,
        "flips": noise.flips,
    }
    flips = [(len(p), f) for p, f in zip(prompts, noise.flips, strict=True) if f is not None]
    report.add(
        "noise floor",
        True,
        f"the lone engine alone against one batch: largest logprob shift {noise.floor:.4f} over {noise.positions}"
        f" positions -> tolerance {noise.tolerance:.3f} off the matched path; greedy tokens parted in {len(flips)}"
        f" of {len(prompts)}" + (": " + ", ".join(f"{n} tokens at {f}" for n, f in flips) if flips else ""),
    )
    shifts = [logprob_shift(a, v) for a, v in zip(alone, variants, strict=True)] if variants else []
    report.facts["context_shifts"] = [[len(p), s] for p, s in zip(prompts, shifts, strict=False)]
    matched = [s for p, s in zip(prompts, shifts, strict=False) if len(p) == matched_length]
    needed = CONTEXT_FACTOR * MATCHED_TOLERANCE
    report.add(
        "context",
        bool(matched) and all(context_sees(s, MATCHED_TOLERANCE) for s in matched),
        (
            "first prompt token changed -> the lone engine's first answer token moves by "
            + ", ".join(f"{s:.3f}" if s is not None else "?" for s in matched)
            + f" on the matched prompts ({matched_length} tokens; needed > {needed:.2f}); elsewhere "
            + ", ".join(
                f"{len(p)}: {s:.3f}" if s is not None else f"{len(p)}: ?"
                for p, s in zip(prompts, shifts, strict=False)
                if len(p) != matched_length
            )
            if matched
            else f"no matched prompt ({matched_length} tokens does not fit max_model_len): parity cannot be exact"
        ),
    )
    return noise
