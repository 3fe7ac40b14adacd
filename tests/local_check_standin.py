"""A stand-in for Ray Serve LLM's PD application and for vLLM, so tests/test_local_check.py runs the one-host check's
whole flow on a real local Ray without a GPU: the same builder call (PDServingArgs' shape, each phase validated by
Ray's own LLMConfig), placement bundles as Ray Serve LLM makes them (the phase resource, accelerator_type's
0.001), an ingress that calls decode, which calls prefill, and NIXL's log lines in vLLM's form. Generation is a
fixed function of the tokens, so PD and the lone engine agree exactly when the tokens flow as in PD."""

# No `from __future__ import annotations`: FastAPI reads the handlers' annotations at runtime (Request).

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve.handle import DeploymentHandle

from tools.local_check.engines import PARITY_MAX_TOKENS
from tools.local_check.shape import Host

VOCAB = 1000


def next_token(tokens: list[int]) -> int:
    return (sum(tokens[-3:]) * 31 + len(tokens) * 7) % VOCAB


def generate(prompt: list[int], max_tokens: int) -> list[int]:
    tokens, out = list(prompt), []
    for _ in range(max_tokens):
        token = next_token(tokens)
        tokens.append(token)
        out.append(token)
    return out


def _encode(text: str) -> list[int]:
    return [ord(c) % VOCAB for c in text]


# Each stand-in replica ends at once when an application is deleted (the collocated one follows the PD one on the
# same cluster) and at the end: Ray Serve's drain sleeps graceful_shutdown_wait_loop_s (2 s) before it checks for
# requests. Not the engines' drain: Ray Serve LLM's own deployments keep theirs.
DRAIN = {"graceful_shutdown_wait_loop_s": 0.1}


@serve.deployment(**DRAIN)
class Prefill:
    def __init__(self, backend: str) -> None:
        print(f"NIXL INFO _api.py:390 Backend {backend} was instantiated", flush=True)

    def first(self, prompt: list[int]) -> int:
        return next_token(prompt)


@serve.deployment(**DRAIN)
class Decode:
    def __init__(self, prefill: DeploymentHandle, backend: str) -> None:
        self.prefill = prefill
        print(f"NIXL INFO _api.py:390 Backend {backend} was instantiated", flush=True)
        print("Transfer plan: TransferTopology(tp_ratio=1, num_kv_heads=4, stand-in)", flush=True)

    async def generate(self, prompt: list[int], max_tokens: int) -> list[int]:
        first = await self.prefill.first.remote(prompt)
        return [first, *generate([*prompt, first], max_tokens - 1)] if max_tokens > 1 else [first]


api = FastAPI()


@serve.deployment(**DRAIN)
@serve.ingress(api)
class Ingress:
    def __init__(self, decode: DeploymentHandle, model_id: str) -> None:
        self.decode, self.model_id = decode, model_id

    @api.get("/v1/models")
    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_id, "object": "model"}]}

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body["prompt"] if isinstance(body["prompt"], list) else _encode(body["prompt"])
        tokens = await self.decode.generate.remote(prompt, int(body.get("max_tokens", 16)))
        return JSONResponse(
            {
                "choices": [
                    {"text": " ".join(map(str, tokens)), "token_ids": tokens if body.get("return_token_ids") else None}
                ]
            }
        )

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        tokens = await self.decode.generate.remote(
            _encode(body["messages"][-1]["content"]), int(body.get("max_tokens", 16))
        )
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": " ".join(map(str, tokens))}}]})


@serve.deployment(**DRAIN)
class Replica:
    """One ordinary engine of the collocated app: the whole request on one replica, no KV transfer."""

    async def generate(self, prompt: list[int], max_tokens: int) -> list[int]:
        return generate(prompt, max_tokens)


def _options(phase: dict[str, Any]) -> dict[str, Any]:
    """Ray Serve LLM's placement of one phase: its bundles, with accelerator_type's share on each."""
    bundle = dict(phase["placement_group_config"]["bundle_per_worker"])
    if phase.get("accelerator_type"):
        bundle[f"accelerator_type:{phase['accelerator_type']}"] = 0.001
    return {
        "placement_group_bundles": [bundle],
        "placement_group_strategy": phase["placement_group_config"]["strategy"],
        "num_replicas": phase["deployment_config"].get("num_replicas", 1),
        "ray_actor_options": {"num_cpus": 0},
    }


def build_pd_app(args: dict[str, Any]) -> Any:
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    _prefill_config, decode_config = (
        LLMConfig.model_validate(args[name]) for name in ("prefill_config", "decode_config")
    )
    backend = {
        name: args[name]["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"]["backends"][0]
        for name in ("prefill_config", "decode_config")
    }
    prefill = Prefill.options(**_options(args["prefill_config"])).bind(backend["prefill_config"])
    decode = Decode.options(**_options(args["decode_config"])).bind(prefill, backend["decode_config"])
    return Ingress.options(ray_actor_options={"num_cpus": 0}).bind(decode, decode_config.model_id)


def build_collocated_app(args: dict[str, Any]) -> Any:
    """Ray Serve LLM's build_openai_app's shape: llm_configs, each validated by Ray's LLMConfig, replicas placed by
    their bundles."""
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    (llm,) = args["llm_configs"]
    config = LLMConfig.model_validate(llm)
    replicas = Replica.options(**_options(llm)).bind()
    return Ingress.options(ray_actor_options={"num_cpus": 0}).bind(replicas, config.model_id)


# vLLM's memory report lines, in its own words, with a lone engine's figures (a line ending in a backslash goes on).
MEMORY_LOG = """INFO Model loading took 16.60 GiB memory and 30.1 seconds
DEBUG Memory profiling takes 3.02 seconds. Total non KV cache memory: 17.82GiB; torch peak memory increase: 1.00GiB; \
non-torch forward increase memory: 0.22GiB; weights memory: 16.60GiB.
INFO Available KV cache memory: 2.21 GiB
INFO GPU KV cache size: 51,013 tokens
INFO Maximum concurrency for 4,096 tokens per request: 12.45x
INFO init engine (profile, create kv cache, warmup model) took 12.50 s
"""


class StandInEngine:
    name = "stand-in"

    def host(self) -> Host:
        return Host(
            gpus=1,
            gpu_name="stand-in GPU",
            gpu_total_bytes=80 * 1024**3,
            compute_capability=(8, 9),
            efa=False,
            cutlass_dsl=False,
        )

    def installed_versions(self) -> dict[str, str]:
        import ray

        return {"ray": ray.__version__}

    def reference(
        self, model: str, engine_kwargs: dict[str, Any], prompts: list[list[int]] | None, log: Any, env: dict[str, str]
    ) -> tuple[list[list[int]], dict[str, float]]:
        from tools.local_check.results import memory_report

        assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"  # the pods' environment, as the raylets get it
        log.write_text(MEMORY_LOG)
        return [generate(p, PARITY_MAX_TOKENS) for p in prompts or []], {**memory_report(MEMORY_LOG), "start_s": 1.0}

    def app_import_path(self, deployed: str) -> str:
        return f"{__name__}:{'build_collocated_app' if deployed.endswith('build_openai_app') else 'build_pd_app'}"
