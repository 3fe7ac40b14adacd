"""What NIXL moved for `make verify`'s completion, and how fast, from the decode engines' own statistics.

vLLM 0.26's NIXL connector records each finished transfer on the decode engine (it pulls the prompt's KV blocks):
its bytes and its time, from post to the first poll that saw it done (`kv_connector/v1/nixl/stats.py`). Ray Serve
LLM exports them through each node's metrics agent as `ray_vllm_nixl_*` histograms (tools/local_check/transfer.py
says more). Under Ray 2.58's OpenTelemetry export a histogram's `_count` and bucket counts are exact and its `_sum`
is made of bucket midpoints (recorded in tests/data/ray-2.58-nixl-metrics.txt), so each figure here is a range: a
transfer lies between its bucket's bounds. vLLM's byte buckets are a factor 4 apart, its time buckets 1.3 to 5.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from k8s_constructs.ray_facts import GROUP_LABEL, METRICS_PORT, WORKER_CONTAINER
from preflight.cluster_access import Kubectl
from settings import Settings
from tools.cluster import worker_kv_paths
from tools.local_check.transfer import BYTES, FAILED, METRIC_PREFIX, SECONDS, prometheus_totals
from tools.verify_steps import Step, check_kv_path, kv_path_advice

_BUCKET = re.compile(r'^(\w+)_bucket\{.*\ble="([^"]+)".*\}\s+(\S+)\s*$')
MB = 1e6  # MB/s, the unit of a link's Gbps / 8 * 1000


def buckets(text: str, name: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound (+Inf as inf), summed over its series."""
    found: dict[float, float] = {}
    for line in text.splitlines():
        match = _BUCKET.match(line.strip())
        if match and match.group(1) == name:
            bound = math.inf if match.group(2) == "+Inf" else float(match.group(2))
            found[bound] = found.get(bound, 0.0) + float(match.group(3))
    return found


def _range(before: str, after: str, name: str) -> tuple[float, float]:
    """The total of what was observed between the two readings, bounded by the buckets its observations fell in."""
    was, now = buckets(before, name), buckets(after, name)
    low = high = 0.0
    below, counted = 0.0, 0.0
    for bound in sorted(now):
        cumulative = now[bound] - was.get(bound, 0.0)
        n = cumulative - counted
        if n:
            low, high = low + n * below, high + n * bound
        below, counted = bound, cumulative
    return low, high


@dataclass(frozen=True)
class Measured:
    """The transfers between two readings of the decode engines' statistics: count and failures exact, the bytes and
    seconds as (low, high)."""

    transfers: float
    failed: float
    bytes: tuple[float, float]
    seconds: tuple[float, float]

    @property
    def rate_mb_s(self) -> tuple[float, float]:
        (b_low, b_high), (s_low, s_high) = self.bytes, self.seconds
        return (b_low / s_high if s_high else 0.0, b_high / s_low if s_low else math.inf)

    def describe(self, link_gbps: float) -> str:
        (b_low, b_high), (s_low, s_high), (r_low, r_high) = self.bytes, self.seconds, self.rate_mb_s
        link = f"the link: {link_gbps:g} Gbps = {link_gbps * 125:,.0f} MB/s" if link_gbps else "the link's rate unknown"
        return (
            f"{self.transfers:.0f} transfer(s), {b_low / 2**20:,.1f}-{b_high / 2**20:,.1f} MiB in"
            f" {s_low * 1000:,.0f}-{s_high * 1000:,.0f} ms: {r_low / MB:,.0f}-{r_high / MB:,.0f} MB/s ({link};"
            " each figure bounded by vLLM's histogram buckets)"
        )


def measure(before: str, after: str) -> Measured:
    """What the decode engines' metrics say moved between the two readings (their `ray_vllm_nixl_` lines)."""
    was, now = prometheus_totals(before), prometheus_totals(after)
    failed = sum(v for k, v in now.items() if k.startswith(FAILED)) - sum(
        v for k, v in was.items() if k.startswith(FAILED)
    )
    return Measured(
        now.get(f"{BYTES}_count", 0.0) - was.get(f"{BYTES}_count", 0.0),
        failed,
        _range(before, after, BYTES),
        _range(before, after, SECONDS),
    )


TRANSFER_WAIT_S = 30  # Ray's metrics agents take the engines' statistics every 10 s (metrics_report_interval_ms)
POLL_S = 5
DECODE_GROUP = "decode"  # the decode engines' worker group (k8s_constructs/ray_cluster_groups.py)


def decode_metrics(settings: Settings, kubectl: Kubectl, pods: dict[str, Any]) -> str:
    """The `ray_vllm_nixl_` lines of every decode worker's node metrics agent, read inside each pod."""
    script = (
        f"import urllib.request; text = urllib.request.urlopen('http://127.0.0.1:{METRICS_PORT}/metrics', timeout=10)"
        ".read().decode(); print(''.join(line + chr(10) for line in text.splitlines()"
        f" if line.startswith('{METRIC_PREFIX}')))"
    )
    names = [
        p["metadata"]["name"]
        for p in pods.get("items", [])
        if p["metadata"].get("labels", {}).get(GROUP_LABEL) == DECODE_GROUP
    ]
    return "".join(
        kubectl(["exec", "-n", settings.namespace, pod, "-c", WORKER_CONTAINER, "--", "python", "-c", script]).stdout
        for pod in names
    )


def check_transfer(settings: Settings, measured: Measured | None) -> Step:
    """The completion's KV cache moved: at least one transfer recorded by the decode engines, none failed."""
    if measured is None:
        return Step("transfer", False, "skipped: the RayService is not ready", "")
    ok = measured.transfers >= 1 and not measured.failed
    if measured.transfers < 1:
        detail = (
            f"no KV transfer recorded by the decode engines within {TRANSFER_WAIT_S} s of the completion (a decode"
            " engine that computed the prompt itself, or statistics that did not arrive)"
        )
    else:
        detail = measured.describe(settings.gpu_node.network_gbps)
        detail += f"; {measured.failed:.0f} failed" if measured.failed else ""
    return Step("transfer", ok, detail, "" if ok else kv_path_advice(settings))


class KvWatch:
    """The KV path and the decode engines' statistics read before `make verify`'s completion, then after it: the
    kv-path and transfer steps judge what changed in between."""

    def __init__(
        self, settings: Settings, kubectl: Kubectl, pods: dict[str, Any], workers: list[str], *, ready: bool
    ) -> None:
        self.settings, self.kubectl, self.pods, self.workers, self.ready = settings, kubectl, pods, workers, ready
        self.paths = worker_kv_paths(settings, kubectl, workers) if ready else {}
        self.metrics = decode_metrics(settings, kubectl, pods) if ready else ""
        self.report: dict[str, Any] = {}

    def steps(self, *, sleep: Callable[[float], None]) -> list[Step]:
        if not self.ready:
            skipped = "skipped: the RayService is not ready"
            look = f"kubectl describe rayservice -n {self.settings.namespace} {self.settings.ray_service_name}"
            return [Step("kv-path", False, skipped, look), Step("transfer", False, skipped, look)]
        after = worker_kv_paths(self.settings, self.kubectl, self.workers)
        for attempt in range(TRANSFER_WAIT_S // POLL_S + 1):
            if attempt:
                sleep(POLL_S)
            measured = measure(self.metrics, decode_metrics(self.settings, self.kubectl, self.pods))
            if measured.transfers >= 1:
                break
        self.report = {
            "kv_path": {pod: got.path for pod, got in after.items()},
            "transfer": asdict(measured) | {"rate_mb_s": measured.rate_mb_s},
        }
        return [check_kv_path(self.settings, self.paths, after), check_transfer(self.settings, measured)]
