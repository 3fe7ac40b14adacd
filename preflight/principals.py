"""ADMIN_PRINCIPAL_ARNS against IAM: each ARN must name an existing role or user that has no access entry yet.

EKS creates an access entry per principal and refuses one for a principal that does not exist or already
has one. The cluster creator — the CDK bootstrap's CloudFormation execution role — gets its entry from EKS
itself. Any of these mistakes fails the cluster stack about 12 minutes in and rolls the control plane back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from preflight.results import CheckResult, fail, ok, warn

NAME = "admin-principals"


def _kind_and_name(arn: str) -> tuple[str, str, str]:
    """(account, "role" | "user", name without path) of an IAM role or user ARN."""
    _, _, _, _, account, resource = arn.split(":", 5)
    kind, _, path_and_name = resource.partition("/")
    return account, kind, path_and_name.rsplit("/", 1)[-1]


def check_admin_principals(iam: Any, *, arns: Sequence[str], account: str, execution_role_arn: str) -> CheckResult:
    """GetRole / GetUser for each ARN of this account; the execution role (the creator) is refused."""
    if not arns:
        return ok(NAME, "none listed (only the CloudFormation execution role and the kubectl provider will be admins)")
    unchecked: list[str] = []
    for arn in arns:
        principal_account, kind, name = _kind_and_name(arn)
        if arn == execution_role_arn or (
            kind == "role" and execution_role_arn.endswith(f":role/{name}") and principal_account == account
        ):
            return fail(
                NAME,
                f"{arn} is the CDK bootstrap's CloudFormation execution role, which creates the cluster and already"
                " gets its access entry",
                "remove it from ADMIN_PRINCIPAL_ARNS (a second access entry for it fails the cluster stack)",
            )
        if principal_account != account:
            unchecked.append(arn)  # another account's principals are not ours to read
            continue
        try:
            found = iam.get_role(RoleName=name)["Role"] if kind == "role" else iam.get_user(UserName=name)["User"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise
            return fail(
                NAME,
                f"{arn}: no such IAM {kind} in account {account} (a typo, or deleted): EKS refuses its access entry ~12"
                " minutes into the cluster stack",
                f"correct or remove it in ADMIN_PRINCIPAL_ARNS (`aws iam get-{kind} --{kind}-name {name}`)",
            )
        if str(found["Arn"]) != arn:
            return fail(
                NAME,
                f"{arn}: IAM has this {kind} as {found['Arn']}",
                "use the ARN exactly as IAM reports it, path included",
            )
    detail = f"{len(arns) - len(unchecked)} principal(s) exist in account {account}"
    if unchecked:
        return warn(NAME, detail, f"not checked, in another account: {', '.join(unchecked)} (they must exist there)")
    return ok(NAME, detail)
