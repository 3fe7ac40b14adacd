"""The OpenAI-compatible endpoint beyond the cluster (SERVE_EXPOSURE and its companions), parsed and checked together:
each value depends on the others (an exposed endpoint needs a certificate, an allow-list and API keys).

`cluster` (the default) keeps the endpoint inside the cluster; `internal` puts an Application Load Balancer with
private addresses only, `internet-facing` one with public addresses, both in the VPC's public /24 subnets (where no
node or pod has an address). Either way HTTPS only, unless `internal` says
SERVE_CERTIFICATE_ARN=none (plain HTTP inside the VPC, with a warning at synth): no API key crosses the internet
in clear text.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from settings.decode_rate import longest_response_s
from settings.errors import SettingError
from settings.load_balancer_zones import application_load_balancer_zone
from settings.parsers import csv, host_bits_hint

EXPOSURES: Final = ("cluster", "internal", "internet-facing")
NO_CERTIFICATE: Final = "none"

# Queueing and prefill before the first byte (a request waits behind a full batch).
QUEUE_MARGIN_S: Final = 60
# The ALB's limits: idle timeout 1-4000 s, deregistration delay 0-3600 s.
ALB_MAX_IDLE_TIMEOUT_S: Final = 4000
ALB_MAX_DEREGISTRATION_DELAY_S: Final = 3600
# The load balancer's access logs (SERVE_ACCESS_LOGS=on) expire after as long as the cluster's other logs
# (the control-plane and flow-log groups keep 30 days).
ACCESS_LOG_RETENTION_DAYS: Final = 30

_CERTIFICATE_ARN = re.compile(r"arn:(aws[a-z-]*):acm:([a-z0-9-]+):(\d{12}):certificate/[0-9a-f-]{36}")
_HOSTNAME = re.compile(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]")
_HOSTED_ZONE = re.compile(r"Z[A-Z0-9]{1,31}")


@dataclass(frozen=True)
class ServeEndpoint:
    """Where the Serve endpoint is reachable from, and how it is guarded."""

    exposure: str = "cluster"  # "cluster" | "internal" | "internet-facing"
    certificate_arn: str = ""  # "" with exposure cluster; "none": plain HTTP (internal only)
    hostname: str = ""
    hosted_zone_id: str = ""
    allowed_cidrs: tuple[str, ...] = ()  # the load balancer's security group sources
    api_keys: bool = False  # the Serve ingress requires a key (SERVE_API_KEYS)
    access_logs: bool = False  # the load balancer's access logs into a bucket of the serving stack (SERVE_ACCESS_LOGS)

    @property
    def exposed(self) -> bool:
        """A load balancer (and its controller) exists."""
        return self.exposure != "cluster"

    @property
    def https(self) -> bool:
        return self.exposed and self.certificate_arn != NO_CERTIFICATE

    @property
    def scheme(self) -> str:
        return self.exposure

    @property
    def port(self) -> int:
        return 443 if self.https else 80


def idle_timeout_s(max_model_len: int) -> int:
    """The load balancer's idle timeout: the longest response (settings/decode_rate.py; a non-streaming request
    waits for it in silence) plus the queueing margin, within the ALB's limit."""
    return min(ALB_MAX_IDLE_TIMEOUT_S, longest_response_s(max_model_len) + QUEUE_MARGIN_S)


def deregistration_delay_s(max_model_len: int) -> int:
    """How long a target leaving the load balancer keeps its open streams: as long as the longest response."""
    return min(ALB_MAX_DEREGISTRATION_DELAY_S, idle_timeout_s(max_model_len))


def _cidrs(raw: str) -> tuple[str, ...]:
    cidrs = []
    for part in csv(raw):
        try:
            cidrs.append(str(ipaddress.IPv4Network(part, strict=True)))
        except ValueError:
            raise SettingError(
                "SERVE_ALLOWED_CIDRS",
                raw,
                f"comma-separated IPv4 CIDRs such as 10.0.0.0/16 ({part!r} is not one{host_bits_hint(part)})",
            ) from None
    return tuple(cidrs)


def parse_endpoint(raw: Mapping[str, str], *, region: str, vpc_cidr: str) -> ServeEndpoint:
    exposure = raw["SERVE_EXPOSURE"].strip()
    if exposure not in EXPOSURES:
        raise SettingError("SERVE_EXPOSURE", raw["SERVE_EXPOSURE"], ", ".join(EXPOSURES[:-1]) + f" or {EXPOSURES[-1]}")
    certificate = raw["SERVE_CERTIFICATE_ARN"].strip()
    hostname = raw["SERVE_HOSTNAME"].strip().lower().rstrip(".")
    zone = raw["SERVE_HOSTED_ZONE_ID"].strip()
    cidrs = _cidrs(raw["SERVE_ALLOWED_CIDRS"])
    keys_raw = raw["SERVE_API_KEYS"].strip()
    if keys_raw not in ("", "on", "off"):
        raise SettingError(
            "SERVE_API_KEYS", raw["SERVE_API_KEYS"], "on, off, or empty (on whenever SERVE_EXPOSURE leaves the cluster)"
        )
    api_keys = keys_raw == "on" or (keys_raw == "" and exposure != "cluster")
    logs_raw = raw["SERVE_ACCESS_LOGS"].strip()
    if logs_raw not in ("on", "off"):
        raise SettingError("SERVE_ACCESS_LOGS", raw["SERVE_ACCESS_LOGS"], "on or off")
    access_logs = logs_raw == "on"

    if exposure == "cluster":
        if access_logs:
            raise SettingError(
                "SERVE_ACCESS_LOGS", logs_raw, "off while SERVE_EXPOSURE=cluster (no load balancer to log)"
            )
        for env, value in (
            ("SERVE_CERTIFICATE_ARN", certificate),
            ("SERVE_HOSTNAME", hostname),
            ("SERVE_HOSTED_ZONE_ID", zone),
        ):
            if value:
                raise SettingError(env, value, "empty while SERVE_EXPOSURE=cluster (no load balancer to put it on)")
        if cidrs:
            raise SettingError(
                "SERVE_ALLOWED_CIDRS",
                raw["SERVE_ALLOWED_CIDRS"],
                "empty while SERVE_EXPOSURE=cluster (SERVE_CLIENT_NAMESPACES says who may call)",
            )
        return ServeEndpoint(api_keys=api_keys)

    if keys_raw == "off":
        raise SettingError(
            "SERVE_API_KEYS",
            keys_raw,
            f"on (or empty) while SERVE_EXPOSURE={exposure}: an endpoint beyond the cluster takes keys",
        )
    if not certificate:
        plain = " or none (plain HTTP inside the VPC)" if exposure == "internal" else ""
        raise SettingError(
            "SERVE_CERTIFICATE_ARN",
            certificate,
            f"an ACM certificate ARN in {region}{plain} while SERVE_EXPOSURE={exposure}",
        )
    if certificate == NO_CERTIFICATE:
        if exposure != "internal":
            raise SettingError(
                "SERVE_CERTIFICATE_ARN",
                certificate,
                f"an ACM certificate ARN in {region} while SERVE_EXPOSURE=internet-facing (keys never cross the"
                " internet in clear text)",
            )
    else:
        match = _CERTIFICATE_ARN.fullmatch(certificate)
        if not match:
            raise SettingError(
                "SERVE_CERTIFICATE_ARN",
                certificate,
                f"an ACM certificate ARN, arn:aws:acm:{region}:ACCOUNT:certificate/ID",
            )
        if match[2] != region:
            raise SettingError(
                "SERVE_CERTIFICATE_ARN",
                certificate,
                f"a certificate in REGION={region} (a load balancer takes certificates of its own Region only)",
            )
    if hostname and not _HOSTNAME.fullmatch(hostname):
        raise SettingError(
            "SERVE_HOSTNAME", raw["SERVE_HOSTNAME"], "empty or a fully qualified domain name such as llm.example.com"
        )
    if zone and not _HOSTED_ZONE.fullmatch(zone):
        raise SettingError(
            "SERVE_HOSTED_ZONE_ID", zone, "empty or a Route 53 hosted zone ID such as Z0123456789ABCDEFGHIJ"
        )
    if zone and not hostname:
        raise SettingError("SERVE_HOSTED_ZONE_ID", zone, "empty unless SERVE_HOSTNAME names the record to create in it")
    if zone and application_load_balancer_zone(region) is None:
        raise SettingError(
            "SERVE_HOSTED_ZONE_ID",
            zone,
            f"empty in REGION={region}: settings/load_balancer_zones.py lists no load balancer hosted zone for it "
            "(the alias record needs one; add its row from AWS's Elastic Load Balancing endpoints page)",
        )
    if not cidrs:
        if exposure == "internet-facing":
            raise SettingError(
                "SERVE_ALLOWED_CIDRS",
                "",
                "the CIDRs that may reach an internet-facing endpoint (an allow-list is required; 0.0.0.0/0 only if you"
                " mean it)",
            )
        cidrs = (vpc_cidr,)
    return ServeEndpoint(
        exposure=exposure,
        certificate_arn=certificate,
        hostname=hostname,
        hosted_zone_id=zone,
        allowed_cidrs=cidrs,
        api_keys=api_keys,
        access_logs=access_logs,
    )
