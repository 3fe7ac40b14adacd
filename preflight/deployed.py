"""What is deployed now: the stacks (status, outputs, template), the EKS cluster and its nodegroups.

Read-only calls: cloudformation:DescribeStacks and GetTemplate, eks:DescribeCluster, ListNodegroups and
DescribeNodegroup. A missing stack or cluster is an answer (a first deploy), not an error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

Client = Callable[[str], Any]


@dataclass(frozen=True)
class DeployedStack:
    name: str
    status: str
    outputs: Mapping[str, str]
    template: Mapping[str, Any]


@dataclass(frozen=True)
class DeployedNodegroup:
    name: str
    version: str
    desired_size: int
    status: str


@dataclass(frozen=True)
class Deployed:
    stacks: Mapping[str, DeployedStack] = field(default_factory=dict)  # only the stacks that exist
    cluster_version: str | None = None  # None: no such cluster
    nodegroups: Mapping[str, DeployedNodegroup] = field(default_factory=dict)


def _missing(err: ClientError, *codes: str) -> bool:
    error = err.response.get("Error", {})
    return str(error.get("Code")) in codes or "does not exist" in str(error.get("Message", ""))


def _stack(cloudformation: Any, name: str) -> DeployedStack | None:
    try:
        (described,) = cloudformation.describe_stacks(StackName=name)["Stacks"]
    except ClientError as err:
        if _missing(err, "ValidationError"):
            return None
        raise
    status = str(described["StackStatus"])
    if status == "DELETE_COMPLETE":
        return None
    body = cloudformation.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
    template = json.loads(body) if isinstance(body, str) else dict(body)
    outputs = {str(o["OutputKey"]): str(o.get("OutputValue", "")) for o in described.get("Outputs", [])}
    return DeployedStack(name=name, status=status, outputs=outputs, template=template)


def read_deployed(client: Client, *, cluster_name: str, stack_names: Iterable[str]) -> Deployed:
    cloudformation = client("cloudformation")
    stacks = {name: stack for name in stack_names if (stack := _stack(cloudformation, name)) is not None}
    eks = client("eks")
    try:
        cluster_version: str | None = str(eks.describe_cluster(name=cluster_name)["cluster"]["version"])
    except ClientError as err:
        if not _missing(err, "ResourceNotFoundException"):
            raise
        return Deployed(stacks=stacks)
    nodegroups: dict[str, DeployedNodegroup] = {}
    for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster_name):
        for name in page["nodegroups"]:
            described = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=name)["nodegroup"]
            nodegroups[str(name)] = DeployedNodegroup(
                name=str(name),
                version=str(described.get("version", "")),
                desired_size=int(described.get("scalingConfig", {}).get("desiredSize", 0)),
                status=str(described.get("status", "")),
            )
    return Deployed(stacks=stacks, cluster_version=cluster_version, nodegroups=nodegroups)


def find_resources(template: Mapping[str, Any], resource_type: str, **properties: Any) -> dict[str, Mapping[str, Any]]:
    """Resources of a type whose properties include ``properties`` (e.g. NodegroupName="gpu-workers")."""
    return {
        logical_id: resource
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == resource_type
        and all(resource.get("Properties", {}).get(k) == v for k, v in properties.items())
    }


def existing_stacks(client: Client, stack_names: Iterable[str]) -> list[str]:
    """Those of `stack_names` that CloudFormation has (in any state but deleted)."""
    found = []
    for name in stack_names:
        try:
            stacks = client("cloudformation").describe_stacks(StackName=name)["Stacks"]
        except ClientError as error:
            if "does not exist" in str(error):
                continue
            raise
        if stacks and stacks[0]["StackStatus"] != "DELETE_COMPLETE":
            found.append(name)
    return found
