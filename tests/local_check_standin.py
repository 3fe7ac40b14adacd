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
TOP_K = 5
# The stand-in model's KV, sized as Qwen3.5-9B's in vLLM 0.26 (worked out here, not taken from the fit check): 8
# full-attention layers x K and V x 4 KV heads x 256 x bf16 per token, in blocks of 528 tokens (the hybrid page), and
# 24 Gated DeltaNet layers' state: conv (16*128*2 + 32*128) x 3 in bf16 + 32 x 128 x 128 in float32.
KV_BYTES_PER_TOKEN = 8 * 2 * 4 * 256 * 2
BLOCK = 528
STATE_BYTES = 24 * ((16 * 128 * 2 + 32 * 128) * 3 * 2 + 32 * 128 * 128 * 4)
# Faults the tests plant in the stand-in PD engines (FAULTS_KEY in the application's args, beside the phases):
#   recompute      decode computes the whole prompt itself and never asks prefill (the answers are right; nothing moves)
#   diverge        decode's tokens after the first are wrong
#   silent         the KV moves but no statistics record it, and decode logs no transfer plan
#   one-backend    only decode logs NIXL's backend line
#   wrong-backend  the engines instantiate another backend than the config asks for
FAULTS_KEY = "standin_faults"


def next_token(tokens: list[int]) -> int:
    return (sum(tokens[-3:]) * 31 + len(tokens) * 7) % VOCAB


def distribution(tokens: list[int]) -> dict[int, float]:
    """The stand-in model's top-k logprobs: greedy picks next_token; the values depend on every token of the context
    (a changed first token shifts them by at least 0.05), the top-2 margin is 0.7 everywhere."""
    base, shift = next_token(tokens), 0.05 * (sum(tokens) % 10)
    return {(base + 37 * k) % VOCAB: -0.1 - shift - 0.7 * k for k in range(TOP_K)}


def generate(prompt: list[int], max_tokens: int) -> tuple[list[int], list[dict[int, float]]]:
    tokens, out, top = list(prompt), [], []
    for _ in range(max_tokens):
        token = next_token(tokens)
        top.append(distribution(tokens))
        tokens.append(token)
        out.append(token)
    return out, top


def _encode(text: str) -> list[int]:
    return [ord(c) % VOCAB for c in text]


# Each stand-in replica ends at once when an application is deleted (the collocated one follows the PD one on the
# same cluster) and at the end: Ray Serve's drain sleeps graceful_shutdown_wait_loop_s (2 s) before it checks for
# requests. Not the engines' drain: Ray Serve LLM's own deployments keep theirs.
DRAIN = {"graceful_shutdown_wait_loop_s": 0.1}


def _engine_log(backend: str | None, faults: list[str]) -> None:
    """What a vLLM engine of the phase logs at start: its memory report and NIXL's backend."""
    print(MEMORY_LOG, flush=True)
    if backend is not None:
        backend = {"UCX": "LIBFABRIC"}.get(backend, "UCX") if "wrong-backend" in faults else backend
        print(f"NIXL INFO _api.py:390 Backend {backend} was instantiated", flush=True)


@serve.deployment(**DRAIN)
class Prefill:
    def __init__(self, backend: str, faults: list[str]) -> None:
        _engine_log(None if "one-backend" in faults else backend, faults)

    def prefill(self, prompt: list[int]) -> dict[str, Any]:
        """The KV of all but the last prompt token (vLLM 0.26 with a Mamba-type model): what decode receives."""
        return {"computed": prompt[:-1]}


@serve.deployment(**DRAIN)
class Decode:
    def __init__(self, prefill: DeploymentHandle, backend: str, faults: list[str]) -> None:
        from ray.util.metrics import Histogram

        self.prefill, self.faults = prefill, faults
        _engine_log(backend, faults)
        print(f"INFO Setting attention block size to {BLOCK} tokens to ensure that attention page size is >= mamba")
        if "silent" not in faults:
            print("Transfer plan: TransferTopology(tp_ratio=1, num_kv_heads=4, stand-in)", flush=True)
        # vLLM's NIXL statistics as Ray Serve LLM exports them (RayPrometheusStatLogger: "vllm:" names sanitised,
        # vLLM's byte buckets), and NIXL's own byte counter on its exporter's port when the environment asks for it.
        self.bytes = Histogram(
            "vllm_nixl_bytes_transferred", boundaries=[2 ** (10 + i) for i in range(1, 25, 2)], tag_keys=("engine",)
        )
        self.received = 0
        self._serve_nixl_counters()

    async def generate(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        if "recompute" in self.faults:
            computed = prompt[:-1]
        else:
            kv = await self.prefill.prefill.remote(prompt)
            computed = kv["computed"]
            if "silent" not in self.faults:
                blocks = -(-len(computed) // BLOCK)
                moved = blocks * BLOCK * KV_BYTES_PER_TOKEN + STATE_BYTES
                self.bytes.observe(moved, tags={"engine": "0"})
                self.received += moved
        tokens, top = generate([*computed, prompt[-1]], max_tokens)
        if "diverge" in self.faults:
            tokens = tokens[:1] + [(t + 1) % VOCAB for t in tokens[1:]]
        return {"tokens": tokens, "top_logprobs": top}

    def _serve_nixl_counters(self) -> None:
        """NIXL's Prometheus exporter in the form of libtelemetry_exporter_prometheus.so: agent_rx_bytes."""
        import os
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        if os.environ.get("NIXL_TELEMETRY_EXPORTER") != "prometheus":
            return
        decode = self

        class Counters(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                agent = 'agent_name="stand-in"'
                body = f"agent_rx_bytes{{{agent}}} {decode.received}\nagent_tx_bytes{{{agent}}} 0\n"
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", int(os.environ["NIXL_TELEMETRY_PROMETHEUS_PORT"])), Counters)
        threading.Thread(target=server.serve_forever, daemon=True).start()


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
        answer = await self.decode.generate.remote(prompt, int(body.get("max_tokens", 16)))
        tokens = answer["tokens"]
        choice: dict[str, Any] = {
            "text": " ".join(map(str, tokens)),
            "token_ids": tokens if body.get("return_token_ids") else None,
        }
        if body.get("logprobs"):
            # vLLM's completions form; return_tokens_as_token_ids keys them "token_id:N".
            choice["logprobs"] = {
                "top_logprobs": [
                    {f"token_id:{t}": lp for t, lp in list(position.items())[: int(body["logprobs"])]}
                    for position in answer["top_logprobs"]
                ]
            }
        return JSONResponse({"choices": [choice]})

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        answer = await self.decode.generate.remote(
            _encode(body["messages"][-1]["content"]), int(body.get("max_tokens", 16))
        )
        content = " ".join(map(str, answer["tokens"]))
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": content}}]})


@serve.deployment(**DRAIN)
class Replica:
    """One ordinary engine of the collocated app: the whole request on one replica, no KV transfer."""

    async def generate(self, prompt: list[int], max_tokens: int) -> dict[str, Any]:
        tokens, top = generate(prompt, max_tokens)
        return {"tokens": tokens, "top_logprobs": top}


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

    _, decode_config = (LLMConfig.model_validate(args[name]) for name in ("prefill_config", "decode_config"))
    backend = {
        name: args[name]["engine_kwargs"]["kv_transfer_config"]["kv_connector_extra_config"]["backends"][0]
        for name in ("prefill_config", "decode_config")
    }
    # Ray Serve LLM's deployment names (serving_patterns/prefill_decode/builder.py): Prefill:<model>, Decode:<model>.
    faults = list(args.get(FAULTS_KEY, []))
    prefill = Prefill.options(name=f"Prefill:{decode_config.model_id}", **_options(args["prefill_config"])).bind(
        backend["prefill_config"], faults
    )
    decode = Decode.options(name=f"Decode:{decode_config.model_id}", **_options(args["decode_config"])).bind(
        prefill, backend["decode_config"], faults
    )
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
    ) -> tuple[dict[str, Any], dict[str, float]]:
        from tools.local_check.results import Answer, memory_report

        assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"  # the pods' environment, as the raylets get it
        from settings.engine_args import ENGINE_TABLE, vendored

        # vllm.LLM(**engine_kwargs) takes EngineArgs' fields only: a TypeError on the GPU host otherwise.
        unknown = sorted(set(engine_kwargs) - set(vendored()[ENGINE_TABLE]))
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {unknown[0]!r}")
        log.write_text(MEMORY_LOG)

        def answer(prompt: list[int]) -> dict[str, Any]:
            return Answer(*generate(prompt, PARITY_MAX_TOKENS)).to_json()

        answers = [answer(p) for p in prompts or []]
        result = {
            "outputs": [a["tokens"] for a in answers],
            "answers": answers,
            "batched": answers,  # a deterministic stand-in: no batch noise
            "variants": [answer([p[0] + 1, *p[1:]]) for p in prompts or []],
        }
        return result, {**memory_report(MEMORY_LOG), "start_s": 1.0}

    def random_checkpoint(self, model_dir: Any, target: Any) -> dict[str, Any]:
        """The stand-in's model is next_token, which has no weights: the config beside what the check's report reads of
        a checkpoint (one tensor, the vocabulary's embedding)."""
        from tools.local_check.checkpoint import copy_model_files

        target.mkdir(parents=True, exist_ok=True)
        copy_model_files(model_dir, target)
        return {"tensors": 1, "parameters": VOCAB, "shards": 1, "seconds": 0.0, "reused": False}

    def app_import_path(self, deployed: str) -> str:
        return f"{__name__}:{'build_collocated_app' if deployed.endswith('build_openai_app') else 'build_pd_app'}"
