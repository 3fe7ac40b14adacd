"""The Serve endpoint beyond the cluster (SERVE_EXPOSURE internal or internet-facing) and its API keys (SERVE_API_KEYS).

The route: an Ingress of the AWS Load Balancer Controller's class (`alb`) to KubeRay's Serve Service, target type ip
(the load balancer connects to the pods' addresses; the Service's endpoints are the pods whose proxy is healthy), in
the VPC's public /24s whatever the scheme: an internal load balancer there has private addresses only, and no node or
pod has an address in those subnets, so the NetworkPolicy that admits the load balancer to the Serve port admits it
alone. HTTPS only with a TLS 1.3/1.2 policy; the health check is Serve's own /-/healthz, which its proxy answers
before any application route (no key); an idle timeout and a deregistration delay as long as the longest response.

The keys: one Secrets Manager secret (a JSON object of name -> key) read by the Secrets Store CSI driver with the
Ray pods' EKS Pod Identity and mounted as a file on every Ray pod (an ingress replica may run on any of them). The
ingress modules (data/serve_pd_guard.py and data/serve_auth_ingress.py) are a ConfigMap mounted on every Ray pod in
every configuration (the PD guard is always the ingress). Neither a template nor a manifest holds a key: they name
the secret.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

import cdk8s
import cdk8s_plus_28 as kplus
import yaml
from constructs import Construct

from imports.io.ray import (
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesConfigMap,
    RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesCsi,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesConfigMap,
    RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesCsi,
)
from k8s_constructs.ray_facts import SERVE_PORT
from k8s_constructs.serve_config import API_KEYS_DIR, INGRESS_MODULE_DIR, INGRESS_MODULE_FILES
from k8s_constructs.synced_secrets import CSI_DRIVER
from settings import Settings
from settings.endpoint import deregistration_delay_s, idle_timeout_s

INGRESS_CLASS: Final = "alb"  # the controller chart's IngressClass (stacks/addons/aws_load_balancer_controller.py)
HEALTH_PATH: Final = "/-/healthz"  # Ray Serve's proxy answers it itself (ray/serve/_private/proxy_request_response.py)
# A TLS 1.3 and 1.2 policy of Elastic Load Balancing (docs: "Security policies for your Application Load Balancer").
TLS_POLICY: Final = "ELBSecurityPolicy-TLS13-1-2-Res-PQ-2025-09"
# The ingress modules' volume keeps the name it had when the API-key module was their only file; their ConfigMap is
# one per RayService (it is in the RayService's manifest: a rename adds the new one before it deletes the old one).
AUTH_CONFIG_MAP_SUFFIX: Final = "serve-ingress"
KEYS_PROVIDER_CLASS: Final = "serve-api-keys"
KEYS_FILE: Final = "api-keys.json"
AUTH_MODULE_VOLUME: Final = "serve-auth-ingress"
KEYS_VOLUME: Final = "serve-api-keys"
# Stand-ins when a chart is built without the deployed resources (dist/, the offline validators).
PLACEHOLDER_KEYS_SECRET: Final = "SERVE_API_KEYS_SECRET_ARN"
PLACEHOLDER_SUBNETS: Final = ("PUBLIC_SUBNET_ID_1", "PUBLIC_SUBNET_ID_2")
PLACEHOLDER_LOG_BUCKET: Final = "SERVE_ACCESS_LOG_BUCKET"
ACCESS_LOG_PREFIX: Final = "alb"  # the load balancer writes under BUCKET/alb/AWSLogs/ACCOUNT/
# The ALB's name: at most 32 characters, letters, digits and hyphens, never starting with "internal-".
_LOAD_BALANCER_NAME_MAX: Final = 32
_NAME_DIGEST: Final = 8
# Where the controller reports the load balancer it made, on the Ingress (read back at deploy and by make endpoint).
DNS_NAME_PATH: Final = ".status.loadBalancer.ingress[0].hostname"


def ingress_name(settings: Settings) -> str:
    """One Ingress per scheme: the controller replaces the load balancer when the scheme changes, and a new
    Ingress has no status until the new one exists, so the DNS name read back from it is never the old one's."""
    return f"{settings.ray_service_name}-serve-{settings.serve_endpoint.scheme}"


def load_balancer_name(settings: Settings) -> str:
    """The load balancer's name (`alb.ingress.kubernetes.io/load-balancer-name`), which the controller's role is
    scoped to: the cluster's name and a digest of what identifies this endpoint (two Ingresses, two names)."""
    identity = "/".join((settings.cluster_name, settings.namespace, ingress_name(settings)))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_NAME_DIGEST]
    prefix = settings.cluster_name[: _LOAD_BALANCER_NAME_MAX - _NAME_DIGEST - 1].strip("-")
    name = f"{prefix}-{digest}"
    return f"{digest}-{prefix}" if name.startswith("internal-") else name


@dataclass(frozen=True)
class EndpointRefs:
    """The deployment's own resources the objects name (tokens in the serving stack, placeholders elsewhere)."""

    keys_secret_arn: str = PLACEHOLDER_KEYS_SECRET
    public_subnet_ids: tuple[str, ...] = PLACEHOLDER_SUBNETS
    access_log_bucket: str = PLACEHOLDER_LOG_BUCKET


def ingress_annotations(
    settings: Settings, subnet_ids: tuple[str, ...], log_bucket: str = PLACEHOLDER_LOG_BUCKET
) -> dict[str, str]:
    endpoint = settings.serve_endpoint
    listen = [{"HTTPS": 443}] if endpoint.https else [{"HTTP": 80}]
    attributes = {
        "idle_timeout.timeout_seconds": str(idle_timeout_s(settings.max_model_len)),
        "routing.http.drop_invalid_header_fields.enabled": "true",
        "deletion_protection.enabled": "false",  # `make destroy` deletes it with the Ingress
    }
    # Said either way: the controller changes only the attributes the annotation names, so logs turned off must say so.
    attributes["access_logs.s3.enabled"] = "true" if endpoint.access_logs else "false"
    if endpoint.access_logs:
        attributes |= {"access_logs.s3.bucket": log_bucket, "access_logs.s3.prefix": ACCESS_LOG_PREFIX}
    annotations = {
        "alb.ingress.kubernetes.io/load-balancer-name": load_balancer_name(settings),
        "alb.ingress.kubernetes.io/scheme": endpoint.scheme,
        "alb.ingress.kubernetes.io/target-type": "ip",
        "alb.ingress.kubernetes.io/subnets": ",".join(subnet_ids),
        "alb.ingress.kubernetes.io/listen-ports": json.dumps(listen, separators=(",", ":")),
        "alb.ingress.kubernetes.io/inbound-cidrs": ",".join(endpoint.allowed_cidrs),
        "alb.ingress.kubernetes.io/backend-protocol": "HTTP",
        "alb.ingress.kubernetes.io/healthcheck-path": HEALTH_PATH,
        "alb.ingress.kubernetes.io/healthcheck-port": "traffic-port",
        "alb.ingress.kubernetes.io/success-codes": "200",
        "alb.ingress.kubernetes.io/load-balancer-attributes": ",".join(f"{k}={v}" for k, v in attributes.items()),
        "alb.ingress.kubernetes.io/target-group-attributes": (
            f"deregistration_delay.timeout_seconds={deregistration_delay_s(settings.max_model_len)}"
        ),
        "alb.ingress.kubernetes.io/tags": f"project=ray-llm-eks-pd,cluster={settings.cluster_name}",
    }
    if endpoint.https:
        annotations["alb.ingress.kubernetes.io/certificate-arn"] = endpoint.certificate_arn
        annotations["alb.ingress.kubernetes.io/ssl-policy"] = TLS_POLICY
    return annotations


# What leaves the cluster: the OpenAI API. Every other path (Serve's /-/routes, the ingress's /docs, /tokenize,
# /detokenize) gets the controller's default, a fixed 404 at the load balancer. Its health check is sent to the
# targets directly and needs no rule.
API_PREFIX: Final = "/v1"
# With API keys, a request without a bearer token is refused by the load balancer itself (a fixed 401 in the
# ingress's error shape), so keyless floods never reach Python; one with a token goes on to the ingress, which
# checks it.
MISSING_KEY_ACTION: Final = "missing-api-key"
BEARER_HEADER_VALUE: Final = "Bearer *"  # ALB matches header values with wildcards, case-insensitively
MISSING_KEY_BODY: Final = json.dumps(
    {
        "error": {
            "message": "Missing API key: send `Authorization: Bearer KEY` (make api-key prints how to get one).",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    },
    separators=(",", ":"),
)


def api_paths(settings: Settings) -> list[dict[str, Any]]:
    """The Ingress's paths: /v1 to the Serve Service (with keys: only with a bearer token, else the fixed 401)."""
    serve = {"service": {"name": settings.serve_service_name, "port": {"number": SERVE_PORT}}}
    paths = [{"path": API_PREFIX, "pathType": "Prefix", "backend": serve}]
    if settings.serve_endpoint.api_keys:
        refuse = {"service": {"name": MISSING_KEY_ACTION, "port": {"name": "use-annotation"}}}
        paths.append({"path": API_PREFIX, "pathType": "Prefix", "backend": refuse})
    return paths


def api_key_annotations(settings: Settings) -> dict[str, str]:
    """The controller's conditions on the Serve path and the fixed 401 action (its ingress annotations)."""
    if not settings.serve_endpoint.api_keys:
        return {}
    condition = [
        {
            "field": "http-header",
            "httpHeaderConfig": {"httpHeaderName": "Authorization", "values": [BEARER_HEADER_VALUE]},
        }
    ]
    action = {
        "type": "fixed-response",
        "fixedResponseConfig": {
            "contentType": "application/json",
            "statusCode": "401",
            "messageBody": MISSING_KEY_BODY,
        },
    }
    return {
        f"alb.ingress.kubernetes.io/conditions.{settings.serve_service_name}": json.dumps(
            condition, separators=(",", ":")
        ),
        f"alb.ingress.kubernetes.io/actions.{MISSING_KEY_ACTION}": json.dumps(action, separators=(",", ":")),
    }


class ServeIngress(Construct):
    """The Ingress of the Serve Service: /v1 to port 8000 (with keys: only with a bearer token), nothing else."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, refs: EndpointRefs) -> None:
        super().__init__(scope, construct_id)
        rule: dict[str, Any] = {"http": {"paths": api_paths(settings)}}
        if settings.serve_endpoint.hostname:
            rule = {"host": settings.serve_endpoint.hostname, **rule}
        self.api_object = cdk8s.ApiObject(
            self,
            "Resource",
            api_version="networking.k8s.io/v1",
            kind="Ingress",
            metadata=cdk8s.ApiObjectMetadata(
                name=ingress_name(settings),
                namespace=settings.namespace,
                annotations={
                    **ingress_annotations(settings, refs.public_subnet_ids, refs.access_log_bucket),
                    **api_key_annotations(settings),
                },
            ),
        )
        self.api_object.add_json_patch(
            cdk8s.JsonPatch.add("/spec", {"ingressClassName": INGRESS_CLASS, "rules": [rule]})
        )


class IngressModules(Construct):
    """The ingress modules' ConfigMap (INGRESS_MODULE_FILES), in every configuration."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings) -> None:
        super().__init__(scope, construct_id)
        self.config_map = kplus.ConfigMap(
            self,
            "Module",
            metadata=cdk8s.ApiObjectMetadata(
                name=module_config_map(settings.ray_service_name), namespace=settings.namespace
            ),
        )
        for module in INGRESS_MODULE_FILES:
            self.config_map.add_data(module.name, module.read_text())


class ApiKeyObjects(Construct):
    """The keys' SecretProviderClass (mounted as files, not synced to a Secret); `head_account`: the head's
    ServiceAccount (its Pod Identity reads the keys) when nothing else makes it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        refs: EndpointRefs,
        head_account: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        objects = [{"objectName": refs.keys_secret_arn, "objectType": "secretsmanager", "objectAlias": KEYS_FILE}]
        self.provider_class = cdk8s.ApiObject(
            self,
            "Keys",
            api_version="secrets-store.csi.x-k8s.io/v1",
            kind="SecretProviderClass",
            metadata=cdk8s.ApiObjectMetadata(name=KEYS_PROVIDER_CLASS, namespace=settings.namespace),
        )
        self.provider_class.add_json_patch(
            cdk8s.JsonPatch.add(
                "/spec",
                {
                    "provider": "aws",
                    "parameters": {
                        "region": settings.region,
                        "usePodIdentity": "true",
                        "objects": yaml.safe_dump(objects, sort_keys=False),
                    },
                },
            )
        )
        if head_account:
            kplus.ServiceAccount(
                self,
                "HeadServiceAccount",
                metadata=cdk8s.ApiObjectMetadata(name=head_account, namespace=settings.namespace),
            )


def module_config_map(ray_service_name: str) -> str:
    return f"{ray_service_name}-{AUTH_CONFIG_MAP_SUFFIX}"


def pod_volumes(ray_service_name: str, api_keys: bool) -> list[dict[str, Any]]:
    """The volumes every Ray pod mounts: the ingress modules, and the keys with API keys on (as Kubernetes JSON; each
    group's typed class takes it)."""
    module = {"name": AUTH_MODULE_VOLUME, "configMap": {"name": module_config_map(ray_service_name)}}
    if not api_keys:
        return [module]
    return [
        module,
        {
            "name": KEYS_VOLUME,
            "csi": {
                "driver": CSI_DRIVER,
                "readOnly": True,
                "volumeAttributes": {"secretProviderClass": KEYS_PROVIDER_CLASS},
            },
        },
    ]


def pod_mounts(api_keys: bool) -> list[dict[str, Any]]:
    module = {"name": AUTH_MODULE_VOLUME, "mountPath": INGRESS_MODULE_DIR, "readOnly": True}
    return [module, {"name": KEYS_VOLUME, "mountPath": API_KEYS_DIR, "readOnly": True}] if api_keys else [module]


# --- The ingress modules (always) and SERVE_API_KEYS' keys on every Ray pod (an ingress replica may run on any) -------


def head_key_volumes(s: Settings) -> list[RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes]:
    return [
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes(
            name=v["name"],
            config_map=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesConfigMap(
                name=v["configMap"]["name"]
            ),
        )
        if "configMap" in v
        else RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumes(
            name=v["name"],
            csi=RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecVolumesCsi(
                driver=v["csi"]["driver"], read_only=True, volume_attributes=v["csi"]["volumeAttributes"]
            ),
        )
        for v in pod_volumes(s.ray_service_name, s.serve_endpoint.api_keys)
    ]


def head_key_mounts(s: Settings) -> list[RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts]:
    return [
        RayServiceSpecRayClusterConfigHeadGroupSpecTemplateSpecContainersVolumeMounts(
            name=m["name"], mount_path=m["mountPath"], read_only=True
        )
        for m in pod_mounts(s.serve_endpoint.api_keys)
    ]


def worker_key_volumes(s: Settings) -> list[RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes]:
    return [
        RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes(
            name=v["name"],
            config_map=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesConfigMap(
                name=v["configMap"]["name"]
            ),
        )
        if "configMap" in v
        else RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumes(
            name=v["name"],
            csi=RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecVolumesCsi(
                driver=v["csi"]["driver"], read_only=True, volume_attributes=v["csi"]["volumeAttributes"]
            ),
        )
        for v in pod_volumes(s.ray_service_name, s.serve_endpoint.api_keys)
    ]


def worker_key_mounts(
    s: Settings,
) -> list[RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts]:
    return [
        RayServiceSpecRayClusterConfigWorkerGroupSpecsTemplateSpecContainersVolumeMounts(
            name=m["name"], mount_path=m["mountPath"], read_only=True
        )
        for m in pod_mounts(s.serve_endpoint.api_keys)
    ]
