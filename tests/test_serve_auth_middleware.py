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


def test_the_key_check_fails_closed_keeps_the_last_good_keys_strips_the_key_and_logs_refusals_sparingly(
    tmp_path: Path,
) -> None:
    """Each way of presenting no valid key gets 401 (no directory, an empty one, `{}`, invalid JSON, another scheme,
    a key one character short or long); a malformed rotation keeps the keys the file held last, `{}` revokes them;
    the app behind the check never sees the Authorization header; a flood of refusals writes one log line per
    interval, with its count."""
    from tests.serve_auth_standin import write_fake_vllm

    fake = tmp_path / "fake"
    fake.mkdir()
    write_fake_vllm(fake)
    program = f"""
import asyncio, json, logging, os, sys
sys.path.insert(0, {str(AUTH_MODULE_FILE.parent)!r})
import serve_auth_ingress as module
records = []
class Collect(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("ray.serve").addHandler(Collect())
logging.getLogger("ray.serve").setLevel(logging.INFO)
base = {str(tmp_path)!r}
good = "g" * module.MIN_KEY_LENGTH
seen_headers = []

async def app(scope, receive, send):
    seen_headers.append([k.decode() for k, _ in scope["headers"]])
    await send({{"type": "http.response.start", "status": 200, "headers": []}})

now = [0.0]
def status(keys, authorization, middleware=None):
    sent = []
    headers = [(b"x-request", b"1")] + ([(b"authorization", authorization.encode())] if authorization else [])
    async def receive():
        return {{"type": "http.request", "body": b""}}
    async def send(message):
        sent.append(message)
    check = middleware or module.ApiKeyMiddleware(app, keys=keys, clock=lambda: now[0])
    scope = {{"type": "http", "method": "POST", "path": "/v1/completions", "headers": headers}}
    asyncio.run(check(scope, receive, send))
    return sent[0]["status"]

def keys_in(name, content=None):
    directory = os.path.join(base, name)
    if content is not None:
        os.makedirs(directory, exist_ok=True)
        open(os.path.join(directory, "api-keys.json"), "w").write(content)
    return module.KeyFiles(directory, recheck_s=0)

out = {{}}
out["missing directory"] = status(keys_in("none"), "Bearer " + good)
os.makedirs(os.path.join(base, "empty"))
out["empty directory"] = status(keys_in("empty"), "Bearer " + good)
out["{{}}"] = status(keys_in("braces", "{{}}"), "Bearer " + good)
out["invalid JSON"] = status(keys_in("broken", '{{"a": '), "Bearer " + good)
keys = keys_in("rotating", json.dumps({{"app": good}}))
out["good key"] = status(keys, "Bearer " + good)
out["Basic scheme"] = status(keys, "Basic " + good)
out["one short"] = status(keys, "Bearer " + good[:-1])
out["one long"] = status(keys, "Bearer " + good + "g")
out["no header"] = status(keys, None)
open(os.path.join(base, "rotating", "api-keys.json"), "w").write('{{"app": "half a rotation')
out["after a malformed rotation"] = status(keys, "Bearer " + good)
open(os.path.join(base, "rotating", "api-keys.json"), "w").write("{{}}")
out["after revoking with {{}}"] = status(keys, "Bearer " + good)
out["headers the app saw"] = seen_headers
out["errors"] = [r for r in records if "could not be read" in r]
flood = module.ApiKeyMiddleware(app, keys=keys, clock=lambda: now[0])
records.clear()
for second in (0.0, 1.0, 2.0, 9.0):
    now[0] = second
    status(keys, None, flood)
now[0] = 10.5
status(keys, None, flood)
out["refusal lines"] = [r for r in records if r.startswith("401")]
print(json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    refused = ("missing directory", "empty directory", "{}", "invalid JSON", "Basic scheme", "one short", "one long")
    assert {case: seen[case] for case in refused} == dict.fromkeys(refused, 401)
    assert seen["good key"] == 200 and seen["no header"] == 401
    assert seen["after a malformed rotation"] == 200  # the last good keys stay
    assert seen["after revoking with {}"] == 401
    assert seen["headers the app saw"] == [["x-request"], ["x-request"]]  # no Authorization past the check
    assert seen["refusal lines"] == [
        "401: 1 request(s) without a valid API key (the last: POST '/v1/completions')",
        "401: 4 request(s) without a valid API key (the last: POST '/v1/completions')",
    ]
    assert any("keeping the 1 key(s) it held last" in line for line in seen["errors"])


def test_a_new_key_set_is_checked_before_it_is_put(tmp_path: Path) -> None:
    """`make api-key-check KEYS=FILE`: what the ingress would take from the value, or one line on what is wrong with
    it, before put-secret-value (a malformed value keeps the old keys; a short key is refused)."""
    import re

    import pytest

    from tools.endpoint import check_keys, ingress_min_key_length

    good = "k" * ingress_min_key_length()
    assert check_keys(json.dumps({"default": good, "team-a": good})) == (
        "2 key(s) named ['default', 'team-a']: put it with put-secret-value (docs/endpoint.md)"
    )
    assert check_keys("{}").startswith("{}: every key revoked")
    for text, wrong in (
        ('{"default": "' + good, "not JSON"),
        ('["' + good + '"]', "not a JSON object"),
        (json.dumps({"default": good[:-1]}), "keys ['default'] are not strings of at least"),
        (json.dumps({"default": 12345}), "keys ['default'] are not strings"),
    ):
        with pytest.raises(ValueError, match=re.escape(wrong)):
            check_keys(text)
    # The same minimum as the module's, which refuses shorter keys itself (the test above).
    sys.path.insert(0, str(AUTH_MODULE_FILE.parent))
    assert "MIN_KEY_LENGTH = 32" in AUTH_MODULE_FILE.read_text() and ingress_min_key_length() == 32
