"""The API-key ingress on a real local Ray 2.58 Serve application (tests/serve_auth_scenario.py, a process of its own),
deployed from the serve config and the ConfigMap the endpoint configuration synthesizes (tests/conftest.py ENDPOINT).
vLLM and the GPU engines are stood in for (tests/serve_auth_standin.py); the ingress is Ray's, built by its own PD
builder from our ingress_cls_config and ingress_deployment_config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from k8s_constructs.endpoint import module_config_map
from k8s_constructs.ray_service import build_rayservice_chart
from k8s_constructs.serve_config import API_KEYS_DIR, AUTH_MODULE_DIR, INGRESS_MODULE_FILES
from tests.conftest import ENDPOINT, SERVE_AUTH_PROOF, scenario_result, settings_for

UNAUTHORIZED = {"message", "type", "param", "code"}


def scenario_spec() -> dict[str, Any]:
    settings = settings_for(ENDPOINT)
    objects = build_rayservice_chart(settings).to_json()
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == module_config_map(settings.ray_service_name)
    ]
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    (application,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    return {
        "application": application,
        "modules": config_map["data"],
        "module_dir": AUTH_MODULE_DIR,
        "keys_dir": API_KEYS_DIR,
        "model_id": settings.model_id,
    }


def test_keys_are_enforced_rotated_without_a_restart_and_never_logged(tmp_path: Path) -> None:
    spec = scenario_spec()
    assert sorted(spec["modules"]) == sorted(m.name for m in INGRESS_MODULE_FILES)
    seen = scenario_result(SERVE_AUTH_PROOF, spec, tmp_path / "spec.json")
    print(json.dumps({k: v for k, v in seen.items() if k != "calls"}))
    assert seen["app_status"] == "RUNNING", seen.get("app_message")

    # The hazard the preflight's ray-cluster-change refuses (tests/test_day2.py): the keyed serve config applied in
    # place over pods without the ingress module halts at DEPLOY_FAILED, and Ray keeps the keyless application
    # serving: without the refusal, a load balancer created by the same deploy would front it.
    transition = seen["transition"]
    assert transition["keyless"] == "RUNNING" and transition["keyless_models_without_key"] == 200
    assert transition["keyed_on_old_pods"] == "DEPLOY_FAILED", transition
    assert "serve_auth_ingress" in transition["keyed_on_old_pods_message"]
    assert transition["after_it_models_without_key"] == 200

    # The ingress replicas reserve no CPU: the node has none, and both run (so do the stand-in servers, at 0 CPU).
    assert seen["node_cpus"] == 0.0 and seen["cpu_available"] == 0.0
    assert seen["deployments"]["ApiKeyIngress"] == {"RUNNING": 2}

    calls = {name: (c["status"], c["body"]) for name, c in seen["calls"].items()}
    assert calls["healthz_without_key"] == (200, "success")  # the load balancer's health check needs no key
    for refused in ("models_without_key", "models_with_wrong_key", "completion_without_key", "docs_without_key"):
        status, body = calls[refused]
        assert status == 401, (refused, status, body)
        assert (
            set(body["error"]) == UNAUTHORIZED
            and body["error"]["code"] == "invalid_api_key"
            and body["error"]["type"] == "invalid_request_error"
        )
    status, body = calls["models_with_key"]
    assert status == 200 and [m["id"] for m in body["data"]] == [spec["model_id"]]
    status, body = calls["completion_with_other_key"]  # any named key of the file
    text = body["choices"][0]["text"]
    assert status == 200 and text.startswith("echo: hello; headers: ")
    # The engine got the request's headers (Ray's ingress forwards them) but not the key: it stops at the ingress.
    received = text.split("headers: ", 1)[1].split(",")
    assert "content-type" in received and "authorization" not in received

    # A new key file is in force within seconds (the CSI driver's rotation writes it the same way), the old keys out.
    assert (seen["rotation"]["old_key"], seen["rotation"]["new_key"]) == (401, 200) and seen["rotation"]["seconds"] < 10
    assert seen["removed_key_after_rotation"] == 401

    # Ray's logs of the run (every process's) were searched, hold the refusals, and no key.
    assert seen["logs"]["files_searched"] > 10 and seen["logs"]["refusals_logged"] > 0
    assert seen["logs"]["files_with_a_key"] == []
