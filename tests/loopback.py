"""One HTTP server on 127.0.0.1 for the tests that stand in for a remote service (the Hub, a chart repository,
GitHub, CloudWatch's Prometheus API): started on a free port, stopped after."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for servers the tests start themselves)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
