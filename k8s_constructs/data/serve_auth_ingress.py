"""API keys for Ray Serve LLM's OpenAI-compatible ingress (Ray 2.58), which has none of its own.

The serve config names the class by import path, as Ray's PDServingArgs takes it:

    ingress_cls_config:
      ingress_cls: serve_auth_ingress:ApiKeyIngress
      ingress_extra_kwargs: {api_keys_dir: /mnt/serve-api-keys}

and this file reaches the Ray pods as a ConfigMap mounted on a directory that the application's runtime_env puts on
PYTHONPATH. It depends on Ray, FastAPI and Starlette only (nothing of the project), and on serve_pd_guard.py beside it
(the ingress that refuses what prefill/decode disaggregation serves wrongly, which this class extends).

How it hooks in (ray/llm/_internal/serve/serving_patterns/prefill_decode/builder.py, core/ingress/ingress.py and
ray/serve/api.py at 2.58.0): the builder loads the class, wraps it with `make_fastapi_ingress`, which builds a FastAPI
app with the OpenAI routes and applies `serve.ingress(app)`; at replica start Serve calls the class's
`__serve_build_asgi_app__` (when defined) before the app's lifespan starts and serves the app it returns. This class
returns the same app with a middleware in front of every route: a request without `Authorization: Bearer KEY` of a
current key gets 401 with an OpenAI-style error body. Serve's own health path (/-/healthz, which a load balancer
checks) is answered by the proxy before any application route, so it needs no key.

Keys: every regular file in the directory (names starting with "." are skipped: the Secrets Store CSI driver's
atomic-writer entries) holds a JSON object of name -> key, or one key (named after the file). The files are
re-read when they change (checked at most once a second), so a rotated key is in force without a restart. Keys are
compared in constant time and never logged; a request that passes carries the key's *name* in its ASGI scope state,
and its `Authorization` header is removed before the request goes on: Ray's ingress forwards the request's headers
to the engines (core/protocol.py, RawRequestInfo), and the key has no business there.

Failing closed: no directory, no file, `{}`, or keys shorter than MIN_KEY_LENGTH give no key, and every request gets
401. A file that cannot be read as keys (invalid JSON, not UTF-8) keeps the keys it held last (an error is logged):
a malformed rotation must not lock every client out; `{}` is the way to revoke every key of a file at once.
Refusals are logged at most once per REFUSAL_LOG_INTERVAL_S, with their count: a keyless flood writes one line a
few seconds, not one per request.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from serve_pd_guard import PdGuardIngress  # type: ignore[import-not-found]  # beside it on the pods, not a package

API_KEYS_DIR_ENV = "SERVE_API_KEYS_DIR"  # used when the serve config passes no api_keys_dir
DEFAULT_API_KEYS_DIR = "/mnt/serve-api-keys"
RECHECK_S = 1.0
KEY_NAME_STATE = "api_key_name"
REFUSAL_LOG_INTERVAL_S = 10.0

logger = logging.getLogger("ray.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class KeyFiles:
    """The current keys of a directory, re-read when its files change."""

    def __init__(self, directory: str | Path, recheck_s: float = RECHECK_S) -> None:
        self.directory = Path(directory)
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._signature: tuple[tuple[str, int, int, int], ...] | None = None
        self._keys: dict[str, bytes] = {}
        self._last_good: dict[str, dict[str, bytes]] = {}  # file name -> the keys it held when it last parsed

    def _files(self) -> list[Path]:
        try:
            entries = sorted(self.directory.iterdir())
        except OSError:
            return []
        return [p for p in entries if not p.name.startswith(".") and p.is_file()]

    def _stat_signature(self, files: list[Path]) -> tuple[tuple[str, int, int, int], ...]:
        signature = []
        for path in files:
            try:
                st = path.stat()  # follows the atomic writer's symlinks
            except OSError:
                continue
            signature.append((path.name, st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(signature)

    @staticmethod
    def _parse(name: str, text: str) -> dict[str, bytes]:
        """name -> key of one file; ValueError when it is not keys at all (invalid JSON, not an object)."""
        text = text.strip()
        if text.startswith("{"):
            named = json.loads(text)
            if not isinstance(named, dict):
                raise ValueError("not a JSON object")
            return {str(k): str(v).encode() for k, v in named.items() if isinstance(v, str) and v}
        return {name: text.encode()} if text else {}

    def current(self) -> dict[str, bytes]:
        """name -> key, from the files as they are now (at most RECHECK_S old)."""
        now = time.monotonic()
        with self._lock:
            if now - self._checked_at < self.recheck_s:
                return self._keys
            self._checked_at = now
            files = self._files()
            signature = self._stat_signature(files)
            if signature != self._signature:
                keys: dict[str, bytes] = {}
                good: dict[str, dict[str, bytes]] = {}
                for path in files:
                    try:
                        good[path.name] = self._parse(path.name, path.read_text())
                    except (OSError, ValueError):  # ValueError: invalid JSON, not UTF-8
                        good[path.name] = self._last_good.get(path.name, {})
                        logger.error(
                            "API key file %s could not be read as keys: keeping the %d key(s) it held last",
                            path.name,
                            len(good[path.name]),
                        )
                    keys.update(good[path.name])
                self._last_good = good  # a file that is gone takes its keys with it
                short = sorted(name for name, key in keys.items() if len(key) < MIN_KEY_LENGTH)
                if short:
                    logger.error("API keys %s are shorter than %d characters: refused", short, MIN_KEY_LENGTH)
                keys = {name: key for name, key in keys.items() if len(key) >= MIN_KEY_LENGTH}
                self._signature, self._keys = signature, keys
                logger.info("API keys loaded from %s: %d key(s) named %s", self.directory, len(keys), sorted(keys))
            return self._keys

    def match(self, presented: bytes) -> str | None:
        """The name of the key presented, or None; every key is compared, each in constant time."""
        found = None
        for name, key in self.current().items():
            if hmac.compare_digest(key, presented):
                found = name
        return found


def _bearer(scope: Scope) -> bytes:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = bytes(value).partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else b""
    return b""


UNAUTHORIZED_BODY = json.dumps(
    {
        "error": {
            "message": "Missing or invalid API key: send `Authorization: Bearer KEY` (make api-key prints how to get one).",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
).encode()


# The keys generated at deploy are 48 characters (stacks/serving_stack.py API_KEY_LENGTH); a hand-rotated key shorter than this is
# refused (and logged by name), not served.
MIN_KEY_LENGTH = 32


class ApiKeyMiddleware:
    """ASGI middleware: HTTP requests pass only with a current key."""

    def __init__(self, app: ASGIApp, *, keys: KeyFiles, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.keys = keys
        self.clock = clock
        self._refused = 0  # refusals not logged yet
        self._logged_at = float("-inf")

    def _log_refusal(self, scope: Scope) -> None:
        """One line per REFUSAL_LOG_INTERVAL_S at most, counting the refusals since the last one."""
        self._refused += 1
        now = self.clock()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL_S:
            # The path as a repr, cut: a request's bytes never become log lines of their own.
            logger.info(
                "401: %d request(s) without a valid API key (the last: %s %r)",
                self._refused,
                scope.get("method"),
                str(scope.get("path"))[:200],
            )
            self._refused, self._logged_at = 0, now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: the app's start and stop, no request
            await self.app(scope, receive, send)
            return
        token = _bearer(scope)
        name = self.keys.match(token) if token else None
        if name is None and scope["type"] == "websocket":
            # No route of Ray's ingress is a WebSocket today; one added later is closed without a key all the same.
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if name is None:
            self._log_refusal(scope)
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
            return
        scope.setdefault("state", {})[KEY_NAME_STATE] = name
        # The key stops here: what the app (and the engines behind it) see has no Authorization header.
        scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"authorization"]
        await self.app(scope, receive, send)


class ApiKeyIngress(PdGuardIngress):  # type: ignore[misc]  # untyped here: its module is not on mypy's path
    """Ray Serve LLM's OpenAI ingress with API keys (ingress_cls_config.ingress_cls), and the PD guard's refusals."""

    def __init__(self, *args: Any, api_keys_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        directory = api_keys_dir or os.environ.get(API_KEYS_DIR_ENV) or DEFAULT_API_KEYS_DIR
        self._api_keys = KeyFiles(directory)
        if not self._api_keys.current():
            # Every request gets 401 until a key file appears (the CSI driver mounts them before the container starts).
            logger.warning("no API key in %s yet: every request is refused until one is there", directory)

    def __serve_build_asgi_app__(self) -> Any:
        """Serve calls this before the app starts: the FastAPI app of make_fastapi_ingress, behind the key check."""
        app = self.app  # ASGIAppReplicaWrapper's, mixed in by serve.ingress
        app.add_middleware(ApiKeyMiddleware, keys=self._api_keys)
        return app
