"""What a configuration costs an hour, running and parked, from one dated table of AWS list prices
(settings/data/list_prices.json): the GPU and system nodes, the EKS control plane, the NAT gateway and the endpoint's
load balancer. Data transfer, storage, CloudWatch and the GCS store are not counted; a Region or type the table lacks
is said, never guessed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from settings.configuration import Settings

PRICES_FILE = Path(__file__).parent / "data" / "list_prices.json"


@cache
def _table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(PRICES_FILE.read_text())
    return table


@dataclass(frozen=True)
class HourlyCost:
    region: str  # the Region whose list prices these are (the configuration's, or US East's where it lacks one)
    read: str
    running: float  # the GPU nodes the replicas need
    running_max: float  # with autoscaling: every phase at its maximum
    parked: float  # GPU_NODE_COUNT=0
    missing: tuple[str, ...]  # priced items the table lacks (not counted)

    @property
    def own_region(self) -> bool:
        return self.region != ""


def hourly_cost(settings: Settings) -> HourlyCost:
    table = _table()
    region = table["same_as"].get(settings.region, settings.region)
    prices: dict[str, float] = table["regions"].get(region, {})
    priced_region = settings.region if prices else ""
    if not prices:
        prices = table["regions"]["us-east-1"]
    missing = []

    def price(item: str) -> float:
        if item not in prices:
            missing.append(item)
            return 0.0
        return prices[item]

    base = (
        price("eks-cluster")
        + price("nat-gateway")
        + settings.system_node_count * price(settings.system_node.name)
        + (price("load-balancer") if settings.serve_endpoint.exposed else 0.0)
    )
    gpu = price(settings.gpu_node.name)
    nodes = settings.gpu_nodes_needed
    return HourlyCost(
        region=priced_region,
        read=table["read"],
        running=base + nodes * gpu,
        running_max=base + max(nodes, settings.prefill_max_nodes + settings.decode_max_nodes) * gpu,
        parked=base,
        missing=tuple(dict.fromkeys(missing)),
    )
