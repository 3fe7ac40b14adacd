"""Each phase's engine_kwargs checked at synth against vLLM's own EngineArgs at the image's version: a misspelt key or
a value of the wrong kind fails here with one line, not when the engine starts on a GPU node 30 minutes later.

The fields and the JSON kinds their annotations admit are vendored from the vLLM wheel by `make vendor-vllm`
(tools/maintainer/vendor_vllm.py) into settings/data/; Ray's serve schema does not look inside engine_kwargs.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from settings.errors import SettingError
from settings.versions import VLLM_VERSION, vllm_data_file

ENGINE_ARGS_FILE: Final = vllm_data_file("engine_args.json")
# The vendored file's tables: EngineArgs' fields, and the nested dicts whose keys are checked too (their table, and
# the config class vLLM builds from them). tools/maintainer/vendor_vllm.py writes them under these names.
ENGINE_TABLE: Final = "engine_args"
NESTED: Final = {"kv_transfer_config": ("kv_transfer_config", "KVTransferConfig")}
# What a value in a serve config can be, and the kind of an annotation that admits any (or one the vendoring tool
# could not resolve: then the key alone is checked).
JSON_KINDS: Final = ("null", "bool", "int", "float", "str", "dict", "list")
ANY: Final = "any"


@cache
def vendored() -> dict[str, dict[str, dict[str, Any]]]:
    document: dict[str, dict[str, dict[str, Any]]] = json.loads(ENGINE_ARGS_FILE.read_text())
    return document


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


def check_engine_kwargs(phase: str, engine_kwargs: Mapping[str, Any]) -> None:
    """Raise SettingError, naming the phase, the key and the value, for the first key vLLM would refuse."""
    tables = vendored()
    for key, value in engine_kwargs.items():
        problem = _problem(key, value, tables[ENGINE_TABLE], "EngineArgs")
        where = f"serveConfigV2 {phase} engine_kwargs.{key}"
        if problem is None and key in NESTED and isinstance(value, Mapping):
            table, owner = NESTED[key]
            for inner, inner_value in value.items():
                inner_problem = _problem(inner, inner_value, tables[table], owner)
                if inner_problem:
                    raise SettingError(f"{where}.{inner}", inner_value, inner_problem)
        if problem:
            raise SettingError(where, value, problem)
