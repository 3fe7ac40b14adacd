"""The result of one preflight check: passed or failed, what was found, and the fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckResult:
    name: str  # short check name, e.g. "credentials"
    ok: bool
    detail: str  # what was found
    fix: str  # empty when ok; otherwise one sentence telling how to fix it
    warning: str = ""  # ok, but worth a look: shown as WARN with this sentence

    @property
    def verdict(self) -> str:
        return "FAIL" if not self.ok else "WARN" if self.warning else "PASS"


def fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name=name, ok=False, detail=detail, fix=fix)


def ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, ok=True, detail=detail, fix="")


def warn(name: str, detail: str, warning: str) -> CheckResult:
    return CheckResult(name=name, ok=True, detail=detail, fix="", warning=warning)
