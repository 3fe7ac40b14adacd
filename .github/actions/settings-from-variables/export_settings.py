"""Append `NAME=value` to $GITHUB_ENV for each repository variable (JSON in $VARIABLES) that names a setting
the workflows pass and is set. A value with a line break is refused: it would smuggle another variable into
the job's environment. Only the standard library: it runs before the project is installed."""

from __future__ import annotations

import json
import os
import sys

# The settings a repository variable may set: those with `ci_variable=True` in settings/specs*.py.
# generated:ci-variables (`make docs-tables`)
SETTINGS = (
    "CLUSTER_NAME",
    "REGION",
    "ENDPOINT_ACCESS",
    "PUBLIC_ACCESS_CIDRS",
    "ADMIN_PRINCIPAL_ARNS",
    "PARK_AT",
    "UNPARK_AT",
    "UNPARK_DAYS",
    "PARK_TIME_ZONE",
    "GPU_AZ",
    "SERVE_EXPOSURE",
    "SERVE_CERTIFICATE_ARN",
    "SERVE_HOSTNAME",
    "SERVE_HOSTED_ZONE_ID",
    "SERVE_ALLOWED_CIDRS",
    "SERVE_ACCESS_LOGS",
    "OBSERVABILITY",
    "HF_TOKEN_SECRET_NAME",
)
# /generated:ci-variables


def main() -> int:
    variables = json.loads(os.environ.get("VARIABLES") or "{}")
    lines = []
    for name in SETTINGS:
        value = str(variables.get(name) or "")
        if not value:
            continue
        if "\n" in value or "\r" in value:
            print(f"::error::repository variable {name} holds a line break")
            return 1
        lines.append(f"{name}={value}\n")
    with open(os.environ["GITHUB_ENV"], "a", encoding="utf-8") as env:
        env.writelines(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
