"""Where EKS serves its add-on images in each Region: the ECR registry account, kept once.

EKS replicates the images of its add-ons (and the EFA device plugin, `eks/aws-efa-k8s-device-plugin`) to a
registry in every Region it supports. Most Regions use account 602401143452; the opt-in Regions (and a few
newer ones) have accounts of their own. Pulling from the deploy Region keeps an organization policy that
denies other Regions from failing the image pull (the EFA chart's default is us-west-2's registry).

Source: "View Amazon container image registries for Amazon EKS add-ons",
https://docs.aws.amazon.com/eks/latest/userguide/add-ons-images.html (read 2026-12-01; the same accounts as
eksctl's `EKSResourceAccountID()`, which also fills the EFA plugin's image from them). ap-east-2's row prints
an ap-east-1 host there; the account is ap-east-2's own.
"""

from __future__ import annotations

from typing import Final

DEFAULT_ACCOUNT: Final = "602401143452"

# Every Region of the commercial partition (botocore's endpoint data) not served by DEFAULT_ACCOUNT.
OTHER_ACCOUNTS: Final[dict[str, str]] = {
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-east-2": "533267051163",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "mx-central-1": "730335286997",
}

DEFAULT_ACCOUNT_REGIONS: Final = frozenset(
    {
        *("us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "sa-east-1"),
        *("eu-central-1", "eu-west-1", "eu-west-2", "eu-west-3", "eu-north-1"),
        *("ap-south-1", "ap-northeast-1", "ap-northeast-2", "ap-northeast-3", "ap-southeast-1", "ap-southeast-2"),
    }
)


def eks_addon_registry(region: str) -> str | None:
    """The EKS add-on image registry of `region`, or None for a Region the table does not know."""
    account = OTHER_ACCOUNTS.get(region) or (DEFAULT_ACCOUNT if region in DEFAULT_ACCOUNT_REGIONS else None)
    return f"{account}.dkr.ecr.{region}.amazonaws.com" if account else None
