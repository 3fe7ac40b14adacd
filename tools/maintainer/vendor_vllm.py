"""Vendor what the synth checks against vLLM, from the vLLM wheel inside the Ray LLM image (`make vendor-vllm`).

Writes, from the wheel's source read as text (no import: vLLM needs torch and a GPU stack):
- settings/data/vllm_0_26_engine_args.json: every field of `EngineArgs` and `AsyncEngineArgs`
  (vllm/engine/arg_utils.py), of `BaseFrontendArgs` and `FrontendArgs` (vllm/entrypoints/openai/cli_args.py: Ray
  Serve LLM hands these to vLLM's OpenAI serving) and of `KVTransferConfig` (vllm/config/kv_transfer.py), with the
  JSON kinds its annotation admits, which settings/engine_args.py checks each phase's engine_kwargs against; and the
  names of vLLM's tool-call and reasoning parsers (vllm/tool_parsers/__init__.py, vllm/reasoning/__init__.py);
- settings/data/vllm_0_26_architectures.txt: the model architectures vLLM serves (the keys of
  _TEXT_GENERATION_MODELS and _MULTIMODAL_MODELS in vllm/model_executor/models/registry.py).

The wheel is `pip download vllm==VLLM_VERSION --no-deps` (or --wheel PATH). Run it when the image moves to another
vLLM (VLLM_VERSION in settings/versions.py, which also names both files: delete the old version's).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from settings.engine_args import (
    ANY,
    ENGINE_ARGS_FILE,
    ENGINE_TABLE,
    FRONTEND_SERVER_TABLE,
    FRONTEND_TABLE,
    JSON_KINDS,
    NESTED,
    PARSER_TABLES,
    json_kind,
)
from settings.model_facts import VLLM_ARCHITECTURES_FILE
from settings.versions import VLLM_VERSION

ARG_UTILS = "vllm/engine/arg_utils.py"
KV_TRANSFER = "vllm/config/kv_transfer.py"  # where the nested kv_transfer_config's class is declared
NESTED_TABLE, NESTED_OWNER = NESTED["kv_transfer_config"]
REGISTRY = "vllm/model_executor/models/registry.py"
ENGINE_CLASSES = ("EngineArgs", "AsyncEngineArgs")
FRONTEND_ARGS = "vllm/entrypoints/openai/cli_args.py"
# BaseFrontendArgs holds what vLLM's OpenAI serving reads; FrontendArgs adds its own HTTP server's options.
FRONTEND_BASE, FRONTEND_CLASS = "BaseFrontendArgs", "FrontendArgs"
# Each parser table's module and the module-level dict whose keys are the registered names.
PARSER_REGISTRIES = {
    "tool_call_parsers": ("vllm/tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
    "reasoning_parsers": ("vllm/reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER"),
}
ARCHITECTURE_TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")

# JSON kinds: what a value in a YAML/JSON serve config can be.
BUILTIN_KINDS = {
    "int": ["int"],
    "float": ["float", "int"],  # an integer is a valid float (vLLM's own configs accept 1 for 1.0)
    "bool": ["bool"],
    "str": ["str"],
    "None": ["null"],
    "dict": ["dict"],
    "Mapping": ["dict"],
    "list": ["list"],
    "set": ["list"],
    "tuple": ["list"],
    "Sequence": ["list"],
}


class Source:
    """The wheel's Python files, and the module-level type aliases and classes they declare."""

    def __init__(self, wheel: Path) -> None:
        self.wheel = wheel
        with zipfile.ZipFile(wheel) as archive:
            self.files = {
                name: archive.read(name).decode()
                for name in archive.namelist()
                if name.startswith("vllm/") and name.endswith(".py")
            }
        # Every module-level alias and class of the package by name; a name an annotation uses must have one meaning
        # (_one() refuses one defined differently in two modules, rather than guess which the annotation imports).
        self.aliases: dict[str, list[ast.expr]] = {}
        self.classes: dict[str, list[ast.ClassDef]] = {}
        self.trees = {path: ast.parse(text) for path, text in self.files.items()}  # parsed once, read by module()
        for tree in self.trees.values():
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append(node)
                elif (assigned := _assigned(node)) and (
                    not isinstance(node, ast.AnnAssign) or ast.unparse(node.annotation).endswith("TypeAlias")
                ):
                    self.aliases.setdefault(assigned[0], []).append(assigned[1])

    def _one(self, name: str, found: list[Any]) -> Any:
        if len({ast.dump(node) for node in found}) > 1:
            raise SystemExit(f"{name} is defined differently in several modules of {self.wheel.name}: resolve it here")
        return found[0]

    def _enum_kinds(self, name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
        """The JSON kind of an Enum's values, following its bases through the package (None: not an Enum)."""
        for base in self._one(name, self.classes[name]).bases:
            base_name = ast.unparse(base).rsplit(".", 1)[-1]
            if base_name == "IntEnum":
                return {"int"}
            if base_name in ("Enum", "StrEnum", "str"):
                return {"str"}
            if base_name in self.classes and base_name not in seen:
                found = self._enum_kinds(base_name, seen | {name})
                if found is not None:
                    return found
        return None

    def module(self, path: str) -> ast.Module:
        return self.trees[path]

    def version(self) -> str:
        match = re.search(r"__version__ = version = '([^']+)'", self.files["vllm/_version.py"])
        return match.group(1) if match else "unknown"

    def commit(self) -> str:
        match = re.search(r"__commit_id__ = commit_id = '([^']+)'", self.files["vllm/_version.py"])
        return match.group(1) if match else "unknown"

    def kinds(
        self, expr: ast.expr, seen: frozenset[str] = frozenset(), *, literal: bool = False
    ) -> tuple[set[str], list[object]]:
        """The JSON kinds an annotation admits, and the values of a Literal (empty: any value of those kinds)."""
        if isinstance(expr, ast.Constant):
            if expr.value is None:
                return {"null"}, []
            if literal:  # an item of a Literal: the value itself
                return {_kind_of(expr.value)}, [expr.value]
            if isinstance(expr.value, str):  # a forward reference
                return self.kinds(ast.parse(expr.value, mode="eval").body, seen)
            return {ANY}, []
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub) and isinstance(expr.operand, ast.Constant):
            value = expr.operand.value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return {_kind_of(value)}, [-value]  # Literal[-1]
            return {ANY}, []
        if isinstance(expr, ast.Attribute):
            return {ANY}, []  # another package's type (torch.dtype): not for this reader to guess
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return _union([self.kinds(expr.left, seen), self.kinds(expr.right, seen)])
        if isinstance(expr, ast.Subscript):
            head = ast.unparse(expr.value).rsplit(".", 1)[-1]
            items = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            if head == "Literal":  # its items: constants, or names of other Literals (Literal["auto", RunnerType])
                parts = [self.kinds(item, seen, literal=True) for item in items]
                if any(not values for _, values in parts):
                    return {ANY}, []
                return _union(parts)
            if head == "Callable":
                return set(), []  # a function: nothing a serve config can hold
            if head in ("Optional",):
                return _union([self.kinds(items[0], seen), ({"null"}, [])])
            if head == "Union":
                return _union([self.kinds(item, seen) for item in items])
            if head == "Annotated":
                return self.kinds(items[0], seen)
            if head == "type":
                return set(), []  # a class: nothing a serve config can hold
            return self.kinds(expr.value, seen)
        name = ast.unparse(expr).rsplit(".", 1)[-1]
        if name in BUILTIN_KINDS:
            return set(BUILTIN_KINDS[name]), []
        if name == "Any":
            return {ANY}, []
        if name in self.aliases and name not in seen:
            return self.kinds(self._one(name, self.aliases[name]), seen | {name}, literal=literal)
        if name in self.classes:
            enum = self._enum_kinds(name)
            if enum is not None:
                return enum, []  # a member by its value
            return {"dict"}, []  # vLLM's config classes take their fields as a dict (as kv_transfer_config does)
        return {ANY}, []

    def fields(self, path: str, classes: Iterable[str]) -> dict[str, dict[str, object]]:
        wanted = set(classes)
        found: dict[str, dict[str, object]] = {}
        for node in self.module(path).body:
            if isinstance(node, ast.ClassDef) and node.name in wanted:
                for statement in node.body:
                    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                        name = statement.target.id
                        if name.startswith("_"):
                            continue  # private: set by vLLM itself
                        kinds, values = self.kinds(statement.annotation)
                        entry: dict[str, object] = {
                            "annotation": ast.unparse(statement.annotation),
                            "kinds": sorted(kinds) if ANY not in kinds else [ANY],
                        }
                        if values and ANY not in kinds:
                            entry["values"] = values
                        found[name] = entry
                wanted.discard(node.name)
        if wanted:
            raise SystemExit(f"{path} of {self.wheel.name} has no class {', '.join(sorted(wanted))}")
        return dict(sorted(found.items()))

    def registered(self, path: str, table: str) -> list[str]:
        """The keys of a module-level dict of names (a parser registry)."""
        for node in self.module(path).body:
            assigned = _assigned(node)
            if assigned and assigned[0] == table and isinstance(assigned[1], ast.Dict):
                return sorted(str(key.value) for key in assigned[1].keys if isinstance(key, ast.Constant))
        raise SystemExit(f"{path} of {self.wheel.name} has no {table}")

    def architectures(self) -> list[str]:
        names: set[str] = set()
        for node in self.module(REGISTRY).body:
            assigned = _assigned(node)
            if assigned and assigned[0] in ARCHITECTURE_TABLES and isinstance(assigned[1], ast.Dict):
                names.update(str(key.value) for key in assigned[1].keys if isinstance(key, ast.Constant))
        return sorted(names)


def _assigned(node: ast.stmt) -> tuple[str, ast.expr] | None:
    """The name and value of a module-level `NAME = value` or `NAME: T = value`."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return node.target.id, node.value
    return None


def _kind_of(value: object) -> str:
    kind = json_kind(value)
    return kind if kind in JSON_KINDS else ANY


def _union(parts: list[tuple[set[str], list[object]]]) -> tuple[set[str], list[object]]:
    kinds: set[str] = set()
    values: list[object] = []
    literal_only = True
    for part_kinds, part_values in parts:
        kinds |= part_kinds
        values += [value for value in part_values if value not in values]
        if part_kinds == {"null"} and None not in values:
            values.append(None)
        # A Literal beside an open kind (str | Literal[...]) admits any value of that kind.
        if not part_values and part_kinds - {"null"}:
            literal_only = False
    return kinds, (values if literal_only else [])


def engine_args_document(source: Source) -> dict[str, object]:
    return {
        "source": (
            f"{source.wheel.name} (vLLM {source.version()}, commit {source.commit()}): {ARG_UTILS} "
            f"{' and '.join(ENGINE_CLASSES)}, {FRONTEND_ARGS} {FRONTEND_BASE} and {FRONTEND_CLASS}, {KV_TRANSFER}"
            f" {NESTED_OWNER}, the parser registries of {' and '.join(p for p, _ in PARSER_REGISTRIES.values())};"
            " written by `make vendor-vllm`"
        ),
        "license": "Apache-2.0 (vLLM); field names and annotations only",
        ENGINE_TABLE: source.fields(ARG_UTILS, ENGINE_CLASSES),
        FRONTEND_TABLE: source.fields(FRONTEND_ARGS, (FRONTEND_BASE, FRONTEND_CLASS)),
        FRONTEND_SERVER_TABLE: source.fields(FRONTEND_ARGS, (FRONTEND_CLASS,)),
        NESTED_TABLE: source.fields(KV_TRANSFER, (NESTED_OWNER,)),
        **{name: source.registered(*PARSER_REGISTRIES[name]) for name in PARSER_TABLES},
    }


def architectures_text(source: Source, names: list[str]) -> str:
    tables = " and ".join(ARCHITECTURE_TABLES)
    header = (
        f"# The model architectures vLLM {source.version()} serves: the keys of {tables} in\n"
        f"# {REGISTRY} of the vLLM {source.version()} wheel on PyPI ({source.wheel.name},\n"
        f"# _version.py commit {source.commit()}), the vLLM inside the Ray LLM image."
        " Apache-2.0 (vLLM); names only. One per line.\n"
    )
    return header + "".join(f"{name}\n" for name in names)


def download(version: str, into: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--platform",
            "manylinux_2_28_x86_64",
            "-d",
            str(into),
            f"vllm=={version}",
        ],
        check=True,
    )
    (wheel,) = into.glob("vllm-*.whl")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.maintainer.vendor_vllm", description=__doc__.split("\n")[0])
    parser.add_argument("--wheel", type=Path, help=f"a vLLM wheel (default: download vllm=={VLLM_VERSION})")
    parser.add_argument("--check", action="store_true", help="fail when the vendored files differ from the wheel's")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        source = Source(args.wheel or download(VLLM_VERSION, Path(scratch)))
        if source.version() != VLLM_VERSION:
            raise SystemExit(f"the wheel is vLLM {source.version()}; settings/versions.py pins {VLLM_VERSION}")
        outputs = {
            ENGINE_ARGS_FILE: json.dumps(engine_args_document(source), indent=1, sort_keys=False) + "\n",
            VLLM_ARCHITECTURES_FILE: architectures_text(source, source.architectures()),
        }
    stale = [path for path, text in outputs.items() if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path} differs from the wheel's"
            )
        return 1 if stale else 0
    for path, text in outputs.items():
        path.write_text(text)
        print(f"wrote {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
