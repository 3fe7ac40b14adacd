"""The serving layer: the prefill/decode RayService (cdk8s), its namespace and NetworkPolicies, after the KubeRay
operator of the system stack."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Aws, CfnOutput, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from k8s_constructs import gcs_ft
from k8s_constructs.endpoint import EndpointRefs
from k8s_constructs.gcs_ft import GcsStoreRef, head_service_account
from k8s_constructs.ray_cluster_groups import head_identity_needed, worker_identity_needed
from k8s_constructs.ray_facts import SERVE_PORT, worker_service_account
from k8s_constructs.ray_service import build_rayservice_chart
from k8s_constructs.synced_secrets import HfToken, hf_token_of
from settings import Settings
from settings.configuration import RAY_CLUSTER_FINGERPRINT_OUTPUT
from stacks import addons, model_access, nag, serve_endpoint
from stacks.gcs_store import GcsStore
from stacks.pod_identity import pod_identity_role

# The objects that belong to the namespace, not to one RayService: they move only with NAMESPACE.
NAMESPACE_KINDS = frozenset({"Namespace", "NetworkPolicy"})
# The endpoint's Ingress: a manifest of its own, created after (and so deleted before) the load balancer controller,
# which deletes the load balancer, its security groups and their rules while the Ingress waits on its finalizer.
ENDPOINT_KINDS = frozenset({"Ingress"})
# The API keys' secret: a JSON object of name -> key, generated at deploy with one key named "default".
API_KEY_LENGTH = 48
FIRST_API_KEY = "default"
# And what KubeRay's Redis cleanup Job (a copy of the head pod, run when the RayService is deleted) needs: the
# head's service account, the store's token and its CA must outlive the RayService's manifest.
GCS_STORE_OBJECTS = frozenset({("SecretProviderClass", gcs_ft.PROVIDER_CLASS), ("ConfigMap", gcs_ft.CA_CONFIG_MAP)})


def namespace_scoped(obj: dict[str, Any], settings: Settings) -> bool:
    name = obj["metadata"].get("name")
    head = ("ServiceAccount", gcs_ft.head_service_account(settings.ray_service_name))
    return obj["kind"] in NAMESPACE_KINDS or (
        settings.gcs_redis and ((obj["kind"], name) in GCS_STORE_OBJECTS or (obj["kind"], name) == head)
    )


class ServingStack(Stack):
    """Exposes ``ray_service`` (its manifest), ``namespace_manifest`` and ``chart`` (cdk8s); ``kuberay`` is the
    operator's release of the system stack, which the RayService waits for."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        system_nodegroup: eks.Nodegroup,
        gpu_nodegroup: eks.Nodegroup,
        kuberay: eks.HelmChart,
        env: Environment,
        gcs_store: GcsStore | None = None,
        load_balancer_controller: eks.HelmChart | None = None,
    ) -> None:
        super().__init__(scope, construct_id, env=env, description=f"{settings.cluster_name}: the PD RayService")
        self.kuberay = kuberay
        store = GcsStoreRef(address=gcs_store.address, secret_arn=gcs_store.secret.secret_arn) if gcs_store else None
        endpoint = settings.serve_endpoint
        self.api_keys = self._api_keys_secret(settings) if endpoint.api_keys else None
        self.access_logs: s3.Bucket | None = (
            serve_endpoint.access_log_bucket(self, settings) if endpoint.access_logs else None
        )
        refs = EndpointRefs(
            keys_secret_arn=self.api_keys.secret_arn if self.api_keys else EndpointRefs().keys_secret_arn,
            public_subnet_ids=(
                tuple(subnet.subnet_id for subnet in cluster.vpc.public_subnets)
                if endpoint.exposed
                else EndpointRefs().public_subnet_ids
            ),
            access_log_bucket=self.access_logs.bucket_name if self.access_logs else EndpointRefs().access_log_bucket,
        )
        self.chart = build_rayservice_chart(settings, store, refs)
        objects = [o for o in self.chart.to_json() if o["kind"] not in ENDPOINT_KINDS]
        # Two manifests whose construct ids carry the names: renaming the namespace or the RayService
        # replaces the resource, so CloudFormation applies the new objects and then deletes the old ones
        # (`kubectl delete`). Applied in place, the kubectl provider's prune would miss the old RayService
        # (kubectl's default prune allow-list has no custom resources) and it would keep the GPU nodes.
        # The Namespace (and its NetworkPolicies) are apart so that renaming only the RayService never
        # deletes the namespace or opens it up.
        self.namespace_manifest = eks.KubernetesManifest(
            self,
            f"Namespace-{settings.namespace}",
            cluster=cluster,
            manifest=[o for o in objects if namespace_scoped(o, settings)],
            overwrite=True,
        )
        self.ray_service = eks.KubernetesManifest(
            self,
            f"RayService-{settings.namespace}-{settings.ray_service_name}",
            cluster=cluster,
            manifest=[o for o in objects if not namespace_scoped(o, settings)],
            # Field ownership conflicts (someone kubectl-edited the RayService) are overwritten by the
            # template: the stack is the source of truth.
            overwrite=True,
        )
        self.ray_service.node.add_dependency(self.namespace_manifest)
        # The Secrets Manager CSI provider (an add-on) for the Hub token and the GCS store's token.
        for provider in addons.install(self, "serving", cluster=cluster, settings=settings).values():
            self.ray_service.node.add_dependency(provider)
        if worker_identity_needed(settings):
            for dependency in self._worker_access(cluster, settings):
                self.ray_service.node.add_dependency(dependency)
        if head_identity_needed(settings):
            self.ray_service.node.add_dependency(self._head_access(cluster, settings, gcs_store))

        # Create after, and so delete before, the operator (it owns the finalizers and the pods) and
        # both nodegroups (the pods must drain while their nodes still run).
        self.ray_service.node.add_dependency(self.kuberay)
        self.ray_service.node.add_dependency(system_nodegroup)
        self.ray_service.node.add_dependency(gpu_nodegroup)

        # KubeRay applies serveConfigV2 changes in place, but with upgradeStrategy None it ignores changes
        # to the cluster itself (image, Ray version, resources, worker count). This output changes exactly
        # when such a change is pending, so `cdk diff` shows it; apply it by re-creating this stack.
        CfnOutput(
            self,
            RAY_CLUSTER_FINGERPRINT_OUTPUT,
            value=self.chart.ray_cluster_fingerprint,
            description="Changes when the RayCluster must be re-created: destroy and deploy this stack to apply",
        )
        self.endpoint_manifest: eks.KubernetesManifest | None = None
        if endpoint.exposed:
            if load_balancer_controller is None:
                raise ValueError("SERVE_EXPOSURE beyond the cluster needs the load balancer controller's release")
            self._endpoint(
                cluster,
                settings,
                [o for o in self.chart.to_json() if o["kind"] in ENDPOINT_KINDS],
                load_balancer_controller,
            )
        if self.api_keys is not None:
            CfnOutput(
                self,
                "ApiKeysSecretArn",
                value=self.api_keys.secret_arn,
                description="The API keys (JSON: name -> key); `make api-key` prints one",
            )
        CfnOutput(
            self,
            "PortForwardCommand",
            value=(
                f"kubectl port-forward -n {settings.namespace} svc/{settings.serve_service_name}"
                f" {SERVE_PORT}:{SERVE_PORT}"
            ),
        )

    def _api_keys_secret(self, settings: Settings) -> secretsmanager.Secret:
        """The API keys, generated at deploy: the template holds the secret's name, never a key."""
        secret = secretsmanager.Secret(
            self,
            "ApiKeys",
            description=(
                f"{settings.cluster_name}: API keys of the Serve endpoint (JSON: name -> key; the Ray pods read it"
                " through the Secrets Store CSI driver)"
            ),
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps({}),
                generate_string_key=FIRST_API_KEY,
                password_length=API_KEY_LENGTH,
                exclude_punctuation=True,
            ),
        )
        nag.skip_checkov(
            secret,
            {
                "CKV_AWS_149": (
                    "Secrets Manager's AWS managed key: who may read the keys is decided by IAM (the Ray pods' two Pod"
                    " Identity roles); a customer managed key would add a key policy to keep in step with them and no"
                    " reader less."
                )
            },
        )
        nag.acknowledge(
            secret,
            "AwsSolutions-SMG4",
            "Rotated by its owner, not by a Lambda: `aws secretsmanager put-secret-value` with the new set of named"
            " keys (docs/endpoint.md); the CSI driver re-reads it every minute and the ingress takes the new file"
            " without a restart, so clients move at their pace.",
        )
        return secret

    def _endpoint(
        self, cluster: eks.ICluster, settings: Settings, objects: list[dict[str, Any]], controller: eks.HelmChart
    ) -> None:
        """The Ingress (after the controller, the namespace and the log bucket; deleted before them) and, with
        SERVE_HOSTED_ZONE_ID, the alias record of SERVE_HOSTNAME."""
        endpoint = settings.serve_endpoint
        self.endpoint_manifest = eks.KubernetesManifest(
            self, f"Endpoint-{settings.namespace}", cluster=cluster, manifest=objects, overwrite=True
        )
        self.endpoint_manifest.node.add_dependency(self.namespace_manifest)
        self.endpoint_manifest.node.add_dependency(controller)
        if self.access_logs is not None:
            # Elastic Load Balancing checks that it may write to the bucket when the controller turns the logs on.
            self.endpoint_manifest.node.add_dependency(self.access_logs)
        # The controller creates the load balancer: its DNS name is read back from the Ingress's status.
        address = serve_endpoint.load_balancer_dns_name(self, cluster, settings, objects, self.endpoint_manifest)
        scheme = "https" if endpoint.https else "http"
        CfnOutput(
            self,
            "LoadBalancerDnsName",
            value=address.value,
            description=f"The {endpoint.scheme} load balancer of the Serve endpoint",
        )
        CfnOutput(
            self,
            "EndpointUrl",
            value=f"{scheme}://{endpoint.hostname}/v1" if endpoint.hostname else f"{scheme}://{address.value}/v1",
        )
        if endpoint.hosted_zone_id:
            serve_endpoint.alias_record(self, settings, address.value)
        if self.access_logs is not None:
            CfnOutput(
                self,
                "AccessLogsBucket",
                value=self.access_logs.bucket_name,
                description="The load balancer's access logs (expire after 30 days)",
            )

    def _worker_access(self, cluster: eks.ICluster, settings: Settings) -> list[Construct]:
        """The GPU workers' Pod Identity role: it may read the Hugging Face token's secret (with the Secrets Manager
        CSI provider, an add-on) and the S3 prefix of the weights, each only when configured; and the mirror Job's."""
        namespace = settings.namespace
        account = worker_service_account(settings.ray_service_name)
        token, source = hf_token_of(settings), settings.model_s3
        reads = " and ".join(
            what
            for what, on in (
                ("the Hugging Face token", token),
                (f"the weights under {source.uri if source else ''}", source),
                ("the API keys", self.api_keys),
            )
            if on
        )
        # The logical IDs date from when the role only read the token: renamed, CloudFormation would create a
        # second association for the same service account before deleting the first, which EKS refuses.
        role, association = pod_identity_role(
            self,
            "HfTokenReaderRole",
            "HfTokenPodIdentity",
            cluster=cluster,
            namespace=namespace,
            service_account=account,
            description=f"EKS Pod Identity of {namespace}/{account}: reads {reads}",
        )
        needs: list[Construct] = [association]
        if self.api_keys is not None:
            self.api_keys.grant_read(role)
        if token is not None:
            role.add_to_policy(self._token_secret_statement(role, token))
        if source is not None:
            for statement in model_access.reader_statements(source, settings.model_source_kms_key_arn):
                role.add_to_policy(statement)
            model_access.acknowledge_prefix_wildcard(role, source)
            mirror, _ = model_access.mirror_writer_role(self, cluster=cluster, settings=settings)
            if token is not None:
                mirror.add_to_policy(self._token_secret_statement(mirror, token))
        return needs

    def _head_access(self, cluster: eks.ICluster, settings: Settings, store: GcsStore | None) -> Construct:
        """The head's Pod Identity role: it may read the GCS store's AUTH token and the API keys (each when there),
        nothing else."""
        account = head_service_account(settings.ray_service_name)
        reads = " and ".join(
            what for what, on in (("the GCS store's AUTH token", store), ("the API keys", self.api_keys)) if on
        )
        role, association = pod_identity_role(
            self,
            "HeadRole",
            "HeadPodIdentity",
            cluster=cluster,
            namespace=settings.namespace,
            service_account=account,
            description=f"EKS Pod Identity of {settings.namespace}/{account}: reads {reads}",
        )
        if store is not None:
            store.secret.grant_read(role)
        if self.api_keys is not None:
            self.api_keys.grant_read(role)
        return association

    @staticmethod
    def _token_secret_statement(role: iam.Role, token: HfToken) -> iam.PolicyStatement:
        # Secrets Manager appends a random 6-character suffix to a secret's ARN.
        secret_arn = (
            f"arn:{Aws.PARTITION}:secretsmanager:{Aws.REGION}:{Aws.ACCOUNT_ID}:secret:{token.secret_name}-??????"
        )
        nag.acknowledge(
            role,
            "AwsSolutions-IAM5",
            "The wildcard is the 6-character suffix Secrets Manager appends to the ARN of the one secret named by"
            " HF_TOKEN_SECRET_NAME.",
            applies_to=[
                f"Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:{token.secret_name}-??????"
            ],
        )
        return iam.PolicyStatement(
            actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"], resources=[secret_arn]
        )
