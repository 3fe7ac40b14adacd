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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from k8s_constructs.ray_facts import GROUP_LABEL, METRICS_PORT, WORKER_CONTAINER
from k8s_constructs.serve_config import Phase
from preflight.cluster_access import Kubectl
from settings import Settings
from tools.cluster import worker_exec, worker_kv_paths
from tools.nixl_metrics import BYTES, FAILED, METRIC_PREFIX, SECONDS, samples
from tools.verify_steps import NOT_READY, Step, check_kv_path, describe_rayservice, kv_path_advice

MB = 1e6  # bytes in the MB of MB/s
Series = tuple[str, frozenset[tuple[str, str]]]  # a metric's base name and its labels but `le`


def series(text: str) -> dict[Series, dict[str, float]]:
    """Each series of the text (a pod's, an engine's): a histogram's cumulative bucket counts by `le` and its
    `count`, a counter's `value`. The `_sum` lines are left out: bucket midpoints under Ray 2.58."""
    found: dict[Series, dict[str, float]] = {}
    for name, labels, value in samples(text):
        le = labels.pop("le", None)
        if name.endswith("_bucket") and le is not None:
            base, kind = name.removesuffix("_bucket"), le
        elif name.endswith("_count"):
            base, kind = name.removesuffix("_count"), "count"
        elif name.endswith("_sum"):
            continue
        else:
            base, kind = name.removesuffix("_total"), "value"
        found.setdefault((base, frozenset(labels.items())), {})[kind] = value
    return found


def _since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """One series' growth between two readings; a series that went down was restarted (its engine or pod): all of
    its later reading is new."""
    total = "count" if "count" in after else "value"
    if after.get(total, 0.0) < before.get(total, 0.0):
        before = {}
    return {kind: value - before.get(kind, 0.0) for kind, value in after.items()}


def _bounds(grown: dict[str, float]) -> tuple[float, float]:
    """The total of a histogram's new observations, bounded by the buckets they fell in."""
    edges = sorted(
        (math.inf if le == "+Inf" else float(le), n) for le, n in grown.items() if le not in ("count", "value")
    )
    low = high = below = counted = 0.0
    for bound, cumulative in edges:
        if cumulative > counted:
            low, high = low + (cumulative - counted) * below, high + (cumulative - counted) * bound
        below, counted = bound, cumulative
    return low, high


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _shown(value: float | None, scale: float = 1.0, decimals: int = 0) -> str:
    """A bound as text: "?" where it is not finite."""
    return "?" if value is None or not math.isfinite(value) else f"{value / scale:,.{decimals}f}"


@dataclass(frozen=True)
class Measured:
    """The transfers between two readings of the decode engines' statistics: count and failures exact, the bytes and
    seconds as (low, high), high infinite where an observation fell in the +Inf bucket."""

    transfers: float
    failed: float
    bytes: tuple[float, float]
    seconds: tuple[float, float]

    @property
    def rate_mb_s(self) -> tuple[float | None, float | None]:
        """(low, high) MB/s; None where a bound is not finite (a time in the first bucket has no lower bound)."""
        (b_low, b_high), (s_low, s_high) = self.bytes, self.seconds
        low = b_low / s_high / MB if s_high and math.isfinite(s_high) else None
        high = b_high / s_low / MB if s_low and math.isfinite(b_high) else None
        return low, high

    def to_json(self) -> dict[str, Any]:
        """For verify-result.json: an unbounded figure is null (JSON has no Infinity)."""
        return {
            "transfers": self.transfers,
            "failed": self.failed,
            "bytes": [_finite(v) for v in self.bytes],
            "seconds": [_finite(v) for v in self.seconds],
            "rate_mb_s": list(self.rate_mb_s),
        }

    def describe(self, link_gbps: float) -> str:
        (b_low, b_high), (s_low, s_high), (r_low, r_high) = self.bytes, self.seconds, self.rate_mb_s
        link = f"the link: {link_gbps:g} Gbps = {link_gbps * 1e9 / 8 / MB:,.0f} MB/s" if link_gbps else "link unknown"
        return (
            f"{self.transfers:.0f} transfer(s), {_shown(b_low, 2**20, 1)}-{_shown(b_high, 2**20, 1)} MiB in"
            f" {_shown(s_low, 1e-3)}-{_shown(s_high, 1e-3)} ms: {_shown(r_low)}-{_shown(r_high)} MB/s ({link};"
            " each figure bounded by vLLM's histogram buckets)"
        )


def measure(before: str, after: str) -> Measured:
    """What the decode engines' statistics say moved between the two readings (their `ray_vllm_nixl_` lines), series
    by series: a series gone from the later reading is left out, one restarted counts from zero."""
    was = series(before)
    grown = {key: _since(was.get(key, {}), now) for key, now in series(after).items()}

    def of(base: str) -> list[dict[str, float]]:
        return [g for (name, _), g in grown.items() if name == base]

    byte_bounds, time_bounds = [_bounds(g) for g in of(BYTES)], [_bounds(g) for g in of(SECONDS)]
    return Measured(
        sum(g.get("count", 0.0) for g in of(BYTES)),
        sum(g.get("value", 0.0) for g in of(FAILED)),
        (sum(b[0] for b in byte_bounds), sum(b[1] for b in byte_bounds)),
        (sum(t[0] for t in time_bounds), sum(t[1] for t in time_bounds)),
    )


TRANSFER_WAIT_S = 30  # Ray pushes the engines' statistics to its metrics agents every 10 s (metrics_report_interval_ms)
POLL_S = 5
AGENT = f"127.0.0.1:{METRICS_PORT}/metrics"  # the pod's Ray metrics agent, read from inside the pod
DECODE: Phase = "decode"  # the decode engines' worker group


def decode_metrics(settings: Settings, kubectl: Kubectl, pods: dict[str, Any]) -> tuple[str, list[str]]:
    """The `ray_vllm_nixl_` lines of every decode worker's node metrics agent, read inside each pod, and the pods
    whose agent could not be read (with kubectl's last words)."""
    script = (
        f"import urllib.request; text = urllib.request.urlopen('http://{AGENT}', timeout=10)"
        f".read().decode(); print('\\n'.join(line for line in text.splitlines() if line.startswith('{METRIC_PREFIX}')))"
    )
    names = [
        p["metadata"]["name"]
        for p in pods.get("items", [])
        if p["metadata"].get("labels", {}).get(GROUP_LABEL) == DECODE
    ]
    text, unread = "", []
    for pod in names:
        got = worker_exec(settings, kubectl, pod, "python", "-c", script)
        if got.returncode == 0:
            text += got.stdout + "\n"
        else:
            unread.append(f"{pod}: {got.stderr.strip()[-160:] or f'exit {got.returncode}'}")
    return text, unread


def check_transfer(settings: Settings, measured: Measured, unread: list[str]) -> Step:
    """The completion's KV cache moved: at least one transfer recorded by the decode engines, none failed."""
    if unread:
        look = f"kubectl exec -n {settings.namespace} POD -c {WORKER_CONTAINER} -- curl -s {AGENT}"
        return Step("transfer", False, f"the decode engines' statistics could not be read: {'; '.join(unread)}", look)
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
        self.metrics = decode_metrics(settings, kubectl, pods)[0] if ready else ""
        self.report: dict[str, Any] = {}

    def steps(self, *, sleep: Callable[[float], None]) -> list[Step]:
        if not self.ready:
            look = describe_rayservice(self.settings)
            return [Step("kv-path", False, NOT_READY, look), Step("transfer", False, NOT_READY, look)]
        after = worker_kv_paths(self.settings, self.kubectl, self.workers)
        for attempt in range(TRANSFER_WAIT_S // POLL_S + 1):
            if attempt:
                sleep(POLL_S)
            text, unread = decode_metrics(self.settings, self.kubectl, self.pods)
            measured = measure(self.metrics, text)
            if measured.transfers >= 1 or unread:
                break
        self.report = {"kv_path": {pod: got.path for pod, got in after.items()}, "transfer": measured.to_json()}
        return [check_kv_path(self.settings, self.paths, after), check_transfer(self.settings, measured, unread)]
