"""`make preflight`'s runner (preflight/registry.py declares the checks): every check of preflight/registry.py, in
order, each reported (passed, warned or failed with a one-sentence fix) and never raised, so the user sees a table and
never a traceback. Only read-only AWS calls are made.
"""

from __future__ import annotations

import sys

# boto3/botocore ship no type information: see preflight.context.
import boto3
from botocore.exceptions import BotoCoreError, ClientError

from preflight.account_checks import stack_status_usable
from preflight.context import CheckFunction, Context, PreflightInput, error_result, quota_code_of
from preflight.observability_checks import METRICS_COLLECTOR_REGIONS, SCRAPER_DEFAULT_QUOTA
from preflight.quota_checks import STANDARD_QUOTA_CODE
from preflight.registry import CHECKS
from preflight.results import CheckResult, fail
from settings.instance_types import G_QUOTA, P_QUOTA

G_QUOTA_CODE = G_QUOTA[0]
P_QUOTA_CODE = P_QUOTA[0]

__all__ = [
    "G_QUOTA_CODE",
    "METRICS_COLLECTOR_REGIONS",
    "P_QUOTA_CODE",
    "SCRAPER_DEFAULT_QUOTA",
    "STANDARD_QUOTA_CODE",
    "CheckResult",
    "PreflightInput",
    "format_table",
    "main",
    "quota_code_of",
    "run_checks",
    "stack_status_usable",
]


def _guarded(name: str, check: CheckFunction, ctx: Context) -> CheckResult:
    try:
        return check(ctx)
    except (ClientError, BotoCoreError) as err:
        return error_result(name, err)


def _skipped(names: list[str], detail: str, fix: str) -> list[CheckResult]:
    return [fail(name, detail, fix) for name in names]


def _without_credentials(credentials: CheckResult) -> list[CheckResult]:
    # Without an identity every AWS answer would be the same error: each other check is marked skipped for the
    # callers that want every row; main prints the cause alone.
    return [
        credentials,
        *_skipped([check.name for check in CHECKS[1:]], "skipped: no credentials", "fix the credentials check first"),
    ]


def run_checks(inp: PreflightInput, session: boto3.session.Session) -> list[CheckResult]:
    """Run every check in order; each is reported, passed or failed, never raised."""
    ctx = Context(inp, session)
    credentials_check, region_check, *others = CHECKS
    credentials = _guarded(credentials_check.name, credentials_check.run, ctx)
    if not credentials.ok:
        return _without_credentials(credentials)
    results = [credentials, _guarded(region_check.name, region_check.run, ctx)]
    if not ctx.region_usable:
        # A disabled or unknown Region answers every call with an auth or connection error.
        return results + _skipped(
            [c.name for c in others], f"skipped: region {inp.region} not usable", "fix the region check first"
        )
    results.extend(_guarded(check.name, check.run, ctx) for check in others)
    return results


def format_table(results: list[CheckResult]) -> str:
    """CHECK | RESULT | DETAIL, aligned, then one `fix:` line per failed check."""
    rows = [("CHECK", "RESULT", "DETAIL")] + [(r.name, r.verdict, r.detail) for r in results]
    name_width = max(len(row[0]) for row in rows)
    result_width = max(len(row[1]) for row in rows)
    lines = [f"{a:<{name_width}}  {b:<{result_width}}  {c}".rstrip() for a, b, c in rows]
    lines.insert(1, f"{'-' * name_width}  {'-' * result_width}  {'-' * 6}")
    fixes = [f"fix: {r.name}: {r.fix}" for r in results if not r.ok and r.fix] + [
        f"warning: {r.name}: {r.warning}" for r in results if r.warning
    ]
    if fixes:
        lines += ["", *fixes]
    return "\n".join(lines)


def main(inp: PreflightInput, session: boto3.session.Session | None = None) -> int:
    """Print the preflight table; 0 when every check passed, 1 otherwise. Without credentials: one line."""
    results: list[CheckResult]
    try:
        if session is None:
            session = boto3.session.Session(region_name=inp.region)
    except BotoCoreError as err:
        # e.g. AWS_PROFILE names a profile that does not exist: fails before any check can run.
        results = _without_credentials(error_result("credentials", err))
    else:
        results = run_checks(inp, session)
    credentials = results[0]
    if not credentials.ok:
        # Every other check would fail for the same cause: say it once.
        print(f"error: preflight: {credentials.detail}; {credentials.fix}", file=sys.stderr)
        return 1
    print(
        f"Preflight for cluster {inp.cluster_name} in {inp.region}: "
        f"{inp.gpu_node_count} x {inp.gpu_instance_type} in {inp.gpu_az}, "
        f"{inp.system_node_count} x {inp.system_instance_type}"
    )
    print(format_table(results))
    failed = sum(not r.ok for r in results)
    print("All checks passed." if not failed else f"{failed} of {len(results)} checks failed.")
    return 0 if not failed else 1
