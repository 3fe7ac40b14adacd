"""What the day-2 tests share: each configuration synthesized once (no cdk-nag), its templates planned against
another's, and a deployed state made of them."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from preflight.deployed import Deployed, DeployedNodegroup, DeployedStack
from preflight.redeploy import (
    Redeploy,
)
from preflight.template_plan import ResourceChange, plan
from settings import Settings
from stacks.application import build_stacks, new_app
from tests.conftest import SYNTHESIZED, settings_for

PARTS = ("network", "cluster", "system", "gpu", "serving")


def templates_of(settings: Settings) -> dict[str, dict[str, Any]]:
    """The templates of one synth of `settings`, by stack name (no cdk-nag: only the templates matter here)."""
    import json

    # Only the templates are kept: no asset is staged (the kubectl layer's ~57 MB would be copied into the
    # assembly and removed at once); the templates are the same either way (an asset's hash is its source's).
    with tempfile.TemporaryDirectory(prefix="day2-") as tmp:
        outdir = Path(tmp)
        app = new_app(str(outdir))
        app.node.set_context("aws:cdk:disable-asset-staging", True)
        build_stacks(app, settings)
        app.synth()
        return {
            name: json.loads((outdir / f"{name}.template.json").read_text()) for name in settings.stack_names.values()
        }


@cache
def _synth(items: frozenset[tuple[str, str]]) -> tuple[Settings, dict[str, dict[str, Any]]]:
    """One configuration's templates by part."""
    settings = settings_for(dict(items))
    # A session synth of the same settings (tests/conftest.py) has these templates already: cdk-nag only reports, and
    # staging the assets changes no template.
    made = [by_part for other, by_part in SYNTHESIZED if other == settings]
    if made:
        return settings, made[0]
    templates = templates_of(settings)
    return settings, {part: templates[name] for part, name in settings.stack_names.items()}


def synth(**env: str) -> tuple[Settings, dict[str, dict[str, Any]]]:
    return _synth(frozenset(env.items()))


def changes(
    part: str, after_env: Mapping[str, str], before_env: Mapping[str, str] | None = None
) -> list[ResourceChange]:
    return plan(synth(**(before_env or {}))[1][part], synth(**after_env)[1][part])


def deployed_as(
    env: Mapping[str, str] | None = None, *, gpu_desired: int = 2, cluster_version: str = "1.35"
) -> Deployed:
    settings, templates = synth(**(env or {}))
    stacks = {
        settings.stack_names[p]: DeployedStack(settings.stack_names[p], "UPDATE_COMPLETE", {}, templates[p])
        for p in PARTS
    }
    nodegroups = {
        settings.gpu_nodegroup_name: DeployedNodegroup(
            settings.gpu_nodegroup_name, cluster_version, gpu_desired, "ACTIVE"
        ),
        settings.system_nodegroup_name: DeployedNodegroup(settings.system_nodegroup_name, cluster_version, 1, "ACTIVE"),
    }
    return Deployed(stacks=stacks, cluster_version=cluster_version, nodegroups=nodegroups)


def redeploy_of(**env: str) -> Redeploy:
    settings, templates = synth(**env)
    return Redeploy.of(settings, {settings.stack_names[p]: templates[p] for p in PARTS})


def _only(found: list[ResourceChange], resource_type: str) -> ResourceChange:
    (change,) = [c for c in found if c.resource_type == resource_type]
    return change
