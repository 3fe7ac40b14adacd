"""One PromQL instant query against CloudWatch's Prometheus-compatible API (`/api/v1/query` on the
Region's monitoring endpoint, SigV4-signed as `monitoring`): what the dashboard's panels read, asked
from the command line. The caller needs cloudwatch:GetMetricData and cloudwatch:ListMetrics."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest


class PromQLError(Exception):
    """The query could not be answered: no credentials, refused, or not a Prometheus success envelope."""


def endpoint_of(region: str) -> str:
    return f"https://monitoring.{region}.amazonaws.com/api/v1/query"


def instant_query(
    query: str, *, region: str, credentials: Any, endpoint: str | None = None, timeout_s: float = 30
) -> list[dict[str, Any]]:
    """The `result` vector of `query` now; `credentials` are botocore's (a session's get_credentials())."""
    if credentials is None:
        raise PromQLError("no AWS credentials")
    url = endpoint or endpoint_of(region)
    body = urllib.parse.urlencode({"query": query})
    request = AWSRequest(
        method="POST", url=url, data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    SigV4Auth(credentials.get_frozen_credentials(), "monitoring", region).add_auth(request)
    signed = urllib.request.Request(url, data=body.encode(), headers=dict(request.headers.items()), method="POST")
    try:
        with urllib.request.urlopen(signed, timeout=timeout_s) as response:
            answer = json.loads(response.read().decode())
    except urllib.error.HTTPError as error:
        raise PromQLError(f"HTTP {error.code}: {error.read().decode(errors='replace')[:200]}") from error
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as error:
        raise PromQLError(str(error)[:200]) from error
    if answer.get("status") != "success" or answer.get("data", {}).get("resultType") != "vector":
        raise PromQLError(f"unexpected answer: {json.dumps(answer)[:200]}")
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result
