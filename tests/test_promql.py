"""tools/promql.py against a server on 127.0.0.1 that records what it was sent: a SigV4-signed POST of
the query to /api/v1/query for the `monitoring` service, and the Prometheus envelope read back."""

from __future__ import annotations

import http.server
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.credentials import Credentials  # type: ignore[import-untyped]

from tests.loopback import serving
from tools.promql import PromQLError, endpoint_of, instant_query

VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"ray_group": "decode"}, "value": [1780000000.0, "1"]}]},
}


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]], list[tuple[int, Any]]]]:
    received: list[dict[str, Any]] = []
    replies: list[tuple[int, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            received.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
            status, reply = replies.pop(0)
            payload = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        yield f"{base}/api/v1/query", received, replies


CREDENTIALS = Credentials("AKIDEXAMPLE", "secret", "session-token")


def test_the_query_is_signed_for_monitoring_and_its_vector_returned(
    server: tuple[str, list[dict[str, Any]], list[tuple[int, Any]]],
) -> None:
    url, received, replies = server
    replies.append((200, VECTOR))
    query = 'count by (ray_group) (ray_vllm_num_requests_running{eks_cluster="c"})'
    assert instant_query(query, region="us-west-2", credentials=CREDENTIALS, endpoint=url) == VECTOR["data"]["result"]
    (request,) = received
    assert request["path"] == "/api/v1/query"
    assert urllib.parse.parse_qs(request["body"]) == {"query": [query]}
    assert request["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    authorization = request["headers"]["Authorization"]
    assert (
        authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        and "/us-west-2/monitoring/aws4_request" in authorization
    )
    assert request["headers"]["X-Amz-Security-Token"] == "session-token"
    # The signature holds for what arrived (method, path, host, headers, body): recomputed with botocore.
    assert f"Signature={_signature(url, request)}" in authorization


def _signature(url: str, request: dict[str, Any]) -> str:
    from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

    signed = {k: request["headers"][k] for k in ("Content-Type", "X-Amz-Date", "X-Amz-Security-Token")}
    received = AWSRequest(method="POST", url=url, data=request["body"], headers=signed)
    received.context["timestamp"] = signed["X-Amz-Date"]
    auth = SigV4Auth(CREDENTIALS.get_frozen_credentials(), "monitoring", "us-west-2")
    signature: str = auth.signature(auth.string_to_sign(received, auth.canonical_request(received)), received)
    return signature


@pytest.mark.parametrize(
    ("status", "reply", "fragment"),
    [
        (403, {"message": "User is not authorized to perform: cloudwatch:GetMetricData"}, "HTTP 403"),
        (200, {"status": "error", "errorType": "bad_data", "error": "parse error"}, "unexpected answer"),
        (200, "not json", "Expecting value"),
    ],
)
def test_refusals_and_odd_answers_are_one_error(
    server: tuple[str, list[dict[str, Any]], list[tuple[int, Any]]], status: int, reply: Any, fragment: str
) -> None:
    url, _, replies = server
    replies.append((status, reply))
    with pytest.raises(PromQLError, match=fragment):
        instant_query("up", region="us-west-2", credentials=CREDENTIALS, endpoint=url)


def test_no_credentials_and_the_real_endpoint() -> None:
    with pytest.raises(PromQLError, match="no AWS credentials"):
        instant_query("up", region="us-west-2", credentials=None)
    assert endpoint_of("sa-east-1") == "https://monitoring.sa-east-1.amazonaws.com/api/v1/query"
