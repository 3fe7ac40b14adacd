"""The API-key middleware of the endpoint's ingress (k8s_constructs/data/serve_auth_ingress.py) in isolation; the
ingress on a real Ray Serve application: tests/test_serve_auth.py. A file of its own so that it runs beside the other
files: tests/test_serve_auth.py runs last (its proof starts in the background, tests/conftest.py BACKGROUND)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from k8s_constructs.serve_config import AUTH_MODULE_FILE
from tests.conftest import REPO


def test_the_middleware_closes_a_websocket_without_a_key_and_refuses_short_or_unreadable_keys(tmp_path: Path) -> None:
    """The key check in isolation (an ASGI app behind it), in a process of its own with the stand-in vLLM package Ray's
    ingress imports: a WebSocket is closed with 1008 without a key and reaches the app with one; a key shorter than
    MIN_KEY_LENGTH and a file that is not UTF-8 give no key."""
    from tests.serve_auth_standin import write_fake_vllm

    fake = tmp_path / "fake"
    fake.mkdir()
    write_fake_vllm(fake)
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    program = f"""
import asyncio, json, sys
sys.path.insert(0, {str(AUTH_MODULE_FILE.parent)!r})
import serve_auth_ingress as module
keys_dir = {str(keys_dir)!r}
good, short = "k" * module.MIN_KEY_LENGTH, "k" * (module.MIN_KEY_LENGTH - 1)
open(keys_dir + "/api-keys.json", "w").write(json.dumps({{"good": good, "short": short}}))
open(keys_dir + "/binary", "wb").write(b"\\xff\\xfe not text")
keys = module.KeyFiles(keys_dir)
reached = []

async def app(scope, receive, send):
    reached.append(scope["type"])

def websocket(token):
    sent = []
    headers = [(b"authorization", ("Bearer " + token).encode())] if token else []

    async def receive():
        return {{"type": "websocket.connect"}}

    async def send(message):
        sent.append(message)

    asyncio.run(
        module.ApiKeyMiddleware(app, keys=keys)(
            {{"type": "websocket", "path": "/ws", "headers": headers}}, receive, send
        )
    )
    return sent

print(json.dumps({{"keys": sorted(keys.current()), "none": websocket(None), "short": websocket(short),
                  "reached_before": list(reached), "good": websocket(good), "reached": reached}}))
"""
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["keys"] == ["good"]
    closed = [{"type": "websocket.close", "code": 1008}]
    assert seen["none"] == closed and seen["short"] == closed and seen["reached_before"] == []
    assert seen["good"] == [] and seen["reached"] == ["websocket"]
