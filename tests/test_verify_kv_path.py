"""`make verify`'s kv-path and transfer steps: the path each worker's logs name (k8s_constructs/kv_path.py), a transfer
failure logged while the completion runs, and the decode engines' statistics of its transfer (tools/kv_transfer.py),
on the fake cluster of tests/test_verify.py, by a real `sh` and `grep`, and on Ray 2.58's recorded exposition."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pytest

from k8s_constructs import kv_path
from settings.context_files import REPO
from tests.conftest import settings_for
from tests.test_verify import (
    BOUNCED,
    FI_READ_FAILED,
    HMEM_RAIL,
    LIBFABRIC,
    NO_GPUDIRECT,
    RECORDED_METRICS,
    SETTINGS,
    TCP_RAILS,
    WORKING,
    Cluster,
    _run,
)
from tools import verify as gate
from tools.kv_transfer import TRANSFER_WAIT_S, Measured, check_transfer, measure, series


def test_the_kv_path_is_said_bounce_buffers_where_there_is_no_gpudirect() -> None:
    """g6/g6e: libfabric's CUDA probe warns, NIXL's rail has FI_HMEM: bounce buffers, said and not failed; with the
    probe silent, GPU memory by the FI_HMEM rail, unconfirmed; with no line at all, unknown, said."""
    result = _run(logs={"prefill-0": BOUNCED, "decode-0": LIBFABRIC + HMEM_RAIL})
    assert result.ok
    assert result.kv["kv_path"] == {"prefill-0": kv_path.BOUNCE_BUFFERS, "decode-0": kv_path.HMEM_UNCONFIRMED}
    assert _run().kv["kv_path"] == {"prefill-0": kv_path.UNKNOWN, "decode-0": kv_path.UNKNOWN}


def _kv(result: gate.Result) -> gate.Step:
    (step,) = [s for s in result.steps if s.name == "kv-path"]
    return step


class Failing(Cluster):
    """A cluster whose decode worker logs a failure line while the completion runs (the second grep of its logs)."""

    def __init__(self, earlier: str, during: str) -> None:
        super().__init__(**WORKING)
        self.earlier, self.during, self.greps = earlier, during, 0

    def __call__(self, args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if args[0] == "exec" and "/metrics" in args[-1]:
            return super().__call__(args, stdin)
        if args[0] == "exec" and "ray-worker" in args and "-rhF" in args[-1]:
            self.greps += args[3] == "decode-0"
            text = BOUNCED + self.earlier + (self.during if self.greps > 1 and args[3] == "decode-0" else "")
            return subprocess.CompletedProcess(args, 0, text, "")
        if args[0] == "exec" and "ray-worker" in args:
            return subprocess.CompletedProcess(args, 0, LIBFABRIC, "")
        return super().__call__(args, stdin)


@pytest.mark.parametrize("marker", kv_path.TRANSFER_FAILURES)
def test_a_failure_logged_during_the_completion_fails_and_an_earlier_one_is_said(marker: str) -> None:
    """Every failure line fails kv-path when it appears during the completion; the same line logged before it (the
    logs cover the whole Ray session) is said, not failed. An EAGAIN retry is counted, never failed."""
    line = f"E1206 01:42:11.102934   16990 x.cpp:1] {marker} (rendered)\n"
    during = _run(Failing("", line))
    assert {s.name for s in during.steps if not s.ok} == {"kv-path"}
    assert f"decode-0: {line.strip()}" in _kv(during).detail
    earlier = _run(Failing(line, ""))
    assert earlier.ok and "1 failure line(s) from before this completion" in _kv(earlier).detail
    retrying = _run(Failing("", f"I1206 x.cpp:1] {kv_path.STALL_SIGN} 0 after 100 attempts\n"))
    assert retrying.ok and "1 EAGAIN retry line(s)" in _kv(retrying).detail


@pytest.mark.parametrize(("marker", "path"), list(kv_path.WRONG_PATHS.items()))
def test_each_wrong_path_fails(marker: str, path: str) -> None:
    result = _run(logs={"prefill-0": BOUNCED, "decode-0": f"{LIBFABRIC}I1206 x.cpp:1] Discovered 1 tcp {marker}\n"})
    assert {s.name for s in result.steps if not s.ok} == {"kv-path"} and f"decode-0: {path}" in _kv(result).detail


def test_the_docs_name_every_line_the_kv_path_step_reads() -> None:
    text = " ".join((REPO / "docs" / "verify.md").read_text().split())  # as rendered: a line break is a space
    assert [m for m in kv_path.KV_PATH_MARKERS if m not in text] == []


def test_the_docs_step_table_gives_the_gates_own_limits() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in (REPO / "docs" / "verify.md").read_text().splitlines()
        if line.startswith("| `")
    }
    assert f"within {gate.COMPLETION_TIMEOUT_S} s" in rows["completion"]
    assert f"waiting up to {TRANSFER_WAIT_S} s" in rows["transfer"]


def test_the_worker_log_search_finds_the_kv_path_and_a_failed_transfer(tmp_path: Path) -> None:
    """The kv-path search `make verify` runs in each worker, by a real `sh` and `grep -F` over Ray-style logs."""
    from tools.cluster import worker_kv_paths

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "worker-1.err").write_text(NO_GPUDIRECT + "some other line\n" + HMEM_RAIL + TCP_RAILS)
    (logs / "worker-2.err").write_text(FI_READ_FAILED)

    def kubectl(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        script = args[-1].replace("/tmp/ray/session_latest/logs/", f"{logs}/")
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)

    (found,) = worker_kv_paths(settings_for(), kubectl, ["decode-0"]).values()
    assert found == kv_path.KvPath(kv_path.TCP, (FI_READ_FAILED.strip(),))  # the marker with parentheses found too


def test_the_recorded_statistics_bound_what_was_observed() -> None:
    """On Ray 2.58's own exposition of two transfers (68,812,800 B in 0.15 s, 189,857,792 B in 0.62 s): the count is
    exact, and each range holds the true total where the _sum (bucket midpoints) does not."""
    measured = measure("", RECORDED_METRICS)
    assert (measured.transfers, measured.failed) == (2, 0)
    assert measured.bytes == (2**25 + 2**27, 2**27 + 2**29) and measured.bytes[0] < 258_670_592 < measured.bytes[1]
    assert measured.seconds == pytest.approx((0.6, 0.95)) and measured.seconds[0] < 0.77 < measured.seconds[1]
    assert "ray_vllm_nixl_bytes_transferred_sum{" in RECORDED_METRICS and "4.194304e+08" in RECORDED_METRICS
    assert measure(RECORDED_METRICS, RECORDED_METRICS) == Measured(0, 0, (0, 0), (0, 0))


def test_the_completions_transfer_is_measured_beside_the_links_rate() -> None:
    result = _run()
    (step,) = [s for s in result.steps if s.name == "transfer"]
    assert step.ok
    assert step.detail.startswith("2 transfer(s), 160.0-640.0 MiB in 600-950 ms: 177-1,118 MB/s (the link: 25 Gbps")
    assert result.kv["transfer"]["transfers"] == 2 and result.kv["transfer"]["rate_mb_s"] == pytest.approx(
        [176.6, 1118.5], abs=0.1
    )


def test_no_transfer_within_the_wait_or_a_failed_one_fails_naming_the_other_transport() -> None:
    """A decode engine that recomputed the prompt (nothing recorded) fails after a bounded wait; so does a failure."""
    sleeps: list[float] = []
    result = _run(logs={"prefill-0": BOUNCED, "decode-0": BOUNCED}, metrics=("",), sleep=sleeps.append)
    (step,) = [s for s in result.steps if s.name == "transfer"]
    assert not step.ok and "no KV transfer recorded" in step.detail and "try KV_TRANSPORT=ucx" in step.look_closer
    assert sum(sleeps) == TRANSFER_WAIT_S
    # A failed transfer beside a finished one (the counter as Ray's exporter names counters: _total).
    failed = RECORDED_METRICS + 'ray_vllm_nixl_num_failed_transfers_total{engine="0"} 1.0\n'
    assert measure("", failed).failed == 1
    assert not check_transfer(SETTINGS, measure("", failed), []).ok
    assert check_transfer(SETTINGS, measure("", RECORDED_METRICS), []).ok


def _pod(text: str, worker: str) -> str:
    """The recorded exposition as another engine's (its WorkerId), the way two decode pods' agents differ."""
    return re.sub(r'WorkerId="[^"]*"', f'WorkerId="{worker}"', text)


def test_series_are_taken_one_by_one_a_vanished_one_left_out_and_a_restarted_one_counted_from_zero() -> None:
    """Two decode engines: one gone by the later reading (its pod replaced) must not subtract its transfers, one that
    restarted (its counts went down) counts all it has since; the +Inf bucket leaves the upper bounds open."""
    one, two = _pod(RECORDED_METRICS, "x"), _pod(RECORDED_METRICS, "y")
    assert measure(one + two, two).transfers == 0  # the vanished engine is left out, not -2
    assert len(series(one + two)) == 2 * len(series(two))  # two engines' series apart
    restarted = two.replace(" 2.0\n", " 1.0\n")  # a new process: its counts below the earlier reading's
    assert measure(two, restarted).transfers == 1
    assert measure(one, one + two) == measure("", two)
    slow = (
        'ray_vllm_nixl_xfer_time_seconds_bucket{le="5.0"} 0.0\nray_vllm_nixl_xfer_time_seconds_bucket{le="+Inf"} 1.0\n'
    )
    timed = measure("", slow + 'ray_vllm_nixl_bytes_transferred_bucket{le="2048.0"} 1.0\n')
    assert timed.seconds == (5.0, math.inf) and timed.rate_mb_s[0] is None
    assert timed.to_json()["seconds"] == [5.0, None] and "?" in timed.describe(25)


def test_statistics_that_cannot_be_read_are_said_with_the_pod_not_blamed_on_the_transport() -> None:
    unread = ["decode-0: error: unable to upgrade connection: container not found"]
    step = check_transfer(SETTINGS, measure("", ""), unread)
    assert not step.ok and "decode-0: error: unable to upgrade connection" in step.detail
    assert "KV_TRANSPORT" not in step.look_closer and "curl -s 127.0.0.1:8080/metrics" in step.look_closer
