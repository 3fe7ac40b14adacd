"""Stand-ins for what the API-key test cannot run here: vLLM (Ray Serve LLM's OpenAI models subclass vLLM's request
and response models, so importing Ray's ingress needs vLLM, whose wheel needs CUDA's torch) and the prefill and
decode LLM servers (each a vLLM engine on a GPU).

`write_fake_vllm(directory)` writes a `vllm` package holding only the protocol classes Ray 2.58 imports, as plain
pydantic models (the fields the test sends and reads); `build_app(args)` is the import path the test's serve
config names: Ray's own `build_pd_openai_app` with `build_llm_deployment` replaced by a stand-in deployment (no
GPU, no CPU) that answers completions. Everything of the ingress is Ray's: PDServingArgs (ingress_cls_config,
ingress_deployment_config), the class loaded by its import path, make_fastapi_ingress, serve.ingress, the routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Module -> classes, as ray/llm/_internal/serve/core/configs/openai_api_models.py and the modules the PD builder
# imports (2.58.0) name them.
_PROTOCOL_MODULES = {
    "vllm.entrypoints.openai.chat_completion.protocol": (
        "ChatCompletionRequest",
        "ChatCompletionResponse",
        "ChatCompletionStreamResponse",
    ),
    "vllm.entrypoints.openai.completion.protocol": (
        "CompletionRequest",
        "CompletionResponse",
        "CompletionStreamResponse",
    ),
    "vllm.entrypoints.openai.engine.protocol": ("ErrorInfo", "ErrorResponse"),
    "vllm.entrypoints.pooling.embed.protocol": (
        "EmbeddingChatRequest",
        "EmbeddingCompletionRequest",
        "EmbeddingResponse",
    ),
    "vllm.entrypoints.pooling.scoring.protocol": ("ScoreResponse", "ScoreTextRequest"),
    "vllm.entrypoints.serve.tokenize.protocol": (
        "DetokenizeRequest",
        "DetokenizeResponse",
        "TokenizeChatRequest",
        "TokenizeCompletionRequest",
        "TokenizeResponse",
    ),
    "vllm.entrypoints.speech_to_text.transcription.protocol": (
        "TranscriptionRequest",
        "TranscriptionResponse",
        "TranscriptionStreamResponse",
    ),
}
_FIELDS = {
    "CompletionRequest": (
        "    model: Optional[str] = None\n    prompt: Any = None\n    max_tokens: Optional[int] = None\n    stream:"
        " Optional[bool] = False\n"
    ),
    "ChatCompletionRequest": (
        "    model: Optional[str] = None\n    messages: List[Any] = []\n    stream: Optional[bool] = False\n"
    ),
    "CompletionResponse": "    id: str\n    object: str = 'text_completion'\n    model: str\n    choices: List[Any]\n",
    "ErrorInfo": "    message: str\n    type: str\n    code: int\n    param: Optional[str] = None\n",
    "ErrorResponse": "    error: Any\n",
}
_OTHER_MODULES = {
    "vllm.engine.arg_utils": "from dataclasses import dataclass\n\n\n@dataclass\nclass AsyncEngineArgs:\n    pass\n",
    "vllm.entrypoints.openai.cli_args": (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass FrontendArgs:\n    pass\n"
    ),
    "vllm.v1.engine.exceptions": "class EngineDeadError(Exception):\n    pass\n",
}


def write_fake_vllm(directory: Path) -> None:
    sources: dict[str, str] = dict(_OTHER_MODULES)
    for module, classes in _PROTOCOL_MODULES.items():
        body = "from typing import Any, List, Optional\n\nfrom pydantic import BaseModel, ConfigDict\n"
        for name in classes:
            fields = _FIELDS.get(name, "    pass\n")
            body += f"\n\nclass {name}(BaseModel):\n    model_config = ConfigDict(extra='allow')\n{fields}"
        sources[module] = body
    for module, source in sources.items():
        parts = module.split(".")
        for depth in range(1, len(parts)):
            package = directory.joinpath(*parts[:depth])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        directory.joinpath(*parts[:-1], parts[-1] + ".py").write_text(source)


def build_app(args: dict[str, Any]) -> Any:
    """The serve config's import path: Ray's PD builder, with stand-in LLM servers."""
    from ray import serve
    from ray.llm._internal.serve.core.configs.openai_api_models import CompletionResponse
    from ray.llm._internal.serve.serving_patterns.prefill_decode import builder

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class StandInLLMServer:
        """Answers like an LLM server of Ray Serve LLM: an async generator of OpenAI response objects."""

        def __init__(self, model_id: str, **_: Any) -> None:
            self.model_id = model_id

        async def completions(self, body: Any, raw_request_info: Any = None) -> Any:
            # The request's header names as the ingress forwarded them to the engine (RawRequestInfo.headers).
            received = sorted(getattr(raw_request_info, "headers", None) or {})
            yield CompletionResponse(
                id="cmpl-standin",
                model=self.model_id,
                choices=[
                    {"index": 0, "text": f"echo: {body.prompt}; headers: {','.join(received)}", "finish_reason": "stop"}
                ],
            )

        async def check_health(self) -> None:
            return None

    def stand_in(
        llm_config: Any, *, name_prefix: str | None = None, bind_kwargs: dict[str, Any] | None = None, **_: Any
    ) -> Any:
        return StandInLLMServer.options(name=f"{name_prefix or ''}StandIn").bind(
            llm_config.model_id, **(bind_kwargs or {})
        )

    builder.build_llm_deployment = stand_in  # type: ignore[assignment]
    return builder.build_pd_openai_app(args)
