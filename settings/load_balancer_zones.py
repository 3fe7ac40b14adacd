"""The Route 53 hosted zone of each Region's Application Load Balancers: the `HostedZoneId` of an alias record
that points at one (SERVE_HOSTNAME with SERVE_HOSTED_ZONE_ID), kept once.

aws-cdk-lib's region facts (`aws_cdk.region_info`) have no such fact (only Elastic Beanstalk's and S3 websites'),
and the load balancer is the controller's, not a CloudFormation resource whose `CanonicalHostedZoneID` could be
read. Source: "Elastic Load Balancing endpoints and quotas", https://docs.aws.amazon.com/general/latest/gr/elb.html
(Application Load Balancers and Classic Load Balancers column; the same IDs as external-dns's
`canonicalHostedZones`, provider/aws/aws.go). A Region it does not list gets no record: the settings refuse it.
"""

from __future__ import annotations

from typing import Final

APPLICATION_LOAD_BALANCER_ZONES: Final[dict[str, str]] = {
    "af-south-1": "Z268VQBMOI5EKX",
    "ap-east-1": "Z3DQVH9N71FHZ0",
    "ap-northeast-1": "Z14GRHDCWA56QT",
    "ap-northeast-2": "ZWKZPGTI48KDX",
    "ap-northeast-3": "Z5LXEXXYW11ES",
    "ap-south-1": "ZP97RAFLXTNZK",
    "ap-south-2": "Z0173938T07WNTVAEPZN",
    "ap-southeast-1": "Z1LMS91P8CMLE5",
    "ap-southeast-2": "Z1GM3OXH4ZPM65",
    "ap-southeast-3": "Z08888821HLRG5A9ZRTER",
    "ap-southeast-4": "Z09517862IB2WZLPXG76F",
    "ap-southeast-5": "Z06010284QMVVW7WO5J",
    "ap-southeast-7": "Z0390008CMBRTHFGWBCB",
    "ca-central-1": "ZQSVJUPU6J1EY",
    "ca-west-1": "Z06473681N0SF6OS049SD",
    "eu-central-1": "Z215JYRZR1TBD5",
    "eu-central-2": "Z06391101F2ZOEP8P5EB3",
    "eu-north-1": "Z23TAZ6LKFMNIO",
    "eu-south-1": "Z3ULH7SSC9OV64",
    "eu-south-2": "Z0956581394HF5D5LXGAP",
    "eu-west-1": "Z32O12XQLNTSW2",
    "eu-west-2": "ZHURV8PSTC4K8",
    "eu-west-3": "Z3Q77PNBQS71R4",
    "il-central-1": "Z09170902867EHPV2DABU",
    "me-central-1": "Z08230872XQRWHG2XF6I",
    "me-south-1": "ZS929ML54UICD",
    "mx-central-1": "Z023552324OKD1BB28BH5",
    "sa-east-1": "Z2P70J7HTTTPLU",
    "us-east-1": "Z35SXDOTRQ7X7K",
    "us-east-2": "Z3AADJGX6KTTL2",
    "us-west-1": "Z368ELLRRE2KJ0",
    "us-west-2": "Z1H1FL5HABSF5",
}


def application_load_balancer_zone(region: str) -> str | None:
    """The hosted zone ID of `region`'s Application Load Balancers' DNS names, or None for a Region not listed."""
    return APPLICATION_LOAD_BALANCER_ZONES.get(region)
