"""The Hugging Face Hub, read: a model's config.json and safetensors index, turned into the facts the synth's
fit check uses (settings/model_facts.py). HF_ENDPOINT points elsewhere (the tests: a server on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from preflight.results import CheckResult, fail, ok, warn
from settings.model_facts import DTYPE_BYTES, HYBRID_STATE_PAGES, ModelFacts

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_SECONDS = 20


class ShapeNotUnderstood(Exception):
    """A config this parser cannot size faithfully (other attention kinds, MLA, sliding windows, unknown keys):
    better no facts, and no check, than a wrong refusal."""


class HubError(Exception):
    """One line: what the Hub answered, and the fix."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _request(repo: str, filename: str, *, token: str, base: str | None, method: str = "GET") -> urllib.request.Request:
    """A file of the repository's main revision, with the token when there is one."""
    url = f"{base or endpoint()}/{repo}/resolve/main/{filename}"
    return urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"} if token else {})


def hub_json(repo: str, filename: str, *, token: str = "", base: str | None = None) -> dict[str, Any]:
    """A JSON file of the repository's main revision; gated, missing and failing answers as HubError."""
    request = _request(repo, filename, token=token, base=base)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            data: dict[str, Any] = json.loads(answer.read())
            return data
    except urllib.error.HTTPError as error:
        # The Hub answers a missing or private repository with 401 to an anonymous caller; its X-Error-Code
        # says which (RepoNotFound, GatedRepo, EntryNotFound).
        reason = str(error.headers.get("X-Error-Code", "")) if error.headers else ""
        if reason in ("RepoNotFound", "EntryNotFound") or error.code == 404:
            raise HubError(
                f"{repo}: no {filename} on the Hub (a misspelt MODEL_SOURCE, a private repository, or not a model"
                " repository)",
                status=404,
            ) from None
        if error.code in (401, 403):
            fix = (
                "the token cannot read it: accept the model's licence on the Hub with that account"
                if token
                else (
                    "it is gated or private: put a Hugging Face token that may read it in Secrets Manager and set"
                    " HF_TOKEN_SECRET_NAME"
                )
            )
            raise HubError(f"{repo}: the Hub answered {error.code} for {filename}: {fix}", status=error.code) from None
        raise HubError(f"{repo}: the Hub answered {error.code} for {filename}", status=error.code) from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise HubError(f"{repo}: cannot read {filename} from {base or endpoint()}: {error}") from None


def facts_from_files(repo: str, config: dict[str, Any], index: dict[str, Any]) -> ModelFacts:
    """config.json and model.safetensors.index.json as ModelFacts (a vision-language config's text part for the LLM)."""
    text = config.get("text_config", config)
    needed = ("num_hidden_layers", "num_attention_heads", "max_position_embeddings")
    if any(k not in text for k in needed) or not config.get("architectures"):
        raise ShapeNotUnderstood(
            f"{repo}: config.json lacks {', '.join(k for k in needed if k not in text) or 'architectures'}"
        )
    if text.get("kv_lora_rank") or (text.get("sliding_window") and text.get("use_sliding_window", True)):
        raise ShapeNotUnderstood(
            f"{repo}: multi-head latent attention or sliding-window layers, which this check does not size"
        )
    layers = int(text["num_hidden_layers"])
    layer_types = list(text.get("layer_types") or [])
    if set(layer_types) - {"full_attention", "linear_attention"}:
        raise ShapeNotUnderstood(
            f"{repo}: layer kinds {sorted(set(layer_types) - {'full_attention', 'linear_attention'})}"
        )
    attention_layers = sum(1 for t in layer_types if t == "full_attention") if layer_types else layers
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    native = int(text["max_position_embeddings"])
    scaling = text.get("rope_scaling") or {}
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) in ("yarn", "linear", "dynamic"):
        native = int(native * float(scaling.get("factor", 1)))  # vLLM derives the longer context (config/model.py)
    dtype = str(
        config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype") or text.get("dtype") or "bfloat16"
    )
    state = 0
    if "linear_attention" in layer_types:
        # Gated DeltaNet, as vLLM 0.26 sizes its state (mamba_utils.py), HYBRID_STATE_PAGES pages of it.
        k_heads, v_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
        k_dim, v_dim, kernel = (
            int(text["linear_key_head_dim"]),
            int(text["linear_value_head_dim"]),
            int(text["linear_conv_kernel_dim"]),
        )
        conv = (k_dim * k_heads * 2 + v_dim * v_heads) * (kernel - 1) * DTYPE_BYTES.get(dtype, 2)
        temporal = v_heads * v_dim * k_dim * DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype", "float32")), 4)
        state = HYBRID_STATE_PAGES * (conv + temporal)
    total = int(index.get("metadata", {}).get("total_size", 0))
    if not total:
        raise HubError(f"{repo}: model.safetensors.index.json has no metadata.total_size")
    return ModelFacts(
        source=repo,
        architectures=tuple(str(a) for a in config.get("architectures", [])),
        dtype=dtype,
        weight_bytes=total,
        layers=layers,
        attention_layers=attention_layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        native_context=native,
        multimodal="vision_config" in config,
        linear_state_bytes_per_layer=state,
        where=f"config.json and model.safetensors.index.json of {repo} (make lookup)",
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the Hub's answer itself carries the size; the CDN it points at is not asked


def hub_file_size(repo: str, filename: str, *, token: str = "", base: str | None = None) -> int:
    """A file's size from the Hub's HEAD answer (X-Linked-Size for a file stored in LFS, else Content-Length)."""
    request = _request(repo, filename, token=token, base=base, method="HEAD")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        answer = opener.open(request, timeout=TIMEOUT_SECONDS)
        headers = answer.headers
    except urllib.error.HTTPError as error:
        if error.code not in (301, 302, 303, 307, 308):
            raise HubError(f"{repo}: the Hub answered {error.code} for {filename}", status=error.code) from None
        headers = error.headers
    except (urllib.error.URLError, OSError) as error:
        raise HubError(f"{repo}: cannot read {filename} from {base or endpoint()}: {error}") from None
    size = headers.get("X-Linked-Size") or headers.get("Content-Length")
    if not size:
        raise HubError(f"{repo}: the Hub gave no size for {filename}")
    return int(size)


def hub_model_facts(repo: str, *, token: str = "", base: str | None = None) -> ModelFacts:
    config = hub_json(repo, "config.json", token=token, base=base)
    try:
        index = hub_json(repo, "model.safetensors.index.json", token=token, base=base)
    except HubError as error:
        if error.status != 404:
            raise
        # A checkpoint small enough for one file has no index: its one file's size is the total.
        index = {"metadata": {"total_size": hub_file_size(repo, "model.safetensors", token=token, base=base)}}
    return facts_from_files(repo, config, index)


def check_model_source(model_source: str, *, token: Callable[[], str] | None) -> CheckResult:
    """The model's repository exists on the Hub and can be read: anonymously, or (gated) with the token of
    HF_TOKEN_SECRET_NAME (`token` reads it, only then; None: no secret configured)."""
    name = "model-source"
    try:
        hub_json(model_source, "config.json")
    except HubError as error:
        if error.status in (401, 403):
            if token is None:
                return fail(
                    name,
                    str(error),
                    "put a Hugging Face token that may read the model in Secrets Manager and set HF_TOKEN_SECRET_NAME",
                )
            try:
                hub_json(model_source, "config.json", token=token())
            except HubError as with_token:
                return fail(
                    name, str(with_token), "use a token whose account has accepted the model's licence on the Hub"
                )
            return ok(name, f"{model_source} is gated: readable with the token of HF_TOKEN_SECRET_NAME")
        if error.status == 404:
            return fail(name, str(error), "set MODEL_SOURCE to an existing Hugging Face repository ORG/NAME")
        return warn(name, str(error), "not checked: the Hub did not answer; run the preflight again")
    return ok(name, f"{model_source} readable on the Hub")
