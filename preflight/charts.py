"""Every pinned Helm chart version must be in its repository's index before anything is deployed: a
missing one fails the GPU or serving stack after the GPUs have launched."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable

import yaml

from preflight.results import CheckResult, fail, ok
from settings.versions import HelmChartPin

TIMEOUT_SECONDS = 20


def _index_url(repository: str) -> str:
    return repository.rstrip("/") + "/index.yaml"


def missing_charts(pins: Iterable[HelmChartPin], timeout: float = TIMEOUT_SECONDS) -> tuple[list[str], list[str]]:
    """(found, problems): one 'chart version' per pin found, one sentence per pin that is not."""
    found: list[str] = []
    problems: list[str] = []
    indexes: dict[str, dict[str, object] | str] = {}
    for pin in pins:
        url = _index_url(pin.repository)
        if url not in indexes:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    indexes[url] = yaml.safe_load(response.read()) or {}
            except (urllib.error.URLError, TimeoutError, OSError, yaml.YAMLError) as err:
                indexes[url] = f"cannot read {url}: {getattr(err, 'reason', err)}"
        index = indexes[url]
        if isinstance(index, str):
            problems.append(index)
            continue
        entries = index.get("entries", {}) if isinstance(index, dict) else {}
        versions = (
            {str(e.get("version")) for e in entries.get(pin.chart) or [] if isinstance(e, dict)}
            if isinstance(entries, dict)
            else set()
        )
        if pin.version in versions:
            found.append(f"{pin.chart} {pin.version}")
        elif versions:
            newest = sorted(versions, key=_version_key)[-3:]
            problems.append(f"{pin.chart} {pin.version} is not in {url} (its newest: {', '.join(newest)})")
        else:
            problems.append(f"{url} has no chart {pin.chart}")
    return found, problems


def _version_key(version: str) -> tuple[int, ...]:
    digits = [int(part) if part.isdigit() else 0 for part in version.lstrip("v").split("-")[0].split(".")]
    return tuple(digits)


def check_helm_charts(pins: tuple[HelmChartPin, ...], timeout: float = TIMEOUT_SECONDS) -> CheckResult:
    name = "helm-charts"
    if not pins:
        return ok(name, "no Helm chart to install")
    found, problems = missing_charts(pins, timeout)
    if problems:
        return fail(
            name,
            "; ".join(problems),
            "pin a version that the repository lists in settings/versions.py (or wait until the repository answers)",
        )
    return ok(name, f"in their repositories: {', '.join(found)}")
