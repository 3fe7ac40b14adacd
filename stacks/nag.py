"""cdk-nag acknowledgements, each made at the resource it concerns with the reason it is deliberate."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str, *, applies_to: list[str] | None = None) -> None:
    """Acknowledge a cdk-nag finding on ``scope`` and everything below it.

    ``applies_to`` narrows an IAM4/IAM5 acknowledgement to the listed findings (e.g. one managed policy).
    """
    if applies_to:
        for finding in applies_to:
            Validations.of(scope).acknowledge(Acknowledgment(id=f"{rule_id}[{finding}]", reason=reason))
    else:
        Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))
