"""What a deploy would do to each resource, from two CloudFormation templates: before and after.

Before is either what is deployed (`cloudformation:GetTemplate`, for the preflight) or another synth
(`make review`); after is the synthesized template. A property change is a replacement when the
resource type's CloudFormation schema lists it as create-only: the schemas are the ones cfn-lint ships
(the CloudFormation registry's resource provider schemas). Like `cdk diff --template`, this reads
templates, not live resources: a change to an intrinsic (a Ref to a replaced resource, an import whose
export changed) counts as a change, so it may over-report a replacement, never miss one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

# Resources whose replacement or removal takes the service down or cannot be done in place at all. (The
# NAT gateway is not one: it moves with GPU_AZ, and the nodes lose egress only while it is replaced.)
PROTECTED_TYPES: Mapping[str, str] = {
    "AWS::EC2::VPC": "the network every node and the control plane live in",
    "AWS::EC2::Subnet": "the subnets the cluster and its nodes are attached to",
    "AWS::EKS::Cluster": "the Kubernetes control plane and everything in it",
    "AWS::EKS::Nodegroup": "a nodegroup's nodes (the GPU nodes hold the model)",
    "AWS::KMS::Key": "the key that encrypts the cluster's Secrets",
    "AWS::EC2::PlacementGroup": "the placement group the GPU nodes run in",
    "AWS::EC2::LaunchTemplate": "the launch template of a nodegroup",
    "AWS::EKS::Addon": "a managed add-on (networking, DNS, Pod Identity) the nodes need",
}

ADD, MODIFY, REPLACE, REMOVE = "add", "modify", "replace", "remove"


@dataclass(frozen=True)
class ResourceChange:
    logical_id: str
    resource_type: str
    action: str  # add | modify | replace | remove
    properties: tuple[str, ...] = ()  # top-level properties that differ
    replaced_by: tuple[str, ...] = ()  # for a replacement: the create-only properties that force it
    before: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    after: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def protected(self) -> bool:
        return self.resource_type in PROTECTED_TYPES and self.action in (REPLACE, REMOVE)

    def describe(self) -> str:
        if self.action == REPLACE:
            return (
                f"{self.resource_type} {self.logical_id} is replaced: {', '.join(self.replaced_by)} cannot change in"
                " place"
            )
        if self.action == REMOVE:
            return f"{self.resource_type} {self.logical_id} is destroyed"
        if self.action == ADD:
            return f"{self.resource_type} {self.logical_id} is added"
        return f"{self.resource_type} {self.logical_id} changes in place: {', '.join(self.properties)}"


def _cfnlint_schemas() -> Path:
    # Where cfn-lint is installed, without importing it (most of a second for `make review`, which needs its data only).
    spec = find_spec("cfnlint")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("cfn-lint is not installed (requirements.txt)")
    return Path(spec.origin).parent / "data" / "schemas"


@cache
def create_only_properties(resource_type: str) -> frozenset[str]:
    """Top-level create-only properties of a type (nested paths count for their top-level property)."""
    base = _cfnlint_schemas()
    index: dict[str, str] = _provider_index(base)
    if resource_type not in index:
        return frozenset()  # custom resources and unknown types: no create-only property
    schema = json.loads((base / "resources" / f"{index[resource_type]}.json").read_text())
    return frozenset(path.split("/")[2] for path in schema.get("createOnlyProperties", []))


@cache
def _provider_index(base: Path) -> dict[str, str]:
    index: dict[str, str] = json.loads((base / "providers" / "us-east-1.json").read_text())
    return index


# Attributes that take a new value whenever their resource is updated (a launch template's new version).
_VERSION_ATTRIBUTES = frozenset({"LatestVersionNumber", "DefaultVersionNumber"})


def _references(value: Any, *, attributes_only: bool = False) -> set[str]:
    """Logical ids a property value points at (Ref, Fn::GetAtt), or only those whose version attribute it reads."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "Ref" and isinstance(inner, str) and not attributes_only:
                found.add(inner)
            elif key == "Fn::GetAtt":
                target, attribute = (inner[0], inner[1]) if isinstance(inner, list) else str(inner).split(".", 1)
                if not attributes_only or attribute in _VERSION_ATTRIBUTES:
                    found.add(str(target))
            else:
                found |= _references(inner, attributes_only=attributes_only)
    elif isinstance(value, list):
        for inner in value:
            found |= _references(inner, attributes_only=attributes_only)
    return found


def _entry(resource: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    return str(resource.get("Type", "")), dict(resource.get("Properties", {}) or {})


def plan(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[ResourceChange]:
    """Every resource that differs between two templates, with what CloudFormation would do to it.

    A replaced resource makes every property that refers to it change too (its physical id changes), and
    a modified one every property that reads one of its attributes (a launch template's
    LatestVersionNumber: the nodegroup rolls), so changes propagate until nothing more changes.
    """
    old = dict((before or {}).get("Resources", {}))
    new = dict((after or {}).get("Resources", {}))
    replaced: set[str] = set()
    modified: set[str] = set()
    changes: dict[str, ResourceChange] = {}
    while True:
        for logical_id in sorted(set(old) | set(new)):
            if logical_id not in new:
                changes[logical_id] = ResourceChange(
                    logical_id, _entry(old[logical_id])[0], REMOVE, before=old[logical_id]
                )
                continue
            if logical_id not in old:
                changes[logical_id] = ResourceChange(logical_id, _entry(new[logical_id])[0], ADD, after=new[logical_id])
                continue
            (old_type, old_props), (new_type, new_props) = _entry(old[logical_id]), _entry(new[logical_id])
            differing = sorted(
                name
                for name in set(old_props) | set(new_props)
                if old_props.get(name) != new_props.get(name)
                or _references(new_props.get(name)) & replaced
                or _references(new_props.get(name), attributes_only=True) & modified
            )
            if old_type != new_type:
                changes[logical_id] = ResourceChange(
                    logical_id, new_type, REPLACE, tuple(differing), ("Type",), old[logical_id], new[logical_id]
                )
            elif differing:
                forcing = tuple(name for name in differing if name in create_only_properties(new_type))
                action = REPLACE if forcing else MODIFY
                changes[logical_id] = ResourceChange(
                    logical_id, new_type, action, tuple(differing), forcing, old[logical_id], new[logical_id]
                )
        now_replaced = {k for k, c in changes.items() if c.action == REPLACE}
        now_modified = {k for k, c in changes.items() if c.action == MODIFY}
        if (now_replaced, now_modified) == (replaced, modified):
            return [changes[k] for k in sorted(changes)]
        replaced, modified = now_replaced, now_modified


def counts(changes: list[ResourceChange]) -> dict[str, int]:
    """Resources added, changed, replaced and destroyed."""
    tally = {ADD: 0, MODIFY: 0, REPLACE: 0, REMOVE: 0}
    for change in changes:
        tally[change.action] += 1
    return tally


_MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"
_HELM = "Custom::AWSCDK-EKS-HelmChart"


def _kubernetes_objects(resource: Mapping[str, Any]) -> set[str]:
    """What a kubectl-provider resource puts in the cluster: manifest objects, or a Helm release."""
    props = resource.get("Properties", {})
    if resource.get("Type") == _HELM:
        return {f"Helm release {props.get('Namespace', 'default')}/{props.get('Release')}"}
    manifest = props.get("Manifest")
    if resource.get("Type") != _MANIFEST or not isinstance(manifest, str):
        return set()
    try:
        objects = json.loads(manifest)
    except json.JSONDecodeError:
        return set()
    return {
        f"{o.get('kind')} {o.get('metadata', {}).get('namespace', '-')}/{o.get('metadata', {}).get('name')}"
        for o in objects
        if isinstance(o, dict)
    }


# What identifies a resource to its service, beyond CloudFormation's logical id: two resources with the
# same identity cannot exist at once, and CloudFormation creates a new one before it deletes the old.
IDENTITY_PROPERTIES: Mapping[str, tuple[str, ...]] = {
    "AWS::EKS::AccessEntry": ("ClusterName", "PrincipalArn"),
    "AWS::EKS::PodIdentityAssociation": ("ClusterName", "Namespace", "ServiceAccount"),
    "AWS::EKS::Nodegroup": ("ClusterName", "NodegroupName"),
    "AWS::Logs::LogGroup": ("LogGroupName",),
    "AWS::EKS::Addon": ("ClusterName", "AddonName"),
}


def identity_of(resource: Mapping[str, Any]) -> str | None:
    keys = IDENTITY_PROPERTIES.get(str(resource.get("Type")))
    props = resource.get("Properties", {}) or {}
    if not keys or any(k not in props for k in keys):
        return None
    return f"{resource.get('Type')} " + json.dumps([props[k] for k in keys], sort_keys=True)


def helm_namespace_moves(changes: list[ResourceChange]) -> list[str]:
    """Helm releases whose chart would move to another namespace: the old release keeps running (and a
    chart with cluster-scoped objects of fixed names cannot be installed twice)."""
    before = {
        (c.before.get("Properties", {}).get("Chart"), c.before.get("Properties", {}).get("Release")): c
        for c in changes
        if c.before and c.resource_type == _HELM
    }
    moves = []
    for change in changes:
        if change.resource_type != _HELM or not change.after:
            continue
        props = change.after.get("Properties", {})
        old = before.get((props.get("Chart"), props.get("Release")))
        if old is not None and old.before.get("Properties", {}).get("Namespace") != props.get("Namespace"):
            moves.append(
                f"Helm release {props.get('Release')} would move from namespace"
                f" {old.before['Properties'].get('Namespace')} to {props.get('Namespace')}"
            )
    return moves


def clashes_across_stacks(stacks: list[tuple[str, list[ResourceChange]]]) -> list[str]:
    """Within one deploy of several stacks, in deploy order: an object or identity that a stack creates
    while the stack that removes it (the same one, or a later one) has not yet done so. A move to a later
    stack is safe (the earlier stack's update, cleanup included, finishes first); a move to an earlier
    stack, or within one, is not."""
    found: list[str] = []
    for index, (stack, changes) in enumerate(stacks):
        for later_stack, later_changes in stacks[index:]:
            removed_objects = set().union(
                *(_kubernetes_objects(c.before) for c in later_changes if c.action in (REMOVE, REPLACE))
            )
            removed_ids = {i for c in later_changes if c.action in (REMOVE, REPLACE) and (i := identity_of(c.before))}
            for change in changes:
                if change.action not in (ADD, REPLACE):
                    continue
                for obj in sorted(_kubernetes_objects(change.after) & removed_objects):
                    found.append(
                        f"{stack}: {obj} would be applied and then deleted with an old resource of {later_stack}"
                    )
                identity = identity_of(change.after)
                if (
                    identity
                    and identity in removed_ids
                    and not (change.resource_type == "AWS::EKS::Nodegroup" and later_stack == stack)
                ):
                    found.append(
                        f"{stack}: {change.resource_type} {change.logical_id} would be created while the one of the"
                        f" same identity in {later_stack} still exists"
                    )
    return found
