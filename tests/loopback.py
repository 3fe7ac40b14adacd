"""One HTTP server on 127.0.0.1 for the tests that stand in for a remote service (the Hub, a chart repository,
GitHub, CloudWatch's Prometheus API): started on a free port, stopped after."""

from __future__ import annotations

import http.server
import json
import random
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tools.local_check.cluster import NIXL_PORT_BASE


def answer_json(handler: http.server.BaseHTTPRequestHandler, body: Any, status: int = 200) -> None:
    """Answer the handler's request with `body` as JSON."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """The base URL (http://127.0.0.1:PORT) while `handler` answers."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at the end of every test that serves.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


# Where free_port looks: above Ray's worker ports (10002-19999 by default) and outside the kernel's ephemeral range,
# which every bind to port 0 and every outgoing connection draws from: Ray's processes make many of both, and a port
# picked there was taken before the test's server bound it ("Failed to bind to address '127.0.0.1:43841'", the GCS
# proof's Serve proxy, in a fresh-clone run on 2026-12-02). Nor the one-host check's NIXL exporter ports, which the
# whole-flow test's cluster binds at the check's default (one a worker node).
_EPHEMERAL = _ephemeral_ports()
_NIXL_NODES = 8  # worker nodes of a test's local cluster, at most (the whole flow's has two)
_NIXL_DEFAULTS = range(NIXL_PORT_BASE, NIXL_PORT_BASE + _NIXL_NODES)
_PORTS = [port for port in range(20000, 65536) if port not in _EPHEMERAL and port not in _NIXL_DEFAULTS]
_ALLOWED = set(_PORTS)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(count: int = 1) -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to now and that no port-0 bind or outgoing connection will take
    meanwhile (for servers the tests start themselves; see _PORTS); with `count`, the first of that many in a row."""
    for port in random.sample(_PORTS, min(len(_PORTS), 200)):
        block = range(port, port + count)
        if all(p in _ALLOWED and _bindable(p) for p in block):
            return port
    if count > 1:
        raise RuntimeError(f"no {count} free ports in a row on 127.0.0.1")
    with socket.socket() as s:  # no such port on this machine: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
