"""The one list of accepted findings of the validators other people wrote (accepted-findings.yaml), and the
check of a run's findings against it: a finding not on the list fails, and so does an entry no finding
matches any more (the list never keeps an exception that is no longer needed).

`python -m tools.maintainer.accepted_findings checkov-kubernetes REPORT.json` checks a checkov JSON report
(make checkov);
tests/test_parliament.py checks parliament's findings through `unaccepted` / `unused`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from settings.context_files import REPO

ACCEPTED_FILE = REPO / "accepted-findings.yaml"


@dataclass(frozen=True)
class Finding:
    validator: str  # "parliament" | "checkov-kubernetes"
    check: str  # parliament's issue (RESOURCE_STAR) or checkov's check ID (CKV_K8S_20)
    where: str  # the policy's file or resource, or the Kubernetes object (Kind.namespace.name)
    subject: str = ""  # the action a parliament finding is about ("" for checkov)

    def __str__(self) -> str:
        return f"{self.validator} {self.check} at {self.where}" + (f" ({self.subject})" if self.subject else "")


@dataclass(frozen=True)
class Accepted:
    validator: str
    check: str
    where: tuple[str, ...]  # globs, any of which matches
    subject: str  # a glob; "*" when not given
    reason: str

    def matches(self, finding: Finding) -> bool:
        return (
            self.validator == finding.validator
            and self.check == finding.check
            and any(fnmatch.fnmatchcase(finding.where, where) for where in self.where)
            and fnmatch.fnmatchcase(finding.subject, self.subject)
        )


def accepted(path: Path = ACCEPTED_FILE) -> list[Accepted]:
    data = yaml.safe_load(path.read_text())
    entries = []
    for validator, items in data.items():
        for item in items:
            if not str(item.get("reason", "")).strip():
                raise ValueError(f"{path.name}: {validator} {item.get('check')} at {item.get('where')} has no reason")
            where = item["where"] if isinstance(item["where"], list) else [item["where"]]
            # Several subjects under one reason: one entry each (each must still occur).
            subjects = item.get("subject", "*")
            for subject in subjects if isinstance(subjects, list) else [subjects]:
                entries.append(
                    Accepted(
                        validator, str(item["check"]), tuple(str(w) for w in where), str(subject), str(item["reason"])
                    )
                )
    return entries


def unaccepted(findings: Iterable[Finding], entries: list[Accepted]) -> list[Finding]:
    return [f for f in findings if not any(e.matches(f) for e in entries)]


def unused(findings: Iterable[Finding], entries: list[Accepted], validator: str) -> list[Accepted]:
    found = list(findings)
    return [e for e in entries if e.validator == validator and not any(e.matches(f) for f in found)]


def checkov_findings(report: dict[str, object] | list[dict[str, object]]) -> list[Finding]:
    """Failed checks of checkov's JSON output (one report, or a list of them: one per framework)."""
    reports = report if isinstance(report, list) else [report]
    findings = []
    for one in reports:
        results = one.get("results", {}) if isinstance(one, dict) else {}
        for failed in results.get("failed_checks", []) if isinstance(results, dict) else []:
            findings.append(Finding("checkov-kubernetes", str(failed["check_id"]), str(failed["resource"])))
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("validator", choices=("checkov-kubernetes",))
    parser.add_argument("report", type=Path, help="checkov's JSON output (-o json)")
    parser.add_argument(
        "--passed-at-least", type=int, default=1, help="fewer passed checks than this means checkov scanned nothing"
    )
    parser.add_argument(
        "--objects", type=Path, help="the directory checkov scanned: each of its files must have been parsed"
    )
    args = parser.parse_args(argv)
    report = json.loads(args.report.read_text())
    findings = checkov_findings(report)
    reports = report if isinstance(report, list) else [report]
    passed = sum(int(r.get("summary", {}).get("passed", 0)) for r in reports if isinstance(r, dict))
    entries = accepted()
    new, stale = unaccepted(findings, entries), unused(findings, entries, args.validator)
    for finding in new:
        print(
            f"error: {finding}: not in {ACCEPTED_FILE.name} (fix it, or accept it there with the reason)",
            file=sys.stderr,
        )
    for entry in stale:
        print(
            f"error: {ACCEPTED_FILE.name}: {entry.validator} {entry.check} at {entry.where} matches no finding any"
            " more: remove it",
            file=sys.stderr,
        )
    if passed < args.passed_at_least:
        print(f"error: checkov passed {passed} checks: it scanned nothing", file=sys.stderr)
        return 1
    parsing_errors = sum(int(r.get("summary", {}).get("parsing_errors", 0)) for r in reports if isinstance(r, dict))
    resources = sum(int(r.get("summary", {}).get("resource_count", 0)) for r in reports if isinstance(r, dict))
    files = len(list(args.objects.glob("*.yaml"))) if args.objects else 0
    if parsing_errors or resources < files:
        print(
            f"error: checkov parsed {resources} resources of {files} files ({parsing_errors} parsing errors): some"
            " objects went unchecked",
            file=sys.stderr,
        )
        return 1
    accepted_count = len(findings) - len(new)
    print(
        f"{args.validator}: {passed} passed, {len(findings)} failed of which {accepted_count} accepted"
        f" ({ACCEPTED_FILE.name}), {len(new)} new"
    )
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
