"""PD against the collocated replicas (`--mode both`, issue 29): the comparison per request rate, and the run's
result files (the JSON, and the chart beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tools.local_check.results import Report

RESULT_FILE = "local-check.json"


def figure(run: dict[str, Any], name: str, percentile: str = "p50") -> float:
    value = run.get(f"{percentile}_{name}_ms", run.get(f"median_{name}_ms") if percentile == "p50" else None)
    return float(value or 0.0)


# What issue 29's comparison reports per rate: the short stream's latencies (what PD is meant to keep flat while
# long prompts arrive), the long stream's time to first token, and the output throughput of both streams.
COMPARED = (
    ("short", "tpot", "p50"),
    ("short", "tpot", "p99"),
    ("short", "ttft", "p50"),
    ("short", "ttft", "p99"),
    ("long", "ttft", "p50"),
)


def compare_modes(bench: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per rate: each compared figure for PD and collocated, and the output tokens/s of both streams."""
    rows = []
    for rate in sorted({float(r["rate"]) for r in bench}):
        row: dict[str, Any] = {"rate": rate}
        for mode in ("pd", "collocated"):
            runs = {r["workload"]: r for r in bench if r.get("mode") == mode and float(r["rate"]) == rate}
            for workload, name, percentile in COMPARED:
                if workload in runs:
                    row[f"{mode} {workload} {name} {percentile} ms"] = figure(runs[workload], name, percentile)
            row[f"{mode} output tok/s"] = sum(float(r.get("output_throughput", 0.0)) for r in runs.values())
        rows.append(row)
    return rows


def write_outputs(report: Report, out: Path) -> tuple[Path, Path | None]:
    path = out / RESULT_FILE
    report.save(path)
    if not report.bench:
        return path, None
    try:
        title = f"local check: {report.facts['model']['source']} on {report.facts['host']['gpu_name']}"
        if report.facts.get("comparison"):
            return path, draw_comparison(report.facts["comparison"], out / "local-check.png", title=title)
        from tools.bench_chart import draw

        return path, draw(report.bench, [], out / "local-check.png", title=title)
    except ImportError:  # matplotlib is not in every image: the JSON holds every figure
        return path, None


def draw_comparison(rows: list[dict[str, Any]], path: Path, *, title: str) -> Path:
    """PD against collocated per request rate: the short stream's TPOT and TTFT (p50 solid, p99 dashed), the long
    stream's TTFT, and the output tokens/s."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 4, figsize=(20, 4.6), constrained_layout=True)
    rates = [row["rate"] for row in rows]
    panels = (("short TPOT (ms)", "short tpot"), ("short TTFT (ms)", "short ttft"), ("long TTFT (ms)", "long ttft"))
    for axis, (label, key) in zip(axes[:3], panels, strict=True):
        for mode, color in (("pd", "tab:blue"), ("collocated", "tab:orange")):
            for percentile, style in (("p50", "-"), ("p99", "--")):
                values = [row.get(f"{mode} {key} {percentile} ms") for row in rows]
                points = [(x, y) for x, y in zip(rates, values, strict=True) if y is not None]
                if points:
                    axis.plot(*zip(*points, strict=True), style, color=color, marker="o", label=f"{mode} {percentile}")
        axis.set(xlabel="request rate of each stream (req/s)", ylabel=label)
        axis.legend(fontsize=8)
    for mode, color in (("pd", "tab:blue"), ("collocated", "tab:orange")):
        axes[3].plot(
            rates, [row.get(f"{mode} output tok/s", 0) for row in rows], "-", color=color, marker="o", label=mode
        )
    axes[3].set(xlabel="request rate of each stream (req/s)", ylabel="output tokens/s")
    axes[3].legend(fontsize=8)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
