"""The chart of a `make bench-serving` run, beside its JSON: time to first token and time per output token (p50 and
p99) per request rate, one line per workload, and the Ray worker pods of each phase and the GPU nodes over the
run's time, so that PD (short requests' TPOT flat while long prompts rise) and scaling read at a glance. TPOT, not
ITL: Ray Serve LLM streams tokens in 50 ms batches, so a decode faster than that shows in ITL as 0 and 50 ms."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # after the backend is chosen

PANELS = (("TTFT (ms)", "ttft"), ("TPOT (ms)", "tpot"))
STYLES = {"long": "tab:red", "short": "tab:blue", "ramp": "tab:green"}


def draw(runs: Sequence[dict[str, Any]], timeline: Sequence[dict[str, Any]], path: Path, *, title: str) -> Path:
    # The scaling panel only where there is a timeline (the one-host check has none: no nodes come and go).
    figure, axes = plt.subplots(1, 3 if timeline else 2, figsize=(16 if timeline else 11, 4.8), constrained_layout=True)
    for axis, (label, figure_key) in zip(axes[:2], PANELS, strict=True):
        for workload in sorted({str(r["workload"]) for r in runs}):
            rows = sorted((r for r in runs if r["workload"] == workload), key=lambda r: float(r["rate"]))
            rates = [float(r["rate"]) for r in rows]
            color = STYLES.get(workload, "tab:gray")
            for percentile, style in (("p50", "-"), ("p99", "--")):
                values = [r.get(f"{percentile}_{figure_key}_ms") for r in rows]
                points = [(x, y) for x, y in zip(rates, values, strict=True) if y is not None]
                if points:
                    axis.plot(
                        *zip(*points, strict=True), style, marker="o", color=color, label=f"{workload} {percentile}"
                    )
        axis.set_xlabel("request rate (req/s)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if timeline:
        scaling = axes[2]
        start = float(timeline[0]["t"])
        minutes = [(float(s["t"]) - start) / 60 for s in timeline]
        for key, color in (("prefill", "tab:purple"), ("decode", "tab:orange"), ("gpu_nodes", "black")):
            scaling.step(
                minutes, [s.get(key, 0) for s in timeline], where="post", color=color, label=key.replace("_", " ")
            )
        scaling.legend(fontsize=8)
        scaling.set_xlabel("minutes into the run")
        scaling.set_ylabel("Ray worker pods / GPU nodes")
        scaling.grid(alpha=0.3)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
