"""The AWS Load Balancer Controller (SERVE_EXPOSURE internal or internet-facing): turns the serving stack's Ingress
into an Application Load Balancer in front of the Serve pods. On the system nodes, with an EKS Pod Identity whose
policy is the controller's published one (data/, at the pinned version) narrowed to this cluster.

The narrowing: every statement the published policy limits to resources carrying the controller's tracking tag
(`elbv2.k8s.aws/cluster`, any value) is limited to those carrying it with this cluster's name, which the controller
sets (`--cluster-name`, pkg/deploy/tracking/provider.go): it may create, change and delete its own load balancers,
target groups and security groups only. Its EC2 and ELB resource ARNs are this Region's and account's. Listener and
rule changes (on "*" as published) and the tags of listeners and rules are limited to the load balancer the Ingress
names (k8s_constructs/endpoint.py `load_balancer_name`; the listeners' and rules' ARNs carry it). Adding or removing
ingress rules on groups it did not create (the nodes' groups, on "*" as published) is limited to this VPC (`ec2:Vpc`,
which both actions support per the Service Authorization Reference). Registering and deregistering targets (on every
target group of the account as published) is limited to target groups tagged with this cluster (the tracking tag
again; the controller tags every target group it creates). What stays as published: reads (Describe*, no
resource-level permissions), the creates (no ARN before; the tag is required), tagging on create (conditioned on the
create action), the Cognito and certificate reads. Left out: the WAF and Shield actions (read and write) and ELB's
side of a WAF association (SetWebAcl), which the chart values turn off. The controller watches the serving namespace
only.

Its pods cannot reach IMDS (hop limit 1 on the nodes): the VPC id is a deploy-time value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

from k8s_constructs.endpoint import load_balancer_name
from settings import Settings
from settings.scheduling import SYSTEM_NODE_LABELS
from settings.versions import HelmChartPin
from stacks import nag
from stacks.addons.base import DeployTimeRefs, HelmAddon, PodIdentityGrant

NAMESPACE: Final = "kube-system"
SERVICE_ACCOUNT: Final = "aws-load-balancer-controller"
# Chart 3.5.0, appVersion v3.5.0: kubernetes-sigs/aws-load-balancer-controller at tag v3.5.0,
# helm/aws-load-balancer-controller.
PIN: Final = HelmChartPin("https://aws.github.io/eks-charts", "aws-load-balancer-controller", "3.5.0")
APP_VERSION: Final = "v3.5.0"
# docs/install/iam_policy.json at the same tag, unchanged.
PUBLISHED_POLICY: Final = Path(__file__).parent / "data" / f"aws-load-balancer-controller-{APP_VERSION}-iam-policy.json"
IMAGE_REPOSITORY: Final = "amazon/aws-load-balancer-controller"
INGRESS_CLASS: Final = "alb"
TRACKING_TAG: Final = "elbv2.k8s.aws/cluster"
# Putting IPs into a target group, or taking them out: published on any target group of the account (whoever holds the
# controller's credentials could drain another application's or add their own targets to it); here, its own only.
_TARGET_ACTIONS: Final = frozenset({"elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"})
_TAG_KEYS: Final = (f"aws:ResourceTag/{TRACKING_TAG}", f"aws:RequestTag/{TRACKING_TAG}")
_ANY_REGION_ACCOUNT: Final = ("arn:aws:ec2:*:*:", "arn:aws:elasticloadbalancing:*:*:")
# Services of the published policy the controller uses only for an Ingress that asks for them (WAF, Shield), which
# ours does not and the chart values above turn off: their actions are left out of the role.
_UNUSED_SERVICES: Final = ("shield", "wafv2", "waf-regional")
# The ELB side of a WAF association (no API of its own: a permission WAF checks), unused for the same reason.
_UNUSED_ACTIONS: Final = ("elasticloadbalancing:SetWebAcl",)
# Listener and rule changes, which the published policy allows on "*": limited to the load balancer the Ingress names
# (alb.ingress.kubernetes.io/load-balancer-name), whose listeners' and rules' ARNs carry its name.
_LISTENER_ACTIONS: Final = frozenset(
    f"elasticloadbalancing:{a}"
    for a in (
        *(
            "CreateListener",
            "DeleteListener",
            "ModifyListener",
            "AddListenerCertificates",
            "RemoveListenerCertificates",
        ),
        *("CreateRule", "DeleteRule", "ModifyRule", "SetRulePriorities"),
    )
)
_TAG_ACTIONS: Final = frozenset({"elasticloadbalancing:AddTags", "elasticloadbalancing:RemoveTags"})
# Ingress rules on security groups: the published policy's unconditioned statement, limited to this VPC.
_INGRESS_RULE_ACTIONS: Final = frozenset({"ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"})


def values(settings: Settings) -> dict[str, Any]:
    memory = "256Mi"
    return {
        "clusterName": settings.cluster_name,
        "region": settings.region,
        # From the deploy Region's EKS registry, as the EFA plugin's (the chart's default is public.ecr.aws).
        "image": {"repository": f"{settings.eks_addon_registry}/{IMAGE_REPOSITORY}", "tag": APP_VERSION},
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "nodeSelector": dict(SYSTEM_NODE_LABELS),
        "resources": {"requests": {"cpu": "100m", "memory": memory}, "limits": {"memory": memory}},
        "ingressClass": INGRESS_CLASS,
        "createIngressClassResource": True,
        # Only the Ingress of the serving stack: no mutating webhook on every Service of type LoadBalancer, and no
        # Ingress of another namespace: an Ingress elsewhere cannot get a load balancer past SERVE_EXPOSURE,
        # SERVE_ALLOWED_CIDRS and the TLS rule.
        "enableServiceMutatorWebhook": False,
        "watchNamespace": settings.namespace,
        # The Ingress asks for no WAF or Shield: the controller neither reads nor changes them, and its role cannot.
        "enableShield": False,
        "enableWaf": False,
        "enableWafv2": False,
        # One of its two pods may be drained at a time (the other keeps the webhook answering).
        "podDisruptionBudget": {"maxUnavailable": 1},
    }


def deploy_values(refs: DeployTimeRefs) -> dict[str, Any]:
    return {"vpcId": refs.vpc_id}


def _narrowed_condition(condition: dict[str, Any], cluster_name: str) -> dict[str, Any]:
    """A published condition with "tag present" (Null: false) on the tracking tag made "tag is this cluster's"."""
    out = {operator: dict(tests) for operator, tests in condition.items()}
    null = out.get("Null", {})
    for key in _TAG_KEYS:
        if null.get(key) == "false":
            del null[key]
            out.setdefault("StringEquals", {})[key] = cluster_name
    if "Null" in out and not out["Null"]:
        del out["Null"]
    return out


def _in_this_region(resource: str, partition: str, region: str, account: str) -> str:
    """An EC2 or ELB ARN of any Region and account made this Region's and account's (other resources as they are)."""
    for prefix in _ANY_REGION_ACCOUNT:
        if resource.startswith(prefix):
            return f"arn:{partition}:{prefix.split(':')[2]}:{region}:{account}:" + resource[len(prefix) :]
    return resource


def _narrowed_resource(resource: str) -> str:
    return _in_this_region(resource, Aws.PARTITION, Aws.REGION, Aws.ACCOUNT_ID)


def _nag_form(resource: str) -> str:
    """How cdk-nag writes a resource with the pseudo parameters above."""
    return _in_this_region(resource, "<AWS::Partition>", "<AWS::Region>", "<AWS::AccountId>")


def _own_load_balancer(name: str, partition: str, region: str, account: str) -> list[str]:
    """The ARNs of the load balancer named `name`, its listeners and their rules (each ARN carries the name)."""
    arn = f"arn:{partition}:elasticloadbalancing:{region}:{account}"
    return [f"{arn}:{kind}/app/{name}/*" for kind in ("loadbalancer", "listener", "listener-rule")]


def _is_listener_statement(actions: list[str], resources: list[str]) -> bool:
    """A published statement of listener and rule changes (on "*") or of tags on any listener or rule."""
    if set(actions) <= _LISTENER_ACTIONS:
        return True
    return set(actions) <= _TAG_ACTIONS and all(
        r.split(":", 5)[-1].startswith(("listener/", "listener-rule/")) for r in resources
    )


def policy_statements(settings: Settings, vpc_id: str) -> list[dict[str, Any]]:
    """The published policy's statements, narrowed to this cluster, this load balancer and this VPC (as JSON,
    before the pseudo parameters resolve)."""
    published = json.loads(PUBLISHED_POLICY.read_text())
    own = _own_load_balancer(load_balancer_name(settings), Aws.PARTITION, Aws.REGION, Aws.ACCOUNT_ID)
    statements = []
    for statement in published["Statement"]:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        actions = [a for a in actions if a.split(":", 1)[0] not in _UNUSED_SERVICES and a not in _UNUSED_ACTIONS]
        if not actions:
            continue
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        narrowed = {**statement, "Action": actions, "Resource": [_narrowed_resource(r) for r in resources]}
        if "Condition" in statement:
            narrowed["Condition"] = _narrowed_condition(statement["Condition"], settings.cluster_name)
        if _is_listener_statement(actions, resources):
            # Tags: on its listeners and rules only (the load balancer's own tags stay conditioned as published).
            narrowed["Resource"] = own if set(actions) <= _LISTENER_ACTIONS else own[1:]
        elif set(actions) <= _TARGET_ACTIONS and "Condition" not in statement:
            # Published without a condition: every target group of the account. Its own carry the tracking tag.
            narrowed["Condition"] = {"StringEquals": {f"aws:ResourceTag/{TRACKING_TAG}": settings.cluster_name}}
        elif set(actions) <= _INGRESS_RULE_ACTIONS and "Condition" not in statement:
            # The rules it adds to groups it did not create (the nodes' and pods'): groups of this VPC only.
            vpc = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:vpc/{vpc_id}"
            narrowed["Condition"] = {"ArnEquals": {"ec2:Vpc": vpc}}
        statements.append(narrowed)
    return statements


def grant(role: iam.Role, settings: Settings, refs: DeployTimeRefs) -> None:
    statements = policy_statements(settings, refs.vpc_id)
    for statement in statements:
        role.add_to_policy(iam.PolicyStatement.from_json(statement))
    published = json.loads(PUBLISHED_POLICY.read_text())
    wildcards = {
        _nag_form(r)
        for s in published["Statement"]
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
        if "*" in r and not r.split(":", 5)[-1].startswith(("listener/", "listener-rule/"))
    }
    wildcards |= set(
        _own_load_balancer(load_balancer_name(settings), "<AWS::Partition>", "<AWS::Region>", "<AWS::AccountId>")
    )
    nag.acknowledge(
        role,
        "AwsSolutions-IAM5",
        f"The AWS Load Balancer Controller's published policy ({APP_VERSION}): EC2 and ELB reads have no resource-level"
        " permissions; the load balancers, target groups, listeners and security groups it creates get names and IDs"
        " from AWS, so their ARNs end in wildcards, and every change to them is limited to resources tagged"
        f" {TRACKING_TAG}={settings.cluster_name}, or to the load balancer named {load_balancer_name(settings)}"
        " (listeners and rules). Security-group ingress rules stay on * within this VPC (ec2:Vpc): the controller adds"
        " them to the nodes' groups, which it does not tag.",
        applies_to=[f"Resource::{r}" for r in sorted(wildcards)],
    )
    nag.skip_checkov(
        role.node.find_child("DefaultPolicy"),
        {
            "CKV_AWS_111": (
                f"The controller's published policy ({APP_VERSION}): it creates security groups, load balancers and"
                " target groups, whose ARNs do not exist before (their tags are required on create), and adds ingress"
                " rules to the nodes' groups in this VPC; every other write is limited to its tag or its load"
                " balancer's name."
            ),
        },
    )


ADDON = HelmAddon(
    construct_id="AwsLoadBalancerController",
    stack="system",
    pin=lambda s: PIN,
    release="aws-load-balancer-controller",
    namespace=lambda s: NAMESPACE,
    values=values,
    enabled=lambda s: s.serve_endpoint.exposed,
    purpose="the load balancer of the Serve endpoint (SERVE_EXPOSURE internal or internet-facing)",
    pod_identity=PodIdentityGrant(
        SERVICE_ACCOUNT, lambda s: f"manages the load balancers tagged {TRACKING_TAG}={s.cluster_name}", grant
    ),
    deploy_values=deploy_values,
)
