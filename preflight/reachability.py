"""Where the Kubernetes API can be reached from, and whether this machine is such a place.

A deploy itself never needs to reach the API from here (the kubectl provider runs in the VPC), but
`make kubeconfig`, `wait-ready`, `verify` and the teardown's first step do. With ENDPOINT_ACCESS=private a
GitHub-hosted runner (or a laptop outside the VPC) cannot: the CI deploy would fail after a good deploy,
and the destroy workflow could not delete what Kubernetes made in AWS. GitHub sets RUNNER_ENVIRONMENT to
`github-hosted` or `self-hosted` on every runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from preflight.results import CheckResult, fail, ok, warn

NAME = "api-endpoint"
RUNNER_FIX = (
    "run the workflows on a self-hosted runner in the VPC or a network routed to it (repository variable"
    " CLUSTER_RUNNER; see docs/ci.md), or use ENDPOINT_ACCESS=public-and-private with PUBLIC_ACCESS_CIDRS"
)


def hosted_runner_cannot_reach(endpoint_access: str, environ: Mapping[str, str]) -> str:
    """Why this machine cannot reach a private-only API ("" when it may)."""
    if endpoint_access == "private" and environ.get("RUNNER_ENVIRONMENT") == "github-hosted":
        return (
            "ENDPOINT_ACCESS=private and this is a GitHub-hosted runner, which is outside the VPC: it cannot reach the"
            " Kubernetes API"
        )
    return ""


def check_api_endpoint(
    endpoint_access: str, public_access_cidrs: Sequence[str], environ: Mapping[str, str]
) -> CheckResult:
    """A public endpoint open to the whole internet is allowed (hosted CI runners have no fixed address),
    but it is a choice to make knowingly; a private one must be reachable from where the tools run."""
    if endpoint_access == "private":
        unreachable = hosted_runner_cannot_reach(endpoint_access, environ)
        if unreachable:
            return fail(
                NAME,
                f"{unreachable}: make kubeconfig, wait-ready, verify and the teardown would fail after the deploy",
                RUNNER_FIX,
            )
        return warn(
            NAME,
            "private only: reachable from inside the VPC",
            "make kubeconfig, wait-ready, verify, status and destroy must run inside the VPC (or a network routed to"
            " it), not from a laptop or a GitHub-hosted runner",
        )
    if public_access_cidrs:
        return ok(NAME, f"{endpoint_access}, public side limited to {', '.join(public_access_cidrs)}")
    return warn(
        NAME,
        f"{endpoint_access}, public side open to 0.0.0.0/0 (IAM authentication still applies)",
        "set PUBLIC_ACCESS_CIDRS to your networks (and your CI runners' egress), or ENDPOINT_ACCESS=private with a"
        " runner in the VPC",
    )
