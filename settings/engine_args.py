"""Each phase's engine_kwargs checked at synth against vLLM's own EngineArgs and FrontendArgs at the image's version: a
misspelt key or a value of the wrong kind fails here with one line, not when the engine starts on a GPU node 30 minutes
later.

Ray Serve LLM 2.58 splits engine_kwargs itself (ray/llm/_internal/serve/engines/vllm/vllm_models.py): a key of vLLM's
FrontendArgs goes to vLLM's OpenAI serving (init_app_state), one of AsyncEngineArgs to the engine, any other is refused
when the replica starts. The fields, the JSON kinds their annotations admit and the parser registries are vendored from
the vLLM wheel by `make vendor-vllm` (tools/maintainer/vendor_vllm.py) into settings/data/; Ray's serve schema does not
look inside engine_kwargs.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from settings.errors import SettingError
from settings.versions import RAY_VERSION, VLLM_VERSION, vllm_data_file

ENGINE_ARGS_FILE: Final = vllm_data_file("engine_args.json")
# The vendored file's tables: EngineArgs' fields, and the nested dicts whose keys are checked too (their table, and
# the config class vLLM builds from them). tools/maintainer/vendor_vllm.py writes them under these names.
ENGINE_TABLE: Final = "engine_args"
FRONTEND_TABLE: Final = "frontend_args"
# FrontendArgs' own fields (host, port, TLS, CORS, ...): options of vLLM's HTTP server, which Ray Serve does not run.
FRONTEND_SERVER_TABLE: Final = "frontend_server_args"
TOOL_PARSERS: Final = "tool_call_parsers"
REASONING_PARSERS: Final = "reasoning_parsers"
PARSER_TABLES: Final = (TOOL_PARSERS, REASONING_PARSERS)
NESTED: Final = {"kv_transfer_config": ("kv_transfer_config", "KVTransferConfig")}
# What a value in a serve config can be, and the kind of an annotation that admits any (or one the vendoring tool
# could not resolve: then the key alone is checked).
JSON_KINDS: Final = ("null", "bool", "int", "float", "str", "dict", "list")
ANY: Final = "any"


@cache
def vendored() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(ENGINE_ARGS_FILE.read_text())
    return document


def parser_names(table: str) -> tuple[str, ...]:
    """The names vLLM registers in one of PARSER_TABLES."""
    names: list[str] = vendored()[table]
    return tuple(names)


def field_owner(key: str) -> str | None:
    """Which of vLLM's argument classes takes an engine_kwargs key, as Ray splits them (FrontendArgs first)."""
    tables = vendored()
    if key in tables[FRONTEND_TABLE]:
        return "FrontendArgs"
    if key in tables[ENGINE_TABLE]:
        return "EngineArgs"
    return None


def json_kind(value: object) -> str:
    if value is None:
        return "null"
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("str", str), ("dict", dict)):
        if isinstance(value, types):
            return kind
    return "list" if isinstance(value, (list, tuple)) else type(value).__name__


def _problem(key: str, value: object, fields: Mapping[str, Mapping[str, Any]], owner: str) -> str | None:
    field = fields.get(key)
    if field is None:
        close = difflib.get_close_matches(key, fields, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"not a field of vLLM {VLLM_VERSION}'s {owner}{hint}"
    kinds = field["kinds"]
    if ANY in kinds:
        return None
    if json_kind(value) not in kinds:
        return f"a {json_kind(value)}, where vLLM {VLLM_VERSION}'s {owner}.{key} takes {field['annotation']}"
    if "values" in field and value not in field["values"]:
        return f"not one of {field['values']} ({owner}.{key})"
    return None


def problem_of(key: str, value: object) -> str | None:
    """Why vLLM (through Ray's split) would refuse one engine_kwargs key and value; None when it takes it."""
    tables = vendored()
    if key in tables[FRONTEND_SERVER_TABLE]:
        return f"an option of vLLM's own HTTP server (FrontendArgs), which Ray Serve {RAY_VERSION} does not run"
    owner = field_owner(key)
    if owner is None:
        close = difflib.get_close_matches(key, [*tables[ENGINE_TABLE], *tables[FRONTEND_TABLE]], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"not a field of vLLM {VLLM_VERSION}'s EngineArgs or FrontendArgs{hint}"
    return _problem(key, value, tables[FRONTEND_TABLE if owner == "FrontendArgs" else ENGINE_TABLE], owner)


def check_engine_kwargs(phase: str, engine_kwargs: Mapping[str, Any]) -> None:
    """Raise SettingError, naming the phase, the key and the value, for the first key vLLM would refuse."""
    tables = vendored()
    for key, value in engine_kwargs.items():
        problem = problem_of(key, value)
        where = f"serveConfigV2 {phase} engine_kwargs.{key}"
        if problem is None and key in NESTED and isinstance(value, Mapping):
            table, owner = NESTED[key]
            for inner, inner_value in value.items():
                inner_problem = _problem(inner, inner_value, tables[table], owner)
                if inner_problem:
                    raise SettingError(f"{where}.{inner}", inner_value, inner_problem)
        if problem:
            raise SettingError(where, value, problem)
