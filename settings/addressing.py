"""How the VPC's addresses are laid out, in one place: the network stack's subnets, and the small subnets
of the managed metrics collector (OBSERVABILITY=on) that the serving namespace's NetworkPolicy names.

CDK allocates the VPC's subnet groups in order from the start of VPC_CIDR, each subnet aligned to its own
size: the public /24s first (one per AZ), then the private /19s from the first /19 boundary after them.
The space between the last public /24 and that boundary is never used by the network stack; the
collector's /28s are taken from its end. Nodes and pods live only in the private subnets, so an address
block of the collector's subnets names the collector and nothing else.
"""

from __future__ import annotations

import ipaddress
from typing import Final

PUBLIC_SUBNET_MASK: Final = 24
PRIVATE_SUBNET_MASK: Final = 19
COLLECTOR_SUBNET_MASK: Final = 28


def collector_subnet_cidrs(vpc_cidr: str, az_count: int) -> tuple[str, ...]:
    """One /28 per AZ, in the gap between the public subnets and the first private subnet, counted down
    from that subnet by AZ index: an AZ added later leaves the others' blocks (and subnets) as they are."""
    vpc = ipaddress.ip_network(vpc_cidr)
    public_end = int(vpc.network_address) + az_count * 2 ** (32 - PUBLIC_SUBNET_MASK)
    private_size = 2 ** (32 - PRIVATE_SUBNET_MASK)
    first_private = -(-public_end // private_size) * private_size  # the next /19 boundary
    size = 2 ** (32 - COLLECTOR_SUBNET_MASK)
    if first_private - az_count * size < public_end:
        raise ValueError(
            f"no room for {az_count} /{COLLECTOR_SUBNET_MASK} between the public and private subnets of {vpc_cidr}"
        )
    return tuple(
        str(ipaddress.ip_network((first_private - (i + 1) * size, COLLECTOR_SUBNET_MASK))) for i in range(az_count)
    )


def public_subnet_cidrs(vpc_cidr: str, az_count: int) -> tuple[str, ...]:
    """The public /24s, one per AZ in the VPC's order, as CDK allocates them (tests/test_endpoint.py compares with the
    network stack): only the NAT gateway and the Serve endpoint's load balancer have addresses there."""
    vpc = ipaddress.ip_network(vpc_cidr)
    size = 2 ** (32 - PUBLIC_SUBNET_MASK)
    return tuple(
        str(ipaddress.ip_network((int(vpc.network_address) + i * size, PUBLIC_SUBNET_MASK))) for i in range(az_count)
    )
