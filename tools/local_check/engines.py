"""The serving stack the one-host check drives: vLLM on this host's GPUs, or a stand-in the tests give
(`--engine MODULE:CLASS`). The lone engine runs in a process of its own (tools/local_check/reference.py)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from tools.local_check.results import memory_report
from tools.local_check.shape import Host

PARITY_MAX_TOKENS = 32


class Engine(Protocol):
    """What the runner asks of the serving stack: the real one (vLLM on a GPU), or a stand-in the tests give."""

    name: str

    def host(self) -> Host: ...

    def installed_versions(self) -> dict[str, str]: ...

    def reference(
        self, model: str, engine_kwargs: dict[str, Any], prompts: list[list[int]] | None, log: Path, env: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, float]]: ...

    def random_checkpoint(self, model_dir: Path, target: Path) -> dict[str, Any]: ...

    def app_import_path(self, deployed: str) -> str: ...


class VllmEngine:
    """vLLM 0.26 on this host's GPUs: the lone engine in a process of its own."""

    name = "vllm"

    def host(self) -> Host:
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise MissingPrerequisite(
                "no NVIDIA GPU is visible (torch.cuda.device_count() is 0): run `make local-check` on a GPU host"
            )
        properties = torch.cuda.get_device_properties(0)
        total = torch.cuda.mem_get_info(0)[1]
        return Host(
            gpus=torch.cuda.device_count(),
            gpu_name=properties.name,
            gpu_total_bytes=total,
            compute_capability=(properties.major, properties.minor),
            efa=_has_efa(),
            cutlass_dsl=importlib.util.find_spec("cutlass") is not None,
        )

    def installed_versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        found = {}
        for name in ("ray", "vllm", "nixl", "torch"):
            try:
                found[name] = version(name).split("+", 1)[0]
            except PackageNotFoundError:
                found[name] = "not installed"
        return found

    def reference(
        self, model: str, engine_kwargs: dict[str, Any], prompts: list[list[int]] | None, log: Path, env: dict[str, str]
    ) -> tuple[dict[str, Any], dict[str, float]]:
        out = log.with_suffix(".json")
        # A previous run's answers in the same directory would read as this engine's (and stop it early).
        out.unlink(missing_ok=True)
        command = [
            sys.executable,
            "-m",
            "tools.local_check.reference",
            "--model",
            model,
            "--engine-kwargs",
            json.dumps(engine_kwargs),
            "--output",
            str(out),
        ]
        if prompts is not None:
            prompt_file = log.with_suffix(".prompts.json")
            prompt_file.write_text(json.dumps(prompts))
            command += ["--prompts", str(prompt_file), "--max-tokens", str(PARITY_MAX_TOKENS)]
        with log.open("w") as sink:
            process = subprocess.Popen(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    **env,
                    "VLLM_LOGGING_LEVEL": "DEBUG",
                    "VLLM_LOGGING_CONFIG_PATH": str(_debug_logging(log)),
                },
                start_new_session=True,  # its engine core is a child: stopped with it, as a group
            )
            returncode = _wait_for_answers(process, out)
        text = log.read_text(errors="replace")
        if returncode != 0 and not out.is_file():
            tail = [line for line in text.splitlines() if "Error" in line][-1:] or text.splitlines()[-1:]
            raise RuntimeError(f"the lone engine failed (exit {returncode}; {log}): {tail[0] if tail else ''}")
        result = json.loads(out.read_text())
        report = memory_report(text)
        report["start_s"] = result["start_s"]
        if "generate_s" in result:
            report["generate_s"] = result["generate_s"]
        return result, report

    def random_checkpoint(self, model_dir: Path, target: Path) -> dict[str, Any]:
        """tools/local_check/checkpoint.py in a process of its own, so that its CUDA context is gone before the
        engines start."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tools.local_check.checkpoint",
                "--model-dir",
                str(model_dir),
                "--target",
                str(target),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
            raise MissingPrerequisite(
                f"the random checkpoint could not be written: {tail[0] if tail else done.returncode}"
            )
        written: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return written

    def app_import_path(self, deployed: str) -> str:
        return deployed


def _debug_logging(log: Path) -> Path:
    """vLLM's own logging configuration (vllm/logger.py) at DEBUG, for the memory report, except vllm.ir: it logs every
    op's dispatch with its tensors' values, which made 4 greedy answers take minutes in eager mode on the H200."""
    path = log.with_suffix(".logging.json")
    line = "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "vllm": {"class": "vllm.logging_utils.NewLineFormatter", "datefmt": "%m-%d %H:%M:%S", "format": line}
        },
        "handlers": {
            "vllm": {
                "class": "logging.StreamHandler",
                "formatter": "vllm",
                "level": "DEBUG",
                "stream": "ext://sys.stdout",
            }
        },
        "loggers": {"vllm": {"handlers": ["vllm"], "level": "DEBUG", "propagate": False}, "vllm.ir": {"level": "INFO"}},
    }
    path.write_text(json.dumps(config))
    return path


# Once the answers are written, the lone engine has this long to exit before its process group is stopped: its
# shutdown does not matter to the check, and the GPU must be free for the deployment.
EXIT_GRACE_S = 10


def _wait_for_answers(process: subprocess.Popen[bytes], answers: Path) -> int:
    """The lone engine's exit status; stopped (SIGTERM, then SIGKILL) once its answers are written and the grace ran
    out."""
    written_at: float | None = None
    while process.poll() is None:
        if written_at is None and answers.is_file():
            written_at = time.monotonic()
        if written_at is not None and time.monotonic() - written_at > EXIT_GRACE_S:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return process.wait(timeout=10)
        time.sleep(0.5)
    return process.returncode


class MissingPrerequisite(Exception):
    """The check cannot run here: one line, exit 2."""


def _has_efa() -> bool:
    """An EFA device (its uverbs under /sys/class/infiniband) and libfabric's efa provider loadable."""
    devices = Path("/sys/class/infiniband")
    return (
        devices.is_dir()
        and any(d.name.startswith("rdmap") or "efa" in d.name for d in devices.iterdir())
        and shutil.which("fi_info") is not None
    )


def load_engine(spec: str) -> Engine:
    if spec == "vllm":
        return VllmEngine()
    module, _, name = spec.partition(":")
    engine: Engine = getattr(importlib.import_module(module), name)()
    return engine
