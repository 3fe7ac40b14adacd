"""The PD guard (k8s_constructs/data/serve_pd_guard.py): the judge alone (Ray's modules stubbed), the class on Ray
2.58's own ingress (a process with the stand-in vLLM, tests/serve_auth_standin.py), and the serve config naming it in
every configuration."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s_constructs.endpoint import AUTH_MODULE_VOLUME, module_config_map
from k8s_constructs.ray_service import build_rayservice_chart
from k8s_constructs.serve_config import (
    AUTH_INGRESS_CLASS,
    GUARD_INGRESS_CLASS,
    GUARD_MODULE_FILE,
    INGRESS_MODULE_DIR,
    INGRESS_MODULE_FILES,
    pd_application,
)
from tests.conftest import ENDPOINT, REPO, settings_for

RAY_MODULES = ("ray.llm._internal.serve.core.configs.openai_api_models", "ray.llm._internal.serve.core.ingress.ingress")


@pytest.fixture(scope="module")
def guard() -> Iterator[types.ModuleType]:
    """The module loaded over stand-ins of the two Ray modules it imports (Ray's need vLLM, absent here)."""
    saved = {name: sys.modules.get(name) for name in RAY_MODULES}
    models, ingress = types.ModuleType(RAY_MODULES[0]), types.ModuleType(RAY_MODULES[1])
    models.ChatCompletionRequest = models.CompletionRequest = object  # type: ignore[attr-defined]
    ingress.OpenAiIngress = type("OpenAiIngress", (), {})  # type: ignore[attr-defined]
    sys.modules.update({RAY_MODULES[0]: models, RAY_MODULES[1]: ingress})
    try:
        spec = importlib.util.spec_from_file_location("serve_pd_guard_under_test", GUARD_MODULE_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        for name, was in saved.items():
            if was is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = was


REFUSED = [
    ({"n": 2, "messages": [{"role": "user", "content": "hi"}]}, "n", "n=2", "n=1"),
    ({"n": 5, "prompt": "hi"}, "n", "n=5", "n=1"),
    ({"prompt": ["a", "b"]}, "prompt", "2 prompts", "at most 1 prompt"),
    ({"prompt": [[1, 2], [3]]}, "prompt", "2 prompts", "at most 1 prompt"),
    ({"prompt": [[1, 2], [3], [4]]}, "prompt", "3 prompts", "at most 1 prompt"),
    ({"prompt_embeds": [b"x", b"y"]}, "prompt_embeds", "2 prompts", "at most 1 prompt"),
    ({"prompt": "a", "prompt_embeds": b"x"}, "prompt", "2 prompts", "at most 1 prompt"),  # vLLM serves both
    ({"min_tokens": 2, "prompt": "hi"}, "min_tokens", "min_tokens=2", "at most 1"),
    ({"min_tokens": 64, "messages": []}, "min_tokens", "min_tokens=64", "max_tokens=1"),
]


@pytest.mark.parametrize(("body", "field", "value", "limit"), REFUSED)
def test_the_judge_refuses_what_pd_serves_wrongly_naming_the_field_the_value_and_the_limit(
    guard: types.ModuleType, body: dict[str, Any], field: str, value: str, limit: str
) -> None:
    found = guard.refusal(body)
    assert found is not None, body
    param, message = found
    assert param == field and value in message and limit in message, message
    assert "prefill/decode disaggregation on Ray 2.58" in message
    error = guard.error_body(param, message)["error"]
    assert error == {"message": message, "type": "invalid_request_error", "param": field, "code": "unsupported_value"}


PASSED = [
    {"messages": [{"role": "user", "content": "hi"}]},  # n absent
    {"n": 1, "prompt": "hi"},
    {"n": None, "messages": []},  # the chat model's n is optional
    {"min_tokens": 0, "prompt": "hi"},
    {"min_tokens": 1, "prompt": "hi"},
    {"prompt": ["one string"]},
    {"prompt": [[1, 2, 3]]},
    {"prompt": [1, 2, 3]},  # one token-id prompt
    {"prompt_embeds": b"x"},
    {"best_of": 2, "prompt": "hi"},  # not a field of vLLM 0.26's requests: kept as an extra and never used
]


@pytest.mark.parametrize("body", PASSED)
def test_the_judge_passes_what_pd_serves(guard: types.ModuleType, body: dict[str, Any]) -> None:
    assert guard.refusal(body) is None


def test_the_serve_config_names_the_guard_in_every_configuration_with_its_directory_on_pythonpath() -> None:
    pythonpath = {"env_vars": {"PYTHONPATH": f"{INGRESS_MODULE_DIR}:${{PYTHONPATH}}"}}
    (default,) = pd_application(settings_for()).to_serve_config()["applications"]
    assert default["args"]["ingress_cls_config"] == {"ingress_cls": GUARD_INGRESS_CLASS}
    assert GUARD_INGRESS_CLASS == "serve_pd_guard:PdGuardIngress"
    assert default["runtime_env"] == pythonpath
    # The default configuration keeps Ray's default ingress replica: only the drain time is set.
    assert set(default["args"]["ingress_deployment_config"]) == {"graceful_shutdown_timeout_s"}
    (keyed,) = pd_application(settings_for(ENDPOINT)).to_serve_config()["applications"]
    assert keyed["args"]["ingress_cls_config"]["ingress_cls"] == AUTH_INGRESS_CLASS
    assert keyed["runtime_env"] == pythonpath


def test_every_ray_pod_mounts_both_modules_in_the_default_configuration() -> None:
    settings = settings_for()
    objects = build_rayservice_chart(settings).to_json()
    name = module_config_map(settings.ray_service_name)
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
    assert config_map["data"] == {m.name: m.read_text() for m in INGRESS_MODULE_FILES}
    (service,) = [o for o in objects if o["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        assert {"name": AUTH_MODULE_VOLUME, "configMap": {"name": name}} in pod["volumes"]
        mounts = [m for c in pod["containers"] for m in c.get("volumeMounts", [])]
        assert {"name": AUTH_MODULE_VOLUME, "mountPath": INGRESS_MODULE_DIR, "readOnly": True} in mounts
    assert "ingress_cls_config" in yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]


def test_the_class_on_rays_ingress_refuses_with_400_and_passes_to_rays_handler(tmp_path: Path) -> None:
    """In a process with the stand-in vLLM: make_fastapi_ingress serves the guard's chat and completions (FastAPI
    resolves their body models), ApiKeyIngress extends the guard, a refused request gets the 400 body and never reaches
    Ray's handler, a served one does."""
    from tests.serve_auth_standin import write_fake_vllm

    fake = tmp_path / "fake"
    fake.mkdir()
    write_fake_vllm(fake)
    program = f"""
import asyncio, json, sys
from types import SimpleNamespace
sys.path.insert(0, {str(GUARD_MODULE_FILE.parent)!r})
import serve_pd_guard, serve_auth_ingress
from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest, CompletionRequest
from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress, init, make_fastapi_ingress

app = init()
make_fastapi_ingress(serve_pd_guard.PdGuardIngress, app=app)
routes = {{}}
for route in app.routes:
    if getattr(route, "path", "") in ("/v1/chat/completions", "/v1/completions"):
        body = route.dependant.body_params[0].field_info.annotation if route.dependant.body_params else None
        routes[route.path] = [route.endpoint.__qualname__, getattr(body, "__name__", str(body))]

handled = []
async def handler(self, body, call_method, raw_request=None):
    handled.append(call_method)
    return "ray's response"
OpenAiIngress._process_llm_request = handler
ingress = object.__new__(serve_pd_guard.PdGuardIngress)

def call(method, **fields):
    response = asyncio.run(getattr(ingress, method)(SimpleNamespace(**fields), None))
    if isinstance(response, str):
        return response
    return [response.status_code, json.loads(response.body)]

print(json.dumps({{
    "subclass": issubclass(serve_auth_ingress.ApiKeyIngress, serve_pd_guard.PdGuardIngress),
    "routes": routes,
    "chat_n2": call("chat", n=2),
    "completions_batch": call("completions", prompt=["a", "b"]),
    "handled_after_refusals": list(handled),
    "chat_n1": call("chat", n=1),
    "completions_one": call("completions", prompt="a", min_tokens=1),
    "handled": handled,
}}))
"""
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{REPO}"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["subclass"] is True
    assert seen["routes"] == {
        "/v1/chat/completions": ["PdGuardIngress.chat", "ChatCompletionRequest"],
        "/v1/completions": ["PdGuardIngress.completions", "CompletionRequest"],
    }
    status, body = seen["chat_n2"]
    assert status == 400 and body["error"]["param"] == "n" and body["error"]["type"] == "invalid_request_error"
    status, body = seen["completions_batch"]
    assert status == 400 and body["error"]["param"] == "prompt" and "2 prompts" in body["error"]["message"]
    assert seen["handled_after_refusals"] == []
    assert seen["chat_n1"] == seen["completions_one"] == "ray's response"
    assert seen["handled"] == ["chat", "completions"]
