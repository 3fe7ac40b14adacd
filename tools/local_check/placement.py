"""Where the PD engines landed, read back from Ray, and each phase's own engine logs.

The RayCluster names its worker groups after the phases (k8s_constructs/ray_cluster_groups.py: `group_name=phase`),
and KubeRay labels every Ray node of a group `ray.io/node-group: <group>`; the local cluster gives its nodes the same
label. Ray Serve LLM 2.58 names the PD deployments `Prefill:<model>` and `Decode:<model>`
(`serving_patterns/prefill_decode/builder.py`, `name_prefix`), and each replica is an actor
`ServeReplica:<app>:<deployment>` whose engine shares its placement group's first bundle, on the same node. So a
prefill replica must run on a node of the prefill group, a decode replica on one of the decode group: placement
bundles that ask for the wrong phase's resource put an engine on the other phase's node, and this says so.

The actor table is read from the GCS (ray._private.state, as `ray list actors` does without the dashboard).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Ray Serve LLM 2.58's PD deployment names, by phase.
DEPLOYMENT_PREFIXES = {"prefill": "Prefill:", "decode": "Decode:"}
REPLICA_CLASS = "ServeReplica:{app}:"
NODE_GROUP_LABEL = "ray.io/node-group"


@dataclass(frozen=True)
class Placed:
    phase: str
    deployment: str
    node_id: str
    group: str  # the node's ray.io/node-group
    resources: dict[str, float] = field(default_factory=dict)  # the node's custom resources (pd_prefill, ...)


def _custom(resources: dict[str, float]) -> dict[str, float]:
    return {
        name: amount
        for name, amount in resources.items()
        if name not in ("CPU", "GPU", "memory", "object_store_memory")
        and not name.startswith(("node:", "accelerator_type:"))
    }


def read_placement(app: str, actors: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[Placed]:
    """The PD replicas of `app` and the nodes they run on, from Ray's actor and node tables."""
    by_id = {node["NodeID"]: node for node in nodes}
    prefix = REPLICA_CLASS.format(app=app)
    placed = []
    for actor in actors:
        name = str(actor.get("ActorClassName", ""))
        if actor.get("State") != "ALIVE" or not name.startswith(prefix):
            continue
        deployment = name[len(prefix) :]
        phase = next((p for p, start in DEPLOYMENT_PREFIXES.items() if deployment.startswith(start)), None)
        if phase is None:
            continue  # the ingress
        node = by_id.get(actor["Address"]["NodeID"], {})
        placed.append(
            Placed(
                phase,
                deployment,
                str(actor["Address"]["NodeID"]),
                str((node.get("Labels") or {}).get(NODE_GROUP_LABEL, "")),
                _custom(node.get("Resources") or {}),
            )
        )
    return sorted(placed, key=lambda p: (p.phase, p.node_id))


def judge_placement(placed: list[Placed], replicas: dict[str, int]) -> tuple[bool, str]:
    """Every phase has its replicas, each on a node of its own phase's group."""
    wrong = [p for p in placed if p.group != p.phase]
    counts = {phase: sum(1 for p in placed if p.phase == phase) for phase in replicas}
    short = {phase: (counts[phase], wanted) for phase, wanted in replicas.items() if counts[phase] < wanted}
    detail = "; ".join(
        f"{p.phase} ({p.deployment}) on node {p.node_id[:8]} of group {p.group or '?'}"
        f" {sorted(p.resources) if p.resources else '[]'}"
        for p in placed
    )
    if short:
        detail += "; missing replicas: " + ", ".join(f"{k} {have} of {want}" for k, (have, want) in short.items())
    if wrong:
        detail += "; on the other phase's node: " + ", ".join(p.phase for p in wrong)
    return not wrong and not short and bool(placed), detail


def ray_tables() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The actor and node tables of the connected cluster."""
    import ray
    from ray._private import state

    return list(state.actors().values()), list(ray.nodes())


def engine_pids(placed: list[Placed], actors: list[dict[str, Any]]) -> dict[str, set[int]]:
    """Per phase, the live actors' process ids on the nodes its replicas run on: the replica and its engine's GPU
    workers (whose logs are the phase engine's)."""
    nodes = {phase: {p.node_id for p in placed if p.phase == phase} for phase in DEPLOYMENT_PREFIXES}
    found: dict[str, set[int]] = {phase: set() for phase in DEPLOYMENT_PREFIXES}
    for actor in actors:
        if actor.get("State") != "ALIVE" or not actor.get("Pid"):
            continue
        for phase, ids in nodes.items():
            if actor["Address"]["NodeID"] in ids:
                found[phase].add(int(actor["Pid"]))
    return found


def written_by(path: Path, pids: set[int]) -> bool:
    """Ray's worker-<id>-<job>-<pid>.out/.err of one of the given processes."""
    tail = path.stem.rsplit("-", 1)[-1]
    return path.name.startswith("worker-") and path.suffix in (".out", ".err") and tail.isdigit() and int(tail) in pids


def logs_of(log_dir: Path, pids: set[int]) -> str:
    """What the given processes wrote; an engine core started as a child process writes into its parent's."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("worker-*")) if written_by(p, pids))
