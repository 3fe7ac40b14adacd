"""The preflight's look at the endpoint beyond the cluster (SERVE_EXPOSURE internal or internet-facing): the load
balancer's certificate and the hosted zone of its DNS name, read before any stack changes. The load balancer
controller would otherwise fail its reconcile minutes after the deploy (an Ingress event nobody reads), and the
endpoint would never come up."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from preflight.results import CheckResult, fail, ok, warn

CERTIFICATE = "endpoint-certificate"
HOSTED_ZONE = "endpoint-hosted-zone"


def _covers(pattern: str, hostname: str) -> bool:
    """Whether a certificate name (possibly *.example.com, one label deep) covers the host name."""
    pattern, hostname = pattern.lower().rstrip("."), hostname.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = hostname.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == hostname


def check_certificate(acm: Any, *, certificate_arn: str, hostname: str, region: str) -> CheckResult:
    if not certificate_arn or certificate_arn == "none":
        return ok(CERTIFICATE, "no certificate (SERVE_EXPOSURE=cluster, or plain HTTP inside the VPC)")
    if certificate_arn.split(":")[3] != region:
        return fail(
            CERTIFICATE,
            f"{certificate_arn} is in another Region than {region}",
            "request or import the certificate in REGION",
        )
    try:
        certificate = acm.describe_certificate(CertificateArn=certificate_arn)["Certificate"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return fail(
                CERTIFICATE,
                f"no certificate {certificate_arn} in {region}",
                "set SERVE_CERTIFICATE_ARN to a certificate of this account and Region",
            )
        raise
    except BotoCoreError as error:
        return warn(CERTIFICATE, "not checked", f"ACM did not answer: {error}")
    status = str(certificate.get("Status", ""))
    if status != "ISSUED":
        return fail(
            CERTIFICATE,
            f"{certificate_arn} is {status}, not ISSUED",
            "complete its validation (DNS record) or import a valid certificate",
        )
    names = [str(certificate.get("DomainName", "")), *(str(n) for n in certificate.get("SubjectAlternativeNames", []))]
    if hostname and not any(_covers(name, hostname) for name in names):
        return fail(
            CERTIFICATE,
            f"{certificate_arn} covers {', '.join(sorted(set(names)))}, not SERVE_HOSTNAME={hostname}",
            "use a certificate for the host name (or a wildcard of its parent), or change SERVE_HOSTNAME",
        )
    if not hostname:
        return warn(
            CERTIFICATE,
            f"ISSUED for {', '.join(sorted(set(names)))}",
            "no SERVE_HOSTNAME: clients reach the load balancer's own DNS name, which the certificate does not cover"
            " (TLS verification fails)",
        )
    return ok(CERTIFICATE, f"ISSUED, covers {hostname}")


def check_hosted_zone(route53: Any, *, hosted_zone_id: str, hostname: str, exposure: str) -> CheckResult:
    if not hosted_zone_id:
        return ok(HOSTED_ZONE, "no SERVE_HOSTED_ZONE_ID: no DNS record to create")
    try:
        zone = route53.get_hosted_zone(Id=hosted_zone_id)["HostedZone"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "NoSuchHostedZone":
            return fail(
                HOSTED_ZONE,
                f"no hosted zone {hosted_zone_id}",
                "set SERVE_HOSTED_ZONE_ID to a Route 53 hosted zone of this account",
            )
        raise
    except BotoCoreError as error:
        return warn(HOSTED_ZONE, "not checked", f"Route 53 did not answer: {error}")
    name = str(zone.get("Name", "")).rstrip(".").lower()
    if not (hostname == name or hostname.endswith("." + name)):
        return fail(
            HOSTED_ZONE,
            f"SERVE_HOSTNAME={hostname} is not in the zone {name}",
            "set SERVE_HOSTNAME to a name in the zone, or the zone of the name",
        )
    private = bool(zone.get("Config", {}).get("PrivateZone"))
    if private and exposure == "internet-facing":
        return warn(
            HOSTED_ZONE,
            f"{name} is a private zone",
            "clients on the internet will not resolve SERVE_HOSTNAME: use a public zone",
        )
    return ok(HOSTED_ZONE, f"{hostname} in {'private' if private else 'public'} zone {name}")
