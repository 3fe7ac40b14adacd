"""The KV transfer statistics that both the one-host check (tools/local_check/transfer.py) and `make verify`'s
post-deploy gate (tools/kv_transfer.py) read: the metric names vLLM 0.26's NIXL connector exports through Ray Serve
LLM's stat logger and NIXL 1.3.1's exporter, and a parser of the Prometheus text exposition. Standard library only:
it runs on the GPU host too."""

from __future__ import annotations

import re
from collections.abc import Iterator

METRIC_PREFIX = "ray_vllm_nixl_"
BYTES = "ray_vllm_nixl_bytes_transferred"
SECONDS = "ray_vllm_nixl_xfer_time_seconds"
FAILED = "ray_vllm_nixl_num_failed_transfers"
# NIXL's exporter: the agent's byte counters (prometheus-cpp may add _total).
NIXL_PREFIX = "agent_"
NIXL_BYTES = ("agent_rx_bytes", "agent_tx_bytes")

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+([-+0-9.eEinfINFNa]+)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, prefix: str = "") -> Iterator[tuple[str, dict[str, str], float]]:
    """Each sample of a Prometheus text exposition under `prefix`: its name, its labels and its value."""
    for line in text.splitlines():
        if not line.startswith(prefix) or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if match is not None:
            yield match.group(1), dict(_LABEL.findall(match.group(2) or "")), float(match.group(3))


def prometheus_totals(text: str, prefix: str = METRIC_PREFIX) -> dict[str, float]:
    """Each sample name under `prefix` summed over its series (workers, engines, nodes): histograms give
    `<name>_sum` and `<name>_count`, counters `<name>` or `<name>_total`."""
    totals: dict[str, float] = {}
    for name, _, value in samples(text, prefix):
        if not name.endswith("_bucket"):
            totals[name] = totals.get(name, 0.0) + value
    return totals
