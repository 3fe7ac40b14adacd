"""What NIXL moved for each PD request, from the engines' own statistics, and what the fit check predicts.

Two sources, both read before and after each request the check sends (one at a time, so the difference is that
request's):
- vLLM 0.26's NIXL connector records every finished transfer (and every failed one) in `NixlKVConnectorStats`
  (`distributed/kv_transfer/kv_connector/v1/nixl/stats.py`); Ray Serve LLM's stat logger (`RayPrometheusStatLogger`)
  exports them as Ray metrics from each node's metrics agent: `ray_vllm_nixl_bytes_transferred_count` is the number
  of transfers, exact. Its `_sum` is not: Ray 2.58's OpenTelemetry export rebuilds a histogram from bucket counts and
  bucket midpoints (`_private/telemetry/open_telemetry_metric_recorder.py`), and vLLM's byte buckets are a factor 4
  apart. Ray pushes metrics every `metrics_report_interval_ms` (10 s by default) and never more often than once a
  second (`SetReportInterval`'s floor in `stats.h`, mirrored in that module's `_resolve_gauge_ttl_seconds`); the local
  cluster sets it to that second.
- NIXL 1.3.1's own Prometheus exporter (`libtelemetry_exporter_prometheus.so`, in the image's wheel; turned on with
  `NIXL_TELEMETRY_ENABLE=y`, `NIXL_TELEMETRY_EXPORTER=prometheus`, `NIXL_TELEMETRY_PROMETHEUS_PORT`) counts the bytes
  each agent sent and received (`agent_tx_bytes`, `agent_rx_bytes`), exact: the decode engine's agent reads the
  prompt's blocks from the prefill engine's, so its counters are the request's bytes.

The decode engine reads the prompt's KV blocks whole: every attention layer's K and V for the tokens the prefill
computed, rounded up to the attention block size, plus, for hybrid models, each linear-attention layer's state.
vLLM 0.26 has the prefill engine of a Mamba-type model compute all but the last prompt token (`base_scheduler.py`,
`_truncate_mamba_request_for_prefill`), so the state it sends is h(N-1) and the decode engine recomputes token N.
"""

from __future__ import annotations

import math
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tools.nixl_metrics import (
    BYTES,
    FAILED,
    NIXL_BYTES,
    NIXL_PREFIX,
    SECONDS,
    prometheus_totals,
)

# What turns NIXL's exporter on in an engine's environment; the port is the node's (one agent per engine).
NIXL_TELEMETRY_ENV = {
    "NIXL_TELEMETRY_ENABLE": "y",
    "NIXL_TELEMETRY_EXPORTER": "prometheus",
    "NIXL_TELEMETRY_PROMETHEUS_LOCAL": "y",  # 127.0.0.1 only: NIXL's default is every address
}
NIXL_PORT_ENV = "NIXL_TELEMETRY_PROMETHEUS_PORT"
# Ray's metrics push interval for the local cluster's processes (RayConfig metrics_report_interval_ms): its fastest,
# Ray 2.58 floors anything lower to 1 s; Ray's own default is 10 s.
REPORT_INTERVAL_MS = 1000
RAY_DEFAULT_REPORT_INTERVAL_MS = 10000
# How long a request's totals must hold still once its transfer shows: longer than one push.
SETTLE_S = 1.5 * REPORT_INTERVAL_MS / 1000
# vLLM's attention block size on CUDA when nothing raises it (hybrid models log the raised size).
DEFAULT_BLOCK_SIZE = 16
BLOCK_SIZE_PATTERN = r"Setting attention block size to (\d+) tokens"
# The transfer's tolerance: half an attention block of every layer (a block more or less is caught), and 2 % of the
# hybrid state for its page padding (vLLM pads a Mamba page to the attention page: 0.76 % for Qwen3.5). On one H100
# (2026-12-05) NIXL moved exactly the prediction for every prompt of Qwen3.5-9B and Llama-3.1-8B.
TOLERANCE_BLOCKS = 0.5
TOLERANCE_SHARE = 0.02


@dataclass(frozen=True)
class Transfers:
    """The totals (or a request's share of them): transfers and failures from vLLM's statistics, bytes from NIXL's
    counters (None where its exporter did not answer), and vLLM's approximate bytes and seconds beside them."""

    count: float = 0.0
    failed: float = 0.0
    bytes: float | None = None
    approximate_bytes: float = 0.0
    approximate_seconds: float = 0.0

    @staticmethod
    def from_totals(totals: dict[str, float], nixl_bytes: float | None) -> Transfers:
        failed = sum(v for k, v in totals.items() if k.startswith(FAILED) and not k.endswith("_bucket"))
        return Transfers(
            totals.get(f"{BYTES}_count", 0.0),
            failed,
            nixl_bytes,
            totals.get(f"{BYTES}_sum", 0.0),
            totals.get(f"{SECONDS}_sum", 0.0),
        )

    def plus(self, other: Transfers) -> Transfers:
        return Transfers(
            self.count + other.count,
            self.failed + other.failed,
            None if self.bytes is None or other.bytes is None else self.bytes + other.bytes,
            self.approximate_bytes + other.approximate_bytes,
            self.approximate_seconds + other.approximate_seconds,
        )

    def minus(self, other: Transfers) -> Transfers:
        return Transfers(
            self.count - other.count,
            self.failed - other.failed,
            None if self.bytes is None or other.bytes is None else self.bytes - other.bytes,
            self.approximate_bytes - other.approximate_bytes,
            self.approximate_seconds - other.approximate_seconds,
        )


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode(errors="replace")
        return text


class TransferStats:
    """vLLM's NIXL totals from every Ray node's metrics agent, and the decode engine's NIXL byte counters."""

    def __init__(
        self,
        urls: Callable[[], list[str]],
        nixl_url: str | None,
        *,
        read: Callable[[str], str] = fetch,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.urls, self.nixl_url, self.read, self.sleep = urls, nixl_url, read, sleep

    def nixl_bytes(self) -> float | None:
        if self.nixl_url is None:
            return None
        try:
            totals = prometheus_totals(self.read(self.nixl_url), NIXL_PREFIX)
        except OSError:
            return None
        found = [v for k, v in totals.items() if k.removesuffix("_total") in NIXL_BYTES]
        return sum(found) if found else None

    def totals(self) -> Transfers:
        summed: dict[str, float] = {}
        for url in self.urls():
            try:
                text = self.read(url)
            except OSError:
                continue  # a node whose agent is not up (yet): its engines have not transferred either
            for name, value in prometheus_totals(text).items():
                summed[name] = summed.get(name, 0.0) + value
        return Transfers.from_totals(summed, self.nixl_bytes())

    def settled(self, settle_s: float = 1.0, timeout_s: float = 30.0) -> Transfers:
        """The totals once they hold still for settle_s: what earlier requests moved has all arrived."""
        deadline = time.monotonic() + timeout_s
        now = self.totals()
        while time.monotonic() < deadline:
            self.sleep(settle_s)
            later = self.totals()
            if later == now:
                break
            now = later
        return now

    def since(self, before: Transfers, *, timeout_s: float = 15.0, settle_s: float = SETTLE_S) -> Transfers:
        """What was transferred since `before`: once a transfer shows, the totals must hold still for settle_s (a
        request may take several transfers); nothing within timeout_s is a request served
        without a transfer. A transfer shows in its count (or its failure), which Ray's push brings up to a second
        after NIXL's own byte counters have moved: waiting for the bytes alone read a count of 0 when that second
        outlasted the settling."""
        deadline = time.monotonic() + timeout_s
        now = self.totals()
        while (now.count, now.failed) == (before.count, before.failed) and time.monotonic() < deadline:
            self.sleep(0.2)
            now = self.totals()
        return self.settled(settle_s, timeout_s=max(0.0, deadline - time.monotonic()) + settle_s).minus(before)


def metrics_urls() -> list[str]:
    """The metrics agents of the live Ray nodes (the driver is connected)."""
    import ray

    return [
        f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        for node in ray.nodes()
        if node.get("Alive") and node.get("MetricsExportPort")
    ]


def block_size(log_text: str) -> int:
    """The decode engine's attention block size: the raised size hybrid models log, else vLLM's default."""
    found = re.findall(BLOCK_SIZE_PATTERN, log_text)
    return int(found[-1]) if found else DEFAULT_BLOCK_SIZE


def transferred_tokens(prompt_tokens: int, hybrid: bool) -> int:
    """The prompt tokens whose KV the prefill engine computes and sends: all but the last for Mamba-type models."""
    return prompt_tokens - 1 if hybrid and prompt_tokens > 1 else prompt_tokens


@dataclass(frozen=True)
class TransferVerdict:
    prompt_tokens: int
    measured: Transfers
    predicted_bytes: float
    tolerance_bytes: float

    @property
    def ok(self) -> bool:
        return (
            self.measured.count > 0
            and self.measured.failed == 0
            and self.measured.bytes is not None
            and abs(self.measured.bytes - self.predicted_bytes) <= self.tolerance_bytes
        )

    def describe(self) -> str:
        m = self.measured
        if m.count <= 0:
            return f"{self.prompt_tokens} tokens: no transfer" + (f" ({m.failed:.0f} failed)" if m.failed else "")
        moved = (
            f"{m.bytes / 2**20:.1f} MiB"
            if m.bytes is not None
            else "bytes not counted (NIXL's exporter did not answer)"
        )
        return (
            f"{self.prompt_tokens} tokens: {moved} in {m.count:.0f} transfer(s) (predicted"
            f" {self.predicted_bytes / 2**20:.1f} ± {self.tolerance_bytes / 2**20:.1f})"
            + (f", {m.failed:.0f} failed" if m.failed else "")
        )


def judge_transfer(
    prompt_tokens: int, measured: Transfers, predicted: dict[str, Any], block: int, hybrid: bool
) -> TransferVerdict:
    """The request's transfer against the fit check's per-token KV and hybrid state (plan['predicted'][phase])."""
    per_token = float(predicted["kv_bytes_per_token"])
    tokens = transferred_tokens(prompt_tokens, hybrid)
    blocks = math.ceil(tokens / block)
    state = float(predicted.get("state_bytes", 0.0))
    expected = blocks * block * per_token + state
    return TransferVerdict(
        prompt_tokens, measured, expected, TOLERANCE_BLOCKS * block * per_token + TOLERANCE_SHARE * state
    )
