"""The preflight's endpoint checks (preflight/endpoint_checks.py) against moto's ACM and Route 53: the certificate
exists in REGION, is ISSUED and covers SERVE_HOSTNAME; the hosted zone exists and holds the name."""

from __future__ import annotations

import datetime

import boto3  # type: ignore[import-untyped]
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from preflight.endpoint_checks import check_certificate, check_hosted_zone
from preflight.results import CheckResult
from tests import preflight_fakes
from tests.preflight_fakes import REGION

aws = preflight_fakes.aws  # fake credentials, everything served by moto


def _status(result: CheckResult) -> str:
    return "fail" if not result.ok else "warn" if result.warning else "ok"


def _imported_certificate(*names: str) -> str:
    """An ISSUED certificate (ACM marks an imported one ISSUED), self-signed for the names."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    arn: str = boto3.client("acm", region_name=REGION).import_certificate(Certificate=pem, PrivateKey=private)[
        "CertificateArn"
    ]
    return arn


def _acm() -> object:
    return boto3.client("acm", region_name=REGION)


def test_an_issued_certificate_covering_the_host_name_passes(aws: None) -> None:
    arn = _imported_certificate("*.example.com", "example.com")
    result = check_certificate(_acm(), certificate_arn=arn, hostname="llm.example.com", region=REGION)
    assert (_status(result), result.detail) == ("ok", "ISSUED, covers llm.example.com")


@pytest.mark.parametrize(
    ("hostname", "passes"),
    [("llm.example.com", True), ("example.com", True), ("a.llm.example.com", False), ("llm.example.org", False)],
)
def test_a_wildcard_covers_one_label(aws: None, hostname: str, passes: bool) -> None:
    arn = _imported_certificate("*.example.com", "example.com")
    result = check_certificate(_acm(), certificate_arn=arn, hostname=hostname, region=REGION)
    assert (_status(result) == "ok") is passes
    if not passes:
        assert f"not SERVE_HOSTNAME={hostname}" in result.detail


def test_a_certificate_pending_validation_fails(aws: None) -> None:
    arn = boto3.client("acm", region_name=REGION).request_certificate(DomainName="llm.example.com")["CertificateArn"]
    result = check_certificate(_acm(), certificate_arn=arn, hostname="llm.example.com", region=REGION)
    assert _status(result) == "fail" and "PENDING_VALIDATION, not ISSUED" in result.detail


def test_a_missing_or_foreign_certificate_fails(aws: None) -> None:
    missing = f"arn:aws:acm:{REGION}:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
    result = check_certificate(_acm(), certificate_arn=missing, hostname="", region=REGION)
    assert _status(result) == "fail" and result.detail.startswith("no certificate")
    foreign = missing.replace(REGION, "us-east-1")
    result = check_certificate(_acm(), certificate_arn=foreign, hostname="", region=REGION)
    assert _status(result) == "fail" and "another Region" in result.detail


def test_without_a_host_name_the_certificate_is_warned_about(aws: None) -> None:
    arn = _imported_certificate("llm.example.com")
    assert _status(check_certificate(_acm(), certificate_arn=arn, hostname="", region=REGION)) == "warn"
    assert _status(check_certificate(_acm(), certificate_arn="none", hostname="", region=REGION)) == "ok"


def test_the_hosted_zone_must_exist_and_hold_the_name(aws: None) -> None:
    route53 = boto3.client("route53", region_name="us-east-1")
    zone = route53.create_hosted_zone(Name="example.com", CallerReference="test")["HostedZone"]["Id"].split("/")[-1]
    assert (
        _status(check_hosted_zone(route53, hosted_zone_id=zone, hostname="llm.example.com", exposure="internal"))
        == "ok"
    )
    outside = check_hosted_zone(route53, hosted_zone_id=zone, hostname="llm.example.org", exposure="internal")
    assert _status(outside) == "fail" and "not in the zone example.com" in outside.detail
    missing = check_hosted_zone(
        route53, hosted_zone_id="Z0123456789ABCDEFGHIJ", hostname="llm.example.com", exposure="internal"
    )
    assert _status(missing) == "fail" and missing.detail.startswith("no hosted zone")
    private = route53.create_hosted_zone(
        Name="internal.example",
        CallerReference="private",
        HostedZoneConfig={"PrivateZone": True},
        VPC={"VPCRegion": REGION, "VPCId": "vpc-12345678"},
    )["HostedZone"]["Id"].split("/")[-1]
    assert (
        _status(
            check_hosted_zone(
                route53, hosted_zone_id=private, hostname="llm.internal.example", exposure="internet-facing"
            )
        )
        == "warn"
    )


@pytest.mark.parametrize(
    ("hostname", "passes"),
    [
        ("example.com", True),  # the apex: an alias record can be there, a CNAME could not
        ("llm.example.com", True),
        ("a.b.example.com", True),
        ("llm.notexample.com", False),  # ends with the zone's name, but is not in it
        ("example.com.evil.org", False),
        ("com", False),
    ],
)
def test_the_host_name_must_lie_in_the_zone_the_apex_included(aws: None, hostname: str, passes: bool) -> None:
    route53 = boto3.client("route53", region_name="us-east-1")
    zone = route53.create_hosted_zone(Name="Example.COM.", CallerReference=hostname)["HostedZone"]["Id"].split("/")[-1]
    result = check_hosted_zone(route53, hosted_zone_id=zone, hostname=hostname, exposure="internet-facing")
    assert (_status(result) == "ok") is passes, result.detail
    if not passes:
        assert _status(result) == "fail" and "\n" not in result.detail + result.fix
        assert result.detail == f"SERVE_HOSTNAME={hostname} is not in the zone example.com"
