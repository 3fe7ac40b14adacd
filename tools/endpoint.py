"""The Serve endpoint beyond the cluster, after the deploy: `make endpoint` prints its URL and an OpenAI SDK example,
`make api-key` prints how to fetch a key (never the key), and `make verify` calls it through the load balancer
(`probe`: without a key 401, with one a completion).

The URL is SERVE_HOSTNAME's when set, else the load balancer's DNS name from the Ingress's status (the controller
writes it there). The key is read from the serving stack's secret (its ARN is the stack's ApiKeysSecretArn output)
with the caller's credentials, kept in memory and sent only in the Authorization header.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k8s_constructs.endpoint import DNS_NAME_PATH, ingress_name
from k8s_constructs.serve_config import AUTH_MODULE_FILE
from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from settings import Settings
from tools.entry import one_line_errors, project_settings

KEYS_OUTPUT = "ApiKeysSecretArn"
FIRST_KEY = "default"  # the key generated at deploy (stacks/serving_stack.py)
PROMPT = "Say hello in five words."


def load_balancer_host(settings: Settings, kubectl: Kubectl) -> str:
    got = kubectl(
        [
            "get",
            "ingress",
            "-n",
            settings.namespace,
            ingress_name(settings),
            "-o",
            f"jsonpath={{{DNS_NAME_PATH}}}",
        ]
    )
    return got.stdout.strip() if got.returncode == 0 else ""


def base_url(settings: Settings, load_balancer: str) -> str:
    endpoint = settings.serve_endpoint
    scheme = "https" if endpoint.https else "http"
    return f"{scheme}://{endpoint.hostname or load_balancer}"


def keys_secret_arn(settings: Settings, session: Any) -> str:
    cloudformation = session.client("cloudformation", region_name=settings.region)
    (stack,) = cloudformation.describe_stacks(StackName=settings.stack_names["serving"])["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return str(outputs[KEYS_OUTPUT])


def read_key(settings: Settings, session: Any, name: str = FIRST_KEY) -> str:
    secret = session.client("secretsmanager", region_name=settings.region).get_secret_value(
        SecretId=keys_secret_arn(settings, session)
    )
    keys = json.loads(secret["SecretString"])
    return str(keys.get(name) or next(iter(keys.values())))


NOT_SENT = -1  # Probe.with_key when the key was not sent: the load balancer could not be identified by its certificate


@dataclass(frozen=True)
class Probe:
    without_key: int  # HTTP status
    with_key: int  # HTTP status, or NOT_SENT
    answer: str  # the completion's text
    error: str = ""

    @property
    def ok(self) -> bool:
        answered = self.with_key == 200 and bool(self.answer.strip())
        return self.without_key == 401 and (answered or self.with_key == NOT_SENT)


def _post(
    url: str, body: dict[str, Any], key: str | None, context: ssl.SSLContext | None, timeout: float
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status), json.loads(response.read().decode())
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()[:300]


def probe(
    url: str, model_id: str, key: str | None, *, context: ssl.SSLContext | None = None, timeout: float = 300
) -> Probe:
    """Through the load balancer: a completion without a key (401), then with it (200 and text); None: the key is not
    sent (an endpoint whose certificate cannot name the server reached)."""
    body = {"model": model_id, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16}
    completions = f"{url}/v1/chat/completions"
    try:
        without, _ = _post(completions, body, None, context, timeout)
        if key is None:
            return Probe(without, NOT_SENT, "")
        status, answer = _post(completions, body, key, context, timeout)
    except (urllib.error.URLError, OSError) as error:
        return Probe(0, 0, "", f"cannot reach {url}: {error}")
    text = answer["choices"][0]["message"]["content"] if status == 200 and isinstance(answer, dict) else ""
    return Probe(without, status, text or "", "" if status == 200 else str(answer)[:300])


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """Verify the certificate's chain always; its name only when clients use SERVE_HOSTNAME (the load balancer's own
    DNS name is not on the certificate)."""
    if not settings.serve_endpoint.https:
        return None
    context = ssl.create_default_context()
    if not settings.serve_endpoint.hostname:
        context.check_hostname = False
    return context


def sdk_example(url: str, settings: Settings) -> str:
    return "\n".join(
        [
            "from openai import OpenAI  # pip install openai",
            "",
            f'client = OpenAI(base_url="{url}/v1", api_key=os.environ["OPENAI_API_KEY"])  # make api-key',
            (
                f'answer = client.chat.completions.create(model="{settings.model_id}", messages=[{{"role": "user",'
                ' "content": "Hello"}])'
            ),
            "print(answer.choices[0].message.content)",
        ]
    )


def api_key_howto(settings: Settings, secret_arn: str) -> str:
    return (
        f"aws secretsmanager get-secret-value --region {settings.region} --secret-id {secret_arn} --query SecretString"
        f" --output text | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"{FIRST_KEY}\"])'"
    )


def ingress_min_key_length() -> int:
    """The ingress module's MIN_KEY_LENGTH, read from its source (the module imports Ray, which this tool may lack)."""
    import ast

    tree = ast.parse(AUTH_MODULE_FILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MIN_KEY_LENGTH" for t in node.targets):
            value = ast.literal_eval(node.value)
            if isinstance(value, int):
                return value
    raise RuntimeError(f"{AUTH_MODULE_FILE.name} declares no MIN_KEY_LENGTH")


def check_keys(text: str) -> str:
    """What the ingress would take from this secret value, or ValueError with what is wrong (before put-secret-value:
    a malformed value would keep the old keys in force, a short key would be refused)."""
    try:
        keys = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    if not isinstance(keys, dict):
        raise ValueError('not a JSON object of name -> key ({"default": "KEY", ...})')
    minimum = ingress_min_key_length()
    wrong = sorted(name for name, key in keys.items() if not isinstance(key, str) or len(key) < minimum)
    if wrong:
        raise ValueError(
            f"keys {wrong} are not strings of at least {minimum} characters: the ingress would refuse them"
        )
    if not keys:
        return "{}: every key revoked (every request 401) once the ingress reads it"
    return f"{len(keys)} key(s) named {sorted(keys)}: put it with put-secret-value (docs/endpoint.md)"


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="The Serve endpoint's URL and SDK example, how to fetch an API key, or a check of a new key set"
    )
    parser.add_argument("what", choices=("url", "api-key", "check-keys"))
    parser.add_argument("file", nargs="?", help="check-keys: the JSON you are about to put into the keys' secret")
    args = parser.parse_args(argv)
    if args.what == "check-keys":
        if not args.file:
            parser.error("check-keys needs the file (make api-key-check KEYS=FILE)")
        try:
            print(check_keys(Path(args.file).read_text()))
        except (OSError, ValueError) as error:
            print(f"error: {args.file}: {error}", file=sys.stderr)
            return 2
        return 0
    settings = project_settings()
    endpoint = settings.serve_endpoint
    if args.what == "api-key":
        if not endpoint.api_keys:
            print("SERVE_API_KEYS is off: the endpoint takes no key", file=sys.stderr)
            return 1
        import boto3

        secret_arn = keys_secret_arn(settings, boto3.session.Session())
        print("# The key generated at deploy (add named keys, or rotate, with put-secret-value: docs/endpoint.md):")
        print("export OPENAI_API_KEY=$(" + api_key_howto(settings, secret_arn) + ")")
        return 0
    if not endpoint.exposed:
        print(
            f"SERVE_EXPOSURE=cluster: kubectl port-forward -n {settings.namespace} svc/{settings.serve_service_name}"
            " 8000:8000, then http://127.0.0.1:8000/v1"
        )
        return 0
    try:
        with cluster_kubectl(settings.region, settings.cluster_name) as kubectl:
            host = load_balancer_host(settings, kubectl)
    except ClusterUnreachable as error:
        print(f"error: cannot reach cluster {settings.cluster_name} in {settings.region}: {error}", file=sys.stderr)
        return 2
    if not host:
        print(
            f"error: the Ingress {settings.namespace}/{ingress_name(settings)} has no load balancer yet (kubectl"
            " describe ingress)",
            file=sys.stderr,
        )
        return 1
    url = base_url(settings, host)
    print(f"{url}/v1  ({endpoint.scheme} load balancer {host})")
    print()
    print("import os\n" + sdk_example(url, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
