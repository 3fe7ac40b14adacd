"""The settings of the OpenAI endpoint, declared once (see settings/specs.py): who may call it and from where,
its load balancer, certificate and DNS name, API keys and access logs. settings/specs.py puts them after the
engines' settings in SPECS, in this order."""

from __future__ import annotations

from settings.spec_base import _RECREATE_HOW, IN_PLACE, RECREATE, SettingSpec, flip

ENDPOINT_SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "SERVE_CLIENT_NAMESPACES",
        "",
        "Namespaces whose pods may call the OpenAI endpoint (port 8000; Ray's token does not cover it); empty ="
        " NAMESPACE only",
        "comma-separated namespace names",
        change=(IN_PLACE, "the NetworkPolicy of the Serve port"),
        lands=("k8s:NetworkPolicy/serve-clients",),
        flip=flip("apps"),
    ),
    SettingSpec(
        "SERVE_EXPOSURE",
        "cluster",
        "Where the OpenAI endpoint is reachable from: `cluster` (pods of SERVE_CLIENT_NAMESPACES, `kubectl"
        " port-forward`), `internal` (an Application Load Balancer with private addresses, for the VPC and networks"
        " routed to it) or `internet-facing` (public addresses); both in the VPC's public /24 subnets;"
        " docs/endpoint.md",
        "cluster, internal or internet-facing; internet-facing needs SERVE_CERTIFICATE_ARN and SERVE_ALLOWED_CIDRS",
        change=(
            RECREATE,
            (
                "the load balancer controller (system stack) and the Ingress (serving stack) come in place; between"
                " internal and internet-facing a new Ingress (RAY_SERVICE_NAME-serve-SCHEME) gets a new load balancer"
                " (a new DNS name, which the alias record follows) and the old one is deleted. Back to `cluster`:"
                " first `kubectl delete ingress -n NAMESPACE RAY_SERVICE_NAME-serve-SCHEME` (the controller, still"
                " running, deletes the load balancer; the system stack would otherwise uninstall it before the serving"
                " stack deletes the Ingress, whose finalizer would then never clear). Turning API keys on or off with"
                f" it mounts their volume on the Ray pods: {_RECREATE_HOW}"
            ),
        ),
        ci_variable=True,
        lands=(
            "head",
            "k8s:Ingress/{RAY_SERVICE_NAME}-serve-internal",
            "k8s:NetworkPolicy/load-balancer-to-serve",
            "k8s:SecretProviderClass/serve-api-keys",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-head",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-worker",
            "serve:app",
            "stack:network",
            "stack:serving",
            "stack:system",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("internal", needs={"SERVE_CERTIFICATE_ARN": "none"}),
    ),
    SettingSpec(
        "SERVE_CERTIFICATE_ARN",
        "",
        "ACM certificate of the load balancer's HTTPS listener (the only listener); `none`: plain HTTP, internal only",
        "an ACM certificate ARN in REGION (the preflight checks it is ISSUED and covers SERVE_HOSTNAME), `none` with"
        " SERVE_EXPOSURE=internal, empty with SERVE_EXPOSURE=cluster",
        change=(IN_PLACE, "the listener's certificate"),
        ci_variable=True,
        lands=("k8s:Ingress/{RAY_SERVICE_NAME}-serve-internal", "stack:serving"),
        flip=flip(
            "arn:aws:acm:sa-east-1:123456789012:certificate/12345678-1234-1234-1234-123456789012",
            given={"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"},
        ),
    ),
    SettingSpec(
        "SERVE_HOSTNAME",
        "",
        "DNS name clients use for the endpoint (the Ingress's host; with SERVE_HOSTED_ZONE_ID an alias record of the"
        " load balancer, the zone's apex too)",
        "empty or a fully qualified domain name",
        change=(IN_PLACE, "the Ingress's host rule and the alias record"),
        ci_variable=True,
        lands=("k8s:Ingress/{RAY_SERVICE_NAME}-serve-internal", "stack:serving"),
        flip=flip("llm.example.com", given={"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"}),
    ),
    SettingSpec(
        "SERVE_HOSTED_ZONE_ID",
        "",
        "Route 53 hosted zone in which to create SERVE_HOSTNAME's alias record (empty: you point the name at the load"
        " balancer yourself)",
        "empty or a hosted zone ID (Z...), only with SERVE_HOSTNAME (the preflight checks the name is in the zone), in"
        " a Region settings/load_balancer_zones.py lists",
        change=(IN_PLACE, "the alias record"),
        ci_variable=True,
        lands=("stack:serving",),
        flip=flip(
            "Z0123456789ABCDEFGHIJ",
            given={"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none", "SERVE_HOSTNAME": "llm.example.com"},
        ),
    ),
    SettingSpec(
        "SERVE_ALLOWED_CIDRS",
        "",
        "Sources the load balancer's security group admits (empty: the VPC's CIDR for internal; required for"
        " internet-facing)",
        "comma-separated IPv4 CIDRs, empty with SERVE_EXPOSURE=cluster",
        change=(IN_PLACE, "the load balancer's security group rules"),
        ci_variable=True,
        lands=("k8s:Ingress/{RAY_SERVICE_NAME}-serve-internal", "stack:serving"),
        flip=flip("10.2.0.0/16", given={"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"}),
    ),
    SettingSpec(
        "SERVE_API_KEYS",
        "",
        "The Serve ingress requires `Authorization: Bearer KEY` with a key from Secrets Manager (generated at deploy;"
        " `make api-key`); empty: on whenever SERVE_EXPOSURE leaves the cluster, off for cluster",
        "on, off or empty; off is refused with SERVE_EXPOSURE internal or internet-facing",
        change=(
            RECREATE,
            (
                "the serve config's ingress in place; the keys' volume on the Ray pods is a RayCluster change:"
                f" {_RECREATE_HOW}"
            ),
        ),
        lands=(
            "head",
            "k8s:SecretProviderClass/serve-api-keys",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-head",
            "k8s:ServiceAccount/{RAY_SERVICE_NAME}-worker",
            "serve:app",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("on"),
    ),
    SettingSpec(
        "SERVE_ACCESS_LOGS",
        "off",
        "The load balancer's access logs, into an S3 bucket of the serving stack (SSE-S3, TLS only, expiring after 30"
        " days; deleted with the stack); docs/endpoint.md",
        "on or off; on needs SERVE_EXPOSURE internal or internet-facing",
        change=(
            IN_PLACE,
            (
                "the bucket and the load balancer's attributes; back to off deletes the bucket and the logs in it (copy"
                " them first)"
            ),
        ),
        ci_variable=True,
        lands=("k8s:Ingress/{RAY_SERVICE_NAME}-serve-internal", "stack:serving"),
        flip=flip("on", given={"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none"}),
    ),
)
