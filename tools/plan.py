"""`make plan`, and the end of `make synth`: what these settings deploy, in a few lines a person reads before a
30-minute deploy: where, which nodes and GPUs each phase uses, the model and the name clients send, the endpoint
and its auth, what it costs an hour running and parked, and the next command."""

from __future__ import annotations

import os
import sys

from settings import Settings, load_settings
from settings.context_files import read_project_context
from settings.list_prices import hourly_cost
from settings.parsers import WEEKDAYS
from tools.entry import one_line_errors, project_settings

SERVE_PORT = 8000  # Ray Serve's HTTP port (k8s_constructs.ray_facts.SERVE_PORT, which imports cdk8s)


def _phase(settings: Settings, name: str, replicas: int, nodes: int, maximum: int | None) -> str:
    node = settings.gpu_node
    used = replicas * settings.tensor_parallel_size
    grown = f", up to {maximum} with autoscaling" if maximum is not None else ""
    idle = f" ({nodes * node.gpus - used} idle)" if nodes * node.gpus > used else ""
    if settings.gpu_node_count == 0:
        return f"{name} {replicas} engine(s) of {settings.tensor_parallel_size} GPU(s) once unparked: none runs parked"
    return (
        f"{name} {replicas} engine(s) of {settings.tensor_parallel_size} GPU(s) on {nodes} node(s): {used} of"
        f" {nodes * node.gpus} GPU(s){idle}{grown}"
    )


def _endpoint(settings: Settings) -> str:
    endpoint = settings.serve_endpoint
    auth = "API keys (SERVE_API_KEYS=on)" if endpoint.api_keys else "no API key"
    service = f"Service {settings.serve_service_name}.{settings.namespace}:{SERVE_PORT}"
    if not endpoint.exposed:
        return f"{service}, inside the cluster only (SERVE_EXPOSURE=cluster; `make endpoint` forwards a port); {auth}"
    protocol = "https" if endpoint.https else "http"
    url = (
        f"{protocol}://{endpoint.hostname}/v1"
        if endpoint.hostname
        else f"{protocol} on the DNS name `make endpoint` prints"
    )
    return f"{endpoint.exposure} load balancer, {url}, in front of the {service}; {auth}"


def plan_lines(settings: Settings) -> list[str]:
    parked = settings.gpu_node_count == 0
    cost = hourly_cost(settings)
    priced = (
        f"{cost.region} list prices read {cost.read}"
        if cost.region
        else f"US East list prices read {cost.read}: the table has none for {settings.region}, which may list higher"
    )
    running = f"~${cost.running:.2f}/hour running"
    if cost.running_max > cost.running:
        running += f" (up to ~${cost.running_max:.2f} at the maxima)"
    missing = f"; not in the table: {', '.join(cost.missing)}" if cost.missing else ""
    node = settings.gpu_node
    lookups = [
        what
        for what, unresolved in (
            ("GPU_AZ", settings.gpu_az_source == "built-in default"),
            ("the image digest", settings.dlc_image_source == "tag only"),
            ("add-on versions", bool(settings.unresolved_addons)),
            ("the model's facts", settings.model_facts is None),
        )
        if unresolved
    ]
    lines = [
        f"plan: {settings.cluster_name} in {settings.region}, GPU nodes in {settings.gpu_az}"
        f" ({settings.gpu_az_source})",
        f"  GPU nodes: {'none (parked: GPU_NODE_COUNT=0)' if parked else settings.gpu_node_count} x {node.name}"
        f" ({node.gpus} {node.gpu_model} each); system: {settings.system_node_count} x {settings.system_node.name}",
        "  "
        + _phase(
            settings,
            "prefill",
            settings.prefill_replicas,
            settings.prefill_nodes,
            settings.prefill_max_replicas,
        ),
        "  "
        + _phase(settings, "decode", settings.decode_replicas, settings.decode_nodes, settings.decode_max_replicas),
        f"  model: {settings.model_source} served as {settings.model_id!r}, up to {settings.max_model_len:,} tokens"
        " a request",
        f"  endpoint: {_endpoint(settings)}",
        f"  cost: {running}, ~${cost.parked:.2f}/hour parked ({priced}; EKS, NAT gateway, nodes"
        f"{', load balancer' if settings.serve_endpoint.exposed else ''}; not data, storage{_gcs_store(settings)} or"
        f" logs{missing})",
    ]
    lines.append(f"  parking: {_schedule(settings)}")
    if lookups:
        lines.append(f"  defaults, not looked up: {', '.join(lookups)}: `make lookup` with AWS credentials pins them")
    lines.append(
        "  next: `make deploy` (AWS credentials, about 30 minutes; `make diff` first on a deployed stack)"
        if not parked
        else "  next: `make deploy` parks the GPU nodes (no GPU runs); unset GPU_NODE_COUNT to unpark"
    )
    return lines


def _gcs_store(settings: Settings) -> str:
    """The GCS store's node, which the price table does not hold."""
    return f", the GCS store's {settings.gcs_store_node_type}" if settings.gcs_fault_tolerance == "redis" else ""


def _schedule(settings: Settings) -> str:
    """The park workflow's schedule in words (settings/park_schedule.py decides it)."""
    zone = settings.park_time_zone
    park = f"parks daily at {settings.park_at} {zone}" if settings.park_at else "no scheduled park (PARK_AT empty)"
    if not settings.unpark_at:
        return f"the park workflow {park}, no scheduled unpark (UNPARK_AT empty)"
    days = ",".join(WEEKDAYS[d] for d in settings.unpark_days)
    return f"the park workflow {park}, unparks at {settings.unpark_at} {zone} on {days}"


def cli_context(argv: list[str]) -> dict[str, str]:
    """The `-c KEY=VALUE` / `--context KEY=VALUE` pairs of `make synth ARGS=...`, which the CDK CLI gives the app over
    cdk.json; every other argument is the CLI's."""
    pairs: dict[str, str] = {}
    for index, arg in enumerate(argv):
        value = argv[index + 1] if arg in ("-c", "--context") and index + 1 < len(argv) else None
        if arg.startswith("--context="):
            value = arg.removeprefix("--context=")
        if value is not None and "=" in value:
            key, _, text = value.partition("=")
            pairs[key] = text
    return pairs


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    given = cli_context(sys.argv[1:] if argv is None else argv)
    settings = project_settings() if not given else load_settings(os.environ, {**read_project_context(), **given})
    print("\n".join(plan_lines(settings)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
