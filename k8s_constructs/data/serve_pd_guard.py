"""Refuses, with an OpenAI-style 400, the requests Ray 2.58's prefill/decode orchestrator cannot serve correctly.

The serve config names the class by import path, as Ray's PDServingArgs takes it (ingress_cls_config.ingress_cls:
serve_pd_guard:PdGuardIngress); this file reaches the Ray pods as a ConfigMap mounted on a directory that the
application's runtime_env puts on PYTHONPATH, beside serve_auth_ingress.py, whose ApiKeyIngress subclasses this one.
It depends on Ray, FastAPI and Starlette only (nothing of the project).

How it hooks in: `make_fastapi_ingress` (ray/llm/_internal/serve/core/ingress/ingress.py, 2.58.0) decorates
`getattr(cls, name)` for each route of DEFAULT_ENDPOINTS, so the `chat` and `completions` overridden here are what
/v1/chat/completions and /v1/completions serve; FastAPI reads their annotations (this module's globals) to parse the
body into Ray's own request models, as for OpenAiIngress.chat/completions.

What is refused, and why (Ray 2.58 and vLLM 0.26 source):
- `n` > 1. Ray's prefill copy of the request (DefaultPDProtocolMixin.prepare_prefill_request and
  clamp_request_to_single_token, ray/llm/_internal/serve/engines/vllm/kv_transfer/base.py) keeps `n`; vLLM runs n
  prefills (vllm/v1/engine/parallel_sampling.py) but returns the KV transfer params of one child only
  (vllm/v1/engine/output_processor.py), and every decode child reads that child's blocks: the first read frees them,
  the others decode on freed or re-used blocks (the prefill logs "Potentially invalid KV blocks for unrecognized
  request", vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py).
- A /v1/completions batch of several prompts (a list of strings, a list of token-id lists, prompt_embeds, counted as
  vllm/renderers/inputs/preprocess.py prompt_to_seq does): the completion response carries prompt 0's params only
  (vllm/entrypoints/openai/completion/serving.py, final_res_batch[0].kv_transfer_params), so prompts after the
  first decode on prompt 0's cache.
- `min_tokens` > 1: the prefill copy keeps it with max_tokens 1, and vLLM refuses it there
  (vllm/sampling_params.py, "min_tokens must be less than or equal to max_tokens=1"); the refusal here names why.
`best_of` is not judged: vLLM 0.26's CompletionRequest and ChatCompletionRequest have no such field (an extra field
they keep and never use), so it changes nothing, with or without disaggregation.
"""

from __future__ import annotations

from typing import Any

from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest, CompletionRequest
from ray.llm._internal.serve.core.ingress.ingress import OpenAiIngress
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

# Each a limit of Ray 2.58's PD orchestrator, not of vLLM: one engine alone serves more.
MAX_N = 1
MAX_PROMPTS = 1
MAX_MIN_TOKENS = 1  # the max_tokens of Ray's prefill copy (clamp_request_to_single_token)
JUDGED_FIELDS = ("n", "min_tokens", "prompt", "prompt_embeds")
ERROR_CODE = "unsupported_value"
_WHY = "is not served through prefill/decode disaggregation on Ray 2.58"


def _prompt_count(prompt: Any) -> int:
    """How many engine prompts vLLM 0.26 makes of `prompt` or `prompt_embeds` (prompt_to_seq)."""
    if prompt is None:
        return 0
    if isinstance(prompt, (str, bytes, dict)):
        return 1
    if isinstance(prompt, list):
        return 1 if prompt and all(isinstance(p, int) for p in prompt) else len(prompt)
    return 1


def refusal(body: dict[str, Any]) -> tuple[str, str] | None:
    """(field, message) when Ray 2.58's PD orchestrator would serve the request body wrongly; None when it serves it."""
    n = body.get("n")
    if isinstance(n, int) and n > MAX_N:
        return "n", (
            f"n={n} {_WHY}: the prefill engine hands over one KV cache per request, so choices after the first would"
            f" decode on another request's cache; send n={MAX_N} (several requests for several choices)"
        )
    prompts, embeds = _prompt_count(body.get("prompt")), _prompt_count(body.get("prompt_embeds"))
    if prompts + embeds > MAX_PROMPTS:
        field = "prompt" if prompts >= embeds else "prompt_embeds"
        return field, (
            f"{field} with {prompts + embeds} prompts {_WHY}: the prefill engine hands over the KV cache of the"
            f" first prompt only, so the others would decode on its cache; send at most {MAX_PROMPTS} prompt per"
            " request (several requests for several prompts)"
        )
    min_tokens = body.get("min_tokens")
    if isinstance(min_tokens, int) and min_tokens > MAX_MIN_TOKENS:
        return "min_tokens", (
            f"min_tokens={min_tokens} {_WHY}: the prefill engine gets a copy of the request with"
            f" max_tokens={MAX_MIN_TOKENS}, and vLLM refuses min_tokens above max_tokens; send min_tokens of at most"
            f" {MAX_MIN_TOKENS}"
        )
    return None


def error_body(field: str, message: str) -> dict[str, Any]:
    """The OpenAI API's error object, as the API-key ingress's 401 has it."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": field, "code": ERROR_CODE}}


def _refused(body: Any) -> Response | None:
    found = refusal({name: getattr(body, name, None) for name in JUDGED_FIELDS})
    # A response of our own: OpenAIHTTPException would reach the client as Ray's error shape, without `param`.
    return JSONResponse(status_code=400, content=error_body(*found)) if found else None


class PdGuardIngress(OpenAiIngress):  # type: ignore[misc]  # Ray's class is untyped here (no vLLM to import it)
    """Ray Serve LLM's OpenAI ingress that refuses what PD serves wrongly (ingress_cls_config.ingress_cls)."""

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        """OpenAiIngress.completions (ray/llm/_internal/serve/core/ingress/ingress.py) after the guard."""
        refused = _refused(body)
        if refused is not None:
            return refused
        response: Response = await super().completions(body, request)
        return response

    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        """OpenAiIngress.chat (ray/llm/_internal/serve/core/ingress/ingress.py) after the guard."""
        refused = _refused(body)
        if refused is not None:
            return refused
        response: Response = await super().chat(body, request)
        return response
