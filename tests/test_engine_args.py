"""Each phase's engine_kwargs against vLLM 0.26's EngineArgs (vendored by `make vendor-vllm`): what Ray's serve schema
lets through and only the engine would refuse, on a GPU node, fails the synth with one line."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from k8s_constructs.serve_config import EngineKwargs, KvTransferConfig, pd_application
from settings.engine_args import ENGINE_ARGS_FILE, check_engine_kwargs, vendored
from settings.errors import SettingError
from tests.conftest import run_entry_point, settings_for
from tools.maintainer.vendor_vllm import Source, architectures_text, engine_args_document


def _message(phase: str, kwargs: dict[str, object]) -> str:
    with pytest.raises(SettingError) as error:
        check_engine_kwargs(phase, kwargs)
    text = str(error.value)
    assert "\n" not in text
    return text


def test_the_synthesized_engine_kwargs_are_vllms_own_fields() -> None:
    application = pd_application(settings_for())
    for phase in (application.prefill, application.decode):
        kwargs = phase.engine.to_dict()
        assert set(kwargs) <= set(vendored()["engine_args"]) | set(vendored()["frontend_args"])
        assert set(kwargs["kv_transfer_config"]) <= set(vendored()["kv_transfer_config"])


def test_a_misspelt_key_fails_naming_the_phase_and_the_field_it_meant() -> None:
    text = _message("prefill", {"max_num_seq": 64})
    assert text.startswith("serveConfigV2 prefill engine_kwargs.max_num_seq=64 is not allowed")
    assert "did you mean max_num_seqs?" in text


def test_a_value_of_the_wrong_kind_fails_with_the_annotation() -> None:
    text = _message("decode", {"max_num_seqs": "64"})
    assert "engine_kwargs.max_num_seqs='64'" in text and "takes int | None" in text
    assert "a bool" in _message("decode", {"max_model_len": True})  # bool is not an int here
    check_engine_kwargs("decode", {"max_num_seqs": 64, "gpu_memory_utilization": 1, "kv_cache_memory_bytes": None})


def test_a_literal_takes_only_its_values() -> None:
    assert "not one of" in _message("prefill", {"dtype": "bf16"})
    check_engine_kwargs("prefill", {"dtype": "bfloat16"})


def test_the_kv_transfer_config_keys_are_checked_too() -> None:
    text = _message("decode", {"kv_transfer_config": {"kv_connector": "NixlConnector", "kv_roles": "kv_consumer"}})
    assert "engine_kwargs.kv_transfer_config.kv_roles" in text and "did you mean kv_role?" in text
    assert "kv_role" in _message("decode", {"kv_transfer_config": {"kv_role": "kv_reader"}})


def test_a_wrongly_typed_field_in_the_serve_config_fails_the_build() -> None:
    engine = EngineKwargs(kv_transfer=KvTransferConfig(engine_id="prefill", backends=("UCX",)), max_model_len="4096")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match=re.escape("prefill engine_kwargs.max_model_len='4096'")):
        engine.to_dict()


def test_the_synth_prints_one_line_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # A recipe's mistake as it reaches app.py: the value wired as text.
    import k8s_constructs.serve_config as serve_config

    original = serve_config.EngineKwargs.to_dict

    def wired(self: EngineKwargs) -> dict[str, object]:
        kwargs = {**original(self), "max_num_seqs": "64"}
        check_engine_kwargs(self.kv_transfer.engine_id, kwargs)
        return kwargs

    monkeypatch.setattr(serve_config.EngineKwargs, "to_dict", wired)
    status, _out, err = run_entry_point("app", {}, tmp_path / "out", monkeypatch, capfd)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert status != 0 and len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert "serveConfigV2 prefill engine_kwargs.max_num_seqs='64' is not allowed" in errors[0]
    assert "takes int | None" in errors[0]


# --- the vendoring tool, on a wheel written here with the shapes vLLM's source uses -------------------------

ARG_UTILS = """
from dataclasses import dataclass
from typing import Literal, Optional, Any
from vllm.config.model import ModelDType, RunnerOption
from vllm.config.compilation import CompilationConfig

@dataclass
class EngineArgs:
    model: str = "m"
    max_num_seqs: int | None = None
    gpu_memory_utilization: float = 0.9
    dtype: ModelDType = "auto"
    runner: RunnerOption = "auto"
    compilation_config: CompilationConfig = None
    loader: "Optional[str]" = None
    executor: str | type[object] | None = None
    mode: str | Literal["x"] = "x"
    _private: int = 0
    overrides: dict[str, Any] = None
    backend: AttentionBackend = None
    level: Literal[-1, 0, 1] = 0
    lora_dtype: str | torch.dtype | None = None

@dataclass
class AsyncEngineArgs(EngineArgs):
    enable_log_requests: bool = False
"""
MODEL = """
from typing import Literal
RunnerType = Literal["generate", "pooling"]
RunnerOption = Literal["auto", RunnerType]
ModelDType = Literal["auto", "bfloat16"]
"""
KV = """
from typing import Literal
KVRole = Literal["kv_producer", "kv_consumer"]
class KVTransferConfig:
    kv_role: KVRole | None = None
    kv_buffer_size: float = 1e9
"""
REGISTRY = """
_TEXT_GENERATION_MODELS = {"LlamaForCausalLM": ("llama", "X")}
_MULTIMODAL_MODELS: dict = {"Qwen3_5ForConditionalGeneration": ("q", "Y")}
_OTHER = {"NotServed": ()}
"""


FRONTEND = """
class BaseFrontendArgs:
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
class FrontendArgs(BaseFrontendArgs):
    port: int = 8000
"""


def _wheel(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    wheel = tmp_path / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/engine/arg_utils.py", ARG_UTILS)
        archive.writestr("vllm/config/model.py", MODEL)
        archive.writestr("vllm/config/kv_transfer.py", KV)
        archive.writestr("vllm/config/compilation.py", "class CompilationConfig:\n    level: int = 0\n")
        archive.writestr(
            "vllm/backends.py",
            "from enum import Enum\nclass _Backend(str, Enum):\n    pass\n"
            "class AttentionBackend(_Backend):\n    A = 'a'\n",
        )
        for name, text in (extra or {}).items():
            archive.writestr(name, text)
        archive.writestr("vllm/model_executor/models/registry.py", REGISTRY)
        archive.writestr("vllm/entrypoints/openai/cli_args.py", FRONTEND)
        archive.writestr("vllm/tool_parsers/__init__.py", '_TOOL_PARSERS_TO_REGISTER = {"hermes": ("h", "H")}\n')
        archive.writestr("vllm/reasoning/__init__.py", '_REASONING_PARSERS_TO_REGISTER = {"qwen3": ("q", "Q")}\n')
        archive.writestr("vllm/_version.py", "__version__ = version = '0.26.0'\n__commit_id__ = commit_id = 'gabc'\n")
    return wheel


def test_the_vendoring_tool_resolves_vllms_aliases_and_unions(tmp_path: Path) -> None:
    document = engine_args_document(Source(_wheel(tmp_path)))
    fields = {name: (entry["kinds"], entry.get("values")) for name, entry in document["engine_args"].items()}
    assert fields == {
        "backend": (["str"], None),  # an Enum through a base of its own: its values
        "level": (["int"], [-1, 0, 1]),
        "loader": (["null", "str"], None),
        "lora_dtype": (["any"], None),  # torch.dtype: another package's type, not guessed
        "compilation_config": (["dict"], None),
        "dtype": (["str"], ["auto", "bfloat16"]),
        "enable_log_requests": (["bool"], None),
        "executor": (["null", "str"], None),
        "gpu_memory_utilization": (["float", "int"], None),
        "max_num_seqs": (["int", "null"], None),
        "mode": (["str"], None),  # a Literal beside str admits any string
        "model": (["str"], None),
        "overrides": (["dict"], None),
        "runner": (["str"], ["auto", "generate", "pooling"]),
    }
    assert document["kv_transfer_config"]["kv_role"]["values"] == ["kv_producer", "kv_consumer", None]
    assert "gabc" in str(document["source"])


def test_the_vendoring_tool_reads_the_frontend_args_and_the_parser_registries(tmp_path: Path) -> None:
    document = engine_args_document(Source(_wheel(tmp_path)))
    assert sorted(document["frontend_args"]) == ["enable_auto_tool_choice", "port", "tool_call_parser"]
    assert list(document["frontend_server_args"]) == ["port"]  # FrontendArgs' own: vLLM's HTTP server
    assert (document["tool_call_parsers"], document["reasoning_parsers"]) == (["hermes"], ["qwen3"])


def test_the_vendoring_tool_lists_the_served_architectures(tmp_path: Path) -> None:
    source = Source(_wheel(tmp_path))
    assert source.architectures() == ["LlamaForCausalLM", "Qwen3_5ForConditionalGeneration"]
    assert architectures_text(source, source.architectures()).splitlines()[-2:] == [
        "LlamaForCausalLM",
        "Qwen3_5ForConditionalGeneration",
    ]


def test_the_vendored_file_names_its_wheel() -> None:
    document = json.loads(ENGINE_ARGS_FILE.read_text())
    assert document["source"].startswith(
        "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl (vLLM 0.26.0, commit gffd46bfab)"
    )
    # What the serve config sets and the check relies on, as the wheel declares it.
    assert document["engine_args"]["max_num_seqs"]["annotation"] == "int | None"
    assert document["engine_args"]["language_model_only"]["kinds"] == ["bool"]


def test_the_vendoring_tool_refuses_a_name_with_two_meanings(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {"vllm/other.py": 'from typing import Literal\nModelDType = Literal["fp8"]\n'})
    with pytest.raises(SystemExit, match="ModelDType is defined differently"):
        engine_args_document(Source(wheel))


def test_the_gpu_requirements_pin_the_images_versions() -> None:
    # The one-host check's stack (requirements-gpu.txt) is the image's: the versions settings/versions.py pins.
    from settings import versions
    from tools.local_check.plan import image_versions

    pins = image_versions()
    assert pins["vllm"] == versions.VLLM_VERSION
    assert pins["ray"] == versions.RAY_VERSION
