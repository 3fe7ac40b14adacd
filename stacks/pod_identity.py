"""An EKS Pod Identity role for one service account: trusted by pods.eks.amazonaws.com (with sts:TagSession,
which Pod Identity calls), and its association. One helper for every use (the CloudWatch agent, the
Hugging Face token reader)."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(
    scope: Construct,
    role_id: str,
    association_id: str,
    *,
    cluster: eks.ICluster,
    namespace: str,
    service_account: str,
    description: str,
    managed_policies: Sequence[iam.IManagedPolicy] = (),
) -> tuple[iam.Role, eks.CfnPodIdentityAssociation]:
    """The role (grant it what the pods need) and the association; the ids name their logical IDs."""
    role = iam.Role(
        scope,
        role_id,
        description=description,
        assumed_by=iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL),
        managed_policies=list(managed_policies) or None,
    )
    role.assume_role_policy.add_statements(  # type: ignore[union-attr]
        iam.PolicyStatement(actions=["sts:TagSession"], principals=[iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)])
    )
    association = eks.CfnPodIdentityAssociation(
        scope,
        association_id,
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.role_arn,
    )
    return role, association
