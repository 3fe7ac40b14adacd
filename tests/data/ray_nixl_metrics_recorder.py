"""How tests/data/ray-2.58-nixl-metrics.txt was recorded (`python tests/data/ray_nixl_metrics_recorder.py`,
Ray 2.58.0 of .venv, 2026-12-06; its output below three comment lines written by hand): histograms of vLLM 0.26's
NIXL statistics (`kv_connector/v1/nixl/stats.py`: the same names, tags and boundaries) observed with known values
through ray.util.metrics, as vLLM's RayPrometheusStatLogger does, then read from the node's metrics agent."""

from __future__ import annotations

import socket
import time
import urllib.request

import ray
from ray.util.metrics import Histogram

OBSERVED = ((0.15, 68_812_800), (0.62, 189_857_792))  # (seconds, bytes) of two transfers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@ray.remote
def _observe() -> None:
    tags = ("model_name", "engine", "ReplicaId")
    seconds = Histogram(
        "vllm_nixl_xfer_time_seconds",
        "xfer",
        boundaries=[0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0],
        tag_keys=tags,
    )
    byte_bounds = [float(2 ** (10 + i)) for i in range(1, 25, 2)]
    moved = Histogram("vllm_nixl_bytes_transferred", "bytes", boundaries=byte_bounds, tag_keys=tags)
    values = {"model_name": "qwen3.5-9b", "engine": "0", "ReplicaId": "decode-1"}
    for secs, nbytes in OBSERVED:
        seconds.observe(secs, tags=values)
        moved.observe(nbytes, tags=values)
    time.sleep(3)  # past the metrics report interval below


if __name__ == "__main__":
    port = _free_port()
    ray.init(include_dashboard=False, _metrics_export_port=port, _system_config={"metrics_report_interval_ms": 500})
    ray.get(_observe.remote())
    time.sleep(3)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    print("\n".join(line for line in text.splitlines() if "nixl" in line))
    ray.shutdown()
