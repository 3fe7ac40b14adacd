"""A real Ray 2.58 Serve application behind the API-key ingress, run by tests/test_serve_auth.py in a process of its
own: `python -m tests.serve_auth_scenario INPUT.json` prints one JSON line of observations.

INPUT holds our serve config (the application as the RayService carries it, API keys on), the ingress modules as the
ConfigMap carries it, and the pod paths of the module and the key directory. The scenario: write the module and a key
file (laid out as the Secrets Store CSI driver's atomic writer does) into a temporary directory, point the config's
paths there, start Ray on a node with no CPU at all (as our head), deploy the config through Serve's config API (the
build task, the runtime_env, PDServingArgs; tests/serve_auth_standin.py stands in for vLLM and the LLM servers), call
it over HTTP with and without keys, rotate the keys, and search Ray's logs for them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.loopback import free_port
from tests.ray_local import QUIET_HEAD
from tests.serve_auth_standin import write_fake_vllm

REPO = Path(__file__).resolve().parent.parent
KEY_FILE = "api-keys.json"


def _write_keys(directory: Path, keys: dict[str, str], generation: int) -> None:
    """As Kubernetes' atomic writer: files in a timestamped directory, `..data` swapped to it in one rename."""
    version = directory / f"..{generation}"
    version.mkdir()
    (version / KEY_FILE).write_text(json.dumps(keys))
    link = directory / "..data_tmp"
    link.symlink_to(version.name)
    os.replace(link, directory / "..data")
    if not (directory / KEY_FILE).is_symlink():
        (directory / KEY_FILE).symlink_to(f"..data/{KEY_FILE}")


def _call(
    port: int, method: str, path: str, key: str | None = None, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    tmp = Path(tempfile.mkdtemp(prefix="rauth", dir="/tmp"))
    observed: dict[str, Any] = {}
    cluster = None
    try:
        fake, module_dir, keys_dir = tmp / "fake", tmp / "module", tmp / "keys"
        for d in (fake, module_dir, keys_dir):
            d.mkdir()
        write_fake_vllm(fake)
        for name, source in spec["modules"].items():
            (module_dir / name).write_text(source)
        first = {"default": secrets.token_urlsafe(32), "ci": secrets.token_urlsafe(32)}
        _write_keys(keys_dir, first, 1)

        text = (
            json.dumps(spec["application"])
            .replace(spec["module_dir"], str(module_dir))
            .replace(spec["keys_dir"], str(keys_dir))
        )
        application = json.loads(text)
        application["import_path"] = "tests.serve_auth_standin:build_app"
        observed["runtime_env"] = application.get("runtime_env")

        # What every Ray process of the cluster sees (the image's own path, in the pods): the stand-ins and this
        # repository.
        os.environ["PYTHONPATH"] = f"{fake}{os.pathsep}{REPO}"
        # The head alone, without Ray's autoscaler monitor and log monitor (neither under test; the log files the
        # search below reads are the processes' own).
        cluster = Cluster(
            initialize_head=True,
            head_node_args={**QUIET_HEAD, "temp_dir": str(tmp / "ray")},
        )
        ray.init(address=cluster.address, log_to_driver=False, logging_level="warning")
        observed["node_cpus"] = ray.cluster_resources().get("CPU", 0.0)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})

        def deploy(app: dict[str, Any], timeout_s: float = 240) -> Any:
            _get_global_client().deploy_apps(ServeDeploySchema.model_validate({"applications": [app]}))
            deadline = time.monotonic() + timeout_s
            found = None
            while time.monotonic() < deadline:
                found = serve.status().applications.get(app["name"])
                if found is not None and found.status in ("RUNNING", "DEPLOY_FAILED"):
                    break
                time.sleep(0.5)
            return found

        # The transition the preflight refuses (ray-cluster-change): the keyless application (SERVE_EXPOSURE=cluster),
        # then the keyed serve config applied in place over pods that never got the ingress module, as KubeRay does
        # with upgradeStrategy None when only the serve config changes.
        keyless = json.loads(json.dumps(application))
        keyless["args"].pop("ingress_cls_config", None)
        keyless.pop("runtime_env", None)
        old_pods = json.loads(json.dumps(application).replace(str(module_dir), str(tmp / "no-module")))
        transition: dict[str, Any] = {"keyless": getattr(deploy(keyless), "status", None)}
        transition["keyless_models_without_key"] = _call(port, "GET", "/v1/models")[0]
        failed = deploy(old_pods)  # returns at DEPLOY_FAILED: a shorter limit only fails a loaded machine
        transition["keyed_on_old_pods"] = getattr(failed, "status", None)
        transition["keyed_on_old_pods_message"] = str(getattr(failed, "message", ""))[-300:]
        transition["after_it_models_without_key"] = _call(port, "GET", "/v1/models")[0]
        observed["transition"] = transition
        serve.delete(application["name"])  # the re-created serving stack starts with no application

        status = deploy(application)
        observed["app_status"] = status.status if status else None
        observed["app_message"] = status.message if status else None
        if status is None or status.status != "RUNNING":
            return observed
        observed["deployments"] = {name: dict(d.replica_states) for name, d in status.deployments.items()}
        observed["cpu_available"] = ray.available_resources().get("CPU", 0.0)

        model = spec["model_id"]
        completion = {"model": model, "prompt": "hello", "max_tokens": 4}
        calls = {
            "healthz_without_key": _call(port, "GET", "/-/healthz"),
            "models_without_key": _call(port, "GET", "/v1/models"),
            "models_with_wrong_key": _call(port, "GET", "/v1/models", "sk-" + secrets.token_urlsafe(32)),
            "models_with_key": _call(port, "GET", "/v1/models", first["default"]),
            "completion_without_key": _call(port, "POST", "/v1/completions", None, completion),
            "completion_with_other_key": _call(port, "POST", "/v1/completions", first["ci"], completion),
            "docs_without_key": _call(port, "GET", "/docs"),
        }
        observed["calls"] = {name: {"status": s, "body": b} for name, (s, b) in calls.items()}

        # Rotation: the default key replaced, the ci key removed; no restart.
        second = {"default": secrets.token_urlsafe(32)}
        _write_keys(keys_dir, second, 2)
        rotated_at = time.monotonic()
        old = new = 0
        while time.monotonic() - rotated_at < 30:
            old = _call(port, "GET", "/v1/models", first["default"])[0]
            new = _call(port, "GET", "/v1/models", second["default"])[0]
            if (old, new) == (401, 200):
                break
            time.sleep(0.5)
        observed["rotation"] = {"old_key": old, "new_key": new, "seconds": round(time.monotonic() - rotated_at, 1)}
        # Two ingress replicas, each re-reading the files at most once a second: once that second has passed for both,
        # every request, whichever replica takes it, refuses the removed key.
        time.sleep(1.5)
        removed = {_call(port, "GET", "/v1/models", first["ci"])[0] for _ in range(6)}
        observed["removed_key_after_rotation"] = removed.pop() if len(removed) == 1 else sorted(removed)

        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()
        keys = [k.encode() for k in (*first.values(), *second.values())]
        leaked, searched, refusals = [], 0, 0
        for path in (tmp / "ray").rglob("*"):
            if (
                path.is_file()
                and not path.is_symlink()
                and path.suffix in ("", ".log", ".out", ".err", ".txt", ".json")
            ):
                content = path.read_bytes()
                searched += 1
                refusals += content.count(b"without a valid API key")
                leaked += [str(path.name) for k in keys if k in content]
        observed["logs"] = {"files_searched": searched, "refusals_logged": refusals, "files_with_a_key": leaked}
        return observed
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(json.loads(Path(sys.argv[1]).read_text()))))
