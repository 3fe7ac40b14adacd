"""The conformance step's verdict (tools/local_check/conformance.py sends the rows): PD held to the lone engine row by
row, and the engine settings tried on PD where only PD broke a grammar."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tools.local_check.conformance import FAULT_PATTERNS, Case, Observation, Row

GRAMMAR_FAULTS = ("Failed to advance FSM", "grammar rejected tokens")
# Engine-wide settings that change how the first decoded token meets the grammar, tried on PD when a grammar row
# failed there and not on the lone engine (vLLM 0.26: async scheduling defers the mask only for later steps; the
# guidance backend is llguidance's own mask and matcher).
GRAMMAR_REMEDIES: tuple[dict[str, Any], ...] = (
    {"async_scheduling": False},
    {"structured_outputs_config": {"backend": "guidance"}},
)


def _guard_refusal(observation: Observation, fld: str) -> str:
    """ "" when PD refused the field as serve_pd_guard does: 400, the field named as the error's param."""
    if observation.status != 400:
        return f"PD answered {observation.status}, not the guard's 400"
    if f'"param": "{fld}"' not in observation.sample and f"{fld}=" not in observation.sample:
        return "a 400 that does not name the field"
    return ""


def _pattern_names(lines: list[str]) -> set[str]:
    return {p for p in FAULT_PATTERNS if any(p in line for line in lines)}


def judge(all_cases: Sequence[Case], pd: list[Observation], lone: list[Observation]) -> list[Row]:
    rows = []
    for case, p, lo in zip(all_cases, pd, lone, strict=True):
        pd_only = sorted(_pattern_names(p.faults) - _pattern_names(lo.faults))
        problems = []
        if pd_only:
            problems.append(f"PD logged {', '.join(pd_only)}: {next(f for f in p.faults if pd_only[0] in f)[-160:]}")
        if case.pd_refuses:
            problems += [why for why in (_guard_refusal(p, case.pd_refuses),) if why]
            if lo.why:
                problems.append(f"the lone engine does not serve it either: {lo.why}")
        elif case.expect == "same":
            if p.status != lo.status:
                problems.append(f"PD {p.status}, the lone engine {lo.status}")
        else:
            if p.why:
                problems.append(f"PD: {p.why}")
            if lo.why:
                problems.append(f"lone engine: {lo.why}")
            if (p.status, bool(p.why)) != (lo.status, bool(lo.why)):
                problems.append(f"PD {p.status}, the lone engine {lo.status}")
        detail = (
            "; ".join(problems)
            if problems
            else (
                f"refused by PD as documented ({case.pd_refuses}), served by the lone engine"
                if case.pd_refuses
                else f"PD {p.status} as the lone engine"
                + (f", valid x{len(p.statuses)}" if case.expect == "served" else "")
            )
        )
        rows.append(Row(case.name, not problems, detail, asdict(p), asdict(lo)))
    return rows


def grammar_failures(all_cases: Sequence[Case], rows: Sequence[Row]) -> list[Case]:
    """The grammar rows PD failed with a grammar fault the lone engine did not log: what GRAMMAR_REMEDIES are tried
    on."""
    failed = []
    for case, row in zip(all_cases, rows, strict=True):
        pd_faults = [f for f in row.pd["faults"] if any(p in f for p in GRAMMAR_FAULTS)]
        lone_faults = [f for f in row.lone["faults"] if any(p in f for p in GRAMMAR_FAULTS)]
        if case.grammar and not row.ok and pd_faults and not lone_faults:
            failed.append(case)
    return failed


def remedy_verdict(observation: Observation) -> tuple[bool, str]:
    """Whether PD served a grammar row validly with no grammar fault under a remedy, and how."""
    faults = [f for f in observation.faults if any(p in f for p in GRAMMAR_FAULTS)]
    if faults:
        return False, f"statuses {observation.statuses}; {faults[0][-160:]}"
    if observation.why:
        return False, observation.why
    return True, f"valid x{len(observation.statuses)}, no grammar fault"
