"""`make destroy` around `cdk destroy --all`; the CI destroy workflow runs the same two steps.

before: refuse when a stack of this cluster is deployed that this configuration leaves out (the
        observability stack with OBSERVABILITY=off): `cdk destroy --all` would not delete it, the
        cluster stack's deletion would then fail on the exports it imports, and its collector bills on;
        then delete what Kubernetes created in AWS outside CloudFormation (Services of type LoadBalancer,
        Ingresses: their load balancers and security groups hold the VPC's subnets) and the RayService,
        while the KubeRay operator and the nodes still run to clean up after them.
after:  list everything still tagged with the cluster (volumes, network interfaces, security groups,
        load balancers) and its log groups (EKS's, Container Insights') with the command that removes
        each; exit 1 if anything is left.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from preflight.deployed import existing_stacks
from preflight.reachability import RUNNER_FIX, hosted_runner_cannot_reach
from settings import Settings
from tools.entry import one_line_errors, project_settings


def _said(result: subprocess.CompletedProcess[str], done: str) -> str:
    return done if result.returncode == 0 else f"FAILED ({result.stderr.strip()[:200]}): {done}"


def before(settings: Settings, kubectl: Kubectl) -> list[str]:
    """Delete this cluster's load balancer Services, Ingresses and the RayService. Returns what it did.
    ``kubectl`` is bound to this cluster (preflight.cluster_access), never to the user's current context."""
    done: list[str] = []
    listed = kubectl(["get", "services", "--all-namespaces", "-o", "json"])
    if listed.returncode != 0:
        return [f"skipped: cannot list the cluster's Services ({listed.stderr.strip()[:200]})"]
    for item in json.loads(listed.stdout or "{}").get("items", []):
        if item.get("spec", {}).get("type") == "LoadBalancer":
            namespace, name = item["metadata"]["namespace"], item["metadata"]["name"]
            deleted = kubectl(["delete", "service", "-n", namespace, name, "--wait=true"])
            done.append(_said(deleted, f"deleted Service {namespace}/{name} (type LoadBalancer)"))
    ingresses = kubectl(["delete", "ingress", "--all-namespaces", "--all", "--wait=true"])
    if ingresses.returncode != 0 or ingresses.stdout.strip():
        done.append(_said(ingresses, f"deleted Ingresses: {ingresses.stdout.strip()}"))
    ray = kubectl(
        [
            "delete",
            "rayservice",
            "-n",
            settings.namespace,
            settings.ray_service_name,
            "--ignore-not-found",
            "--wait=true",
        ]
    )
    done.append(_said(ray, f"deleted RayService {settings.namespace}/{settings.ray_service_name}"))
    return done


def deployed_but_left_out(settings: Settings, session: Any) -> list[str]:
    """This cluster's optional stacks that exist in CloudFormation although the configuration leaves them out."""
    return existing_stacks(
        lambda service: session.client(service, region_name=settings.region), settings.stacks_left_out
    )


@dataclass(frozen=True)
class Leftover:
    kind: str
    identifier: str
    remove: str  # the command that removes it


def _tag_filters(cluster: str) -> list[list[dict[str, Any]]]:
    # EKS and its controllers tag what they create with one of these.
    return [
        [{"Name": f"tag:kubernetes.io/cluster/{cluster}", "Values": ["owned", "shared"]}],
        [{"Name": "tag:cluster.k8s.amazonaws.com/name", "Values": [cluster]}],
        [{"Name": "tag:eks:cluster-name", "Values": [cluster]}],
        [{"Name": "tag:elbv2.k8s.aws/cluster", "Values": [cluster]}],  # the AWS Load Balancer Controller's
        [{"Name": "tag:cluster", "Values": [cluster]}],  # this project's own tag
    ]


def after(settings: Settings, session: Any) -> list[Leftover]:
    cluster, region = settings.cluster_name, settings.region
    ec2 = session.client("ec2", region_name=region)
    found: dict[str, Leftover] = {}
    for filters in _tag_filters(cluster):
        for volume in ec2.describe_volumes(Filters=filters)["Volumes"]:
            vid = volume["VolumeId"]
            found[vid] = Leftover("EBS volume", vid, f"aws ec2 delete-volume --region {region} --volume-id {vid}")
        for eni in ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"]:
            eid = eni["NetworkInterfaceId"]
            found[eid] = Leftover(
                "network interface",
                eid,
                f"aws ec2 delete-network-interface --region {region} --network-interface-id {eid}",
            )
        for group in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]:
            gid = group["GroupId"]
            found[gid] = Leftover(
                "security group", gid, f"aws ec2 delete-security-group --region {region} --group-id {gid}"
            )
    elb = session.client("elbv2", region_name=region)
    arns = [
        lb["LoadBalancerArn"]
        for page in elb.get_paginator("describe_load_balancers").paginate()
        for lb in page["LoadBalancers"]
    ]
    for start in range(0, len(arns), 20):  # DescribeTags takes at most 20 ARNs
        for description in elb.describe_tags(ResourceArns=arns[start : start + 20])["TagDescriptions"]:
            tags = {t["Key"]: t.get("Value", "") for t in description.get("Tags", [])}
            if (
                tags.get("elbv2.k8s.aws/cluster") == cluster
                or f"kubernetes.io/cluster/{cluster}" in tags
                or tags.get("cluster") == cluster
            ):
                arn = description["ResourceArn"]
                found[arn] = Leftover(
                    "load balancer", arn, f"aws elbv2 delete-load-balancer --region {region} --load-balancer-arn {arn}"
                )
    classic = session.client("elb", region_name=region)  # the in-tree Service controller's load balancers
    names = [
        lb["LoadBalancerName"]
        for page in classic.get_paginator("describe_load_balancers").paginate()
        for lb in page["LoadBalancerDescriptions"]
    ]
    for start in range(0, len(names), 20):
        for description in classic.describe_tags(LoadBalancerNames=names[start : start + 20])["TagDescriptions"]:
            tags = {t["Key"]: t.get("Value", "") for t in description.get("Tags", [])}
            if f"kubernetes.io/cluster/{cluster}" in tags:
                name = description["LoadBalancerName"]
                found[name] = Leftover(
                    "classic load balancer",
                    name,
                    f"aws elb delete-load-balancer --region {region} --load-balancer-name {name}",
                )
    logs = session.client("logs", region_name=region)
    # EKS's control-plane group, and Container Insights' (OBSERVABILITY=on: the add-on's agent makes them).
    for prefix in (f"/aws/eks/{cluster}/", f"/aws/containerinsights/{cluster}/"):
        for group in logs.describe_log_groups(logGroupNamePrefix=prefix)["logGroups"]:
            name = group["logGroupName"]
            found[name] = Leftover(
                "log group", name, f"aws logs delete-log-group --region {region} --log-group-name {name}"
            )
    return sorted(found.values(), key=lambda leftover: (leftover.kind, leftover.identifier))


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("before", "after"))
    args = parser.parse_args(argv)
    settings = project_settings()
    if args.step == "before":
        import boto3

        try:
            left_out = deployed_but_left_out(settings, boto3.session.Session())
        except (BotoCoreError, ClientError) as error:
            left_out = []
            print(
                "before destroy: skipped the check for stacks left out of this configuration"
                f" ({str(error).splitlines()[0][:200]})"
            )
        if left_out:
            names = ", ".join(left_out)
            print(
                f"error: {names} is deployed but this configuration leaves it out (OBSERVABILITY=off): "
                "run `OBSERVABILITY=on make destroy` (or set the OBSERVABILITY repository variable) so it goes first",
                file=sys.stderr,
            )
            return 1
        unreachable = hosted_runner_cannot_reach(settings.endpoint_access, os.environ)
        if unreachable:
            # Skipping would leave load balancers holding the subnets, and the RayService its GPU nodes.
            print(
                f"error: {unreachable}, so it cannot delete what Kubernetes made in AWS first: {RUNNER_FIX}",
                file=sys.stderr,
            )
            return 1
        try:
            with cluster_kubectl(settings.region, settings.cluster_name) as kubectl:
                lines = before(settings, kubectl)
        except ClusterUnreachable as error:
            # No cluster (already gone) or no access: nothing to clean from here; `after` lists what is left.
            lines = [f"skipped: cannot reach cluster {settings.cluster_name} ({error})"]
        for line in lines:
            print(f"before destroy: {line}")
        return 0
    import boto3

    try:
        leftovers = after(settings, boto3.session.Session())
    except (BotoCoreError, ClientError) as error:
        print(f"error: cannot list what is left of {settings.cluster_name}: {error}", file=sys.stderr)
        return 1
    if not leftovers:
        print(f"after destroy: nothing tagged with {settings.cluster_name} is left in {settings.region}")
        return 0
    print(
        f"after destroy: {len(leftovers)} resource(s) tagged with {settings.cluster_name} are left in"
        f" {settings.region}:"
    )
    for leftover in leftovers:
        print(f"  {leftover.kind} {leftover.identifier}\n    remove: {leftover.remove}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
