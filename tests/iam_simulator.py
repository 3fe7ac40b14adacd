"""IAM decisions from a real evaluator (@cloud-copilot/iam-simulate, pinned in package.json, run by node):
what a synthesized policy allows and denies, conditions included, instead of a grep of its text."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("iam_simulator.mjs")
ACCOUNT = "123456789012"
PRINCIPAL = f"arn:aws:iam::{ACCOUNT}:role/worker"


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)
    principal: str = PRINCIPAL
    resource_account: str = ACCOUNT


def decisions(
    requests: Sequence[Request],
    *,
    identity_policy: Mapping[str, Any] | None = None,
    resource_policy: Mapping[str, Any] | None = None,
) -> list[str]:
    payload = {
        "identityPolicy": identity_policy,
        "resourcePolicy": resource_policy,
        "requests": [
            {
                "action": r.action,
                "resource": r.resource,
                "context": dict(r.context),
                "principal": r.principal,
                "resourceAccount": r.resource_account,
            }
            for r in requests
        ],
    }
    done = subprocess.run(
        ["node", str(SCRIPT)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=120,
    )
    result: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
