"""OBSERVABILITY=on: the metrics destination, and the observability stack left deployed when it is off."""

from __future__ import annotations

from botocore.exceptions import ClientError

from preflight.context import ACCESS_DENIED_CODES, TRANSIENT_CODES, Context
from preflight.deployed import existing_stacks
from preflight.results import CheckResult, fail, ok, warn

# Amazon Managed Service for Prometheus collectors per account and Region, unless raised.
SCRAPER_DEFAULT_QUOTA = 10
# Where AWS documents CloudWatch's OpenTelemetry metrics (OTLP, PromQL) and managed Prometheus collectors
# writing to them: the CloudWatch user guide's PromQL Region table, less Asia Pacific (New Zealand) for the
# collectors (What's New, 2026-07-31). Read in 2026-11: a Region outside it is warned about, not refused.
METRICS_COLLECTOR_REGIONS = frozenset(
    {
        *(
            "us-east-1",
            "us-east-2",
            "us-west-1",
            "us-west-2",
            "ca-central-1",
            "ca-west-1",
            "mx-central-1",
            "sa-east-1",
            "af-south-1",
        ),
        *(
            "eu-west-1",
            "eu-west-2",
            "eu-west-3",
            "eu-central-1",
            "eu-central-2",
            "eu-north-1",
            "eu-south-1",
            "eu-south-2",
        ),
        *("ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-south-1", "ap-south-2", "ap-east-1", "ap-east-2"),
        *("ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-southeast-4", "ap-southeast-5", "ap-southeast-7"),
    }
)


def check_metrics_destination(ctx: Context) -> CheckResult:
    """OBSERVABILITY=on writes the Ray metrics, through a managed collector, into CloudWatch's
    OpenTelemetry metrics store (the account's `default` dataset), which PromQL reads: both must be
    offered in the Region, or the observability stack fails after the cluster is up."""
    name, inp = "metrics-destination", ctx.inp
    if not inp.observability:
        return ok(name, "OBSERVABILITY=off: nothing to check")
    try:
        ctx.client("cloudwatch").get_dataset(DatasetIdentifier="default")
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", ""))
        if code in ACCESS_DENIED_CODES:
            raise
        if code in TRANSIENT_CODES or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) >= 500:
            return warn(
                name,
                f"CloudWatch answered {code} for the default dataset in {inp.region}",
                "not checked: run the preflight again",
            )
        return fail(
            name,
            f"CloudWatch's OpenTelemetry metrics (PromQL) answer {code or 'an error'} in {inp.region}",
            "set OBSERVABILITY=off, or deploy in a Region that offers CloudWatch OpenTelemetry metrics",
        )
    scrapers, token = [], None
    while True:
        page = ctx.client("amp").list_scrapers(**({"nextToken": token} if token else {}))
        scrapers += [s for s in page.get("scrapers", []) if s.get("status", {}).get("statusCode") != "DELETING"]
        token = page.get("nextToken")
        if not token:
            break
    others = [s for s in scrapers if s.get("alias") != inp.metrics_collector_alias]
    detail = f"dataset default ready; {len(others)} other metrics collector(s) in {inp.region}"
    if len(others) >= SCRAPER_DEFAULT_QUOTA:
        return warn(
            name,
            detail,
            f"the default quota is {SCRAPER_DEFAULT_QUOTA} collectors per Region: unless it was raised, the"
            " observability stack will fail",
        )
    if inp.region not in METRICS_COLLECTOR_REGIONS:
        return warn(
            name,
            detail,
            f"{inp.region} is not among the Regions AWS documented (2026-11) for managed Prometheus collectors writing"
            " to CloudWatch: if the observability stack fails on its collector, set OBSERVABILITY=off",
        )
    return ok(name, detail)


def check_stacks_left_out(ctx: Context) -> CheckResult:
    """A deploy never deletes a stack its app leaves out. The observability stack left deployed would keep
    its collector running and billing, while this deploy takes the collector's NetworkPolicy rule away:
    it would scrape nothing, and the NIXL alarm would read OK. Refused: remove it first."""
    name = "stacks-left-out"
    found = existing_stacks(ctx.client, ctx.inp.stacks_left_out)
    if not found:
        return ok(name, "none deployed" if ctx.inp.stacks_left_out else "this configuration contains every stack")
    return fail(
        name,
        f"{', '.join(found)} deployed but not in this configuration (OBSERVABILITY=off): its collector would run on,"
        " scraping nothing",
        f"OBSERVABILITY=on make destroy STACKS={found[0]} first (or keep OBSERVABILITY=on)",
    )
