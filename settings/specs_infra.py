"""The settings of the AWS side, declared once (see settings/specs.py): the cluster, its network, the nodes and
the GPU capacity. settings/specs.py puts them first in SPECS, in this order."""

from __future__ import annotations

from settings import versions
from settings.instance_types import BUILT_IN_GPU_TYPES
from settings.parsers import Choice, DnsLabel, Integer, TimeZone, Weekdays, WholeHour
from settings.spec_base import (
    _RECREATE_HOW,
    IN_PLACE,
    NEW,
    PREFLIGHT_ONLY,
    RECREATE,
    REFUSED,
    REPLACEMENT,
    ROLLING,
    SettingSpec,
    flip,
)

# The NetworkPolicies of the default configuration, which the cluster's name (a label) and the namespace reach.
_POLICY_NAMES = ("default-deny-ingress", "kuberay-operator-to-head", "metrics-collector", "ray-cluster-internal")
_NETWORK_POLICIES = tuple(f"k8s:NetworkPolicy/{name}" for name in (*_POLICY_NAMES, "serve-clients"))
# Every configuration's objects that both reach too: the ingress modules' ConfigMap.
_NAMED_OBJECTS = (*_NETWORK_POLICIES, "k8s:ConfigMap/{RAY_SERVICE_NAME}-serve-ingress")

# The schedule settings are read by the park workflow's decision (tools/park_schedule.py), on the default branch.
_SCHEDULE_HOW = "the park workflow reads it from the default branch at its next hourly run"

INFRA_SPECS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "CLUSTER_NAME",
        "ray-llm-multinode",
        "EKS cluster name; also the prefix of the stack names",
        "",
        parser=DnsLabel(40),
        ci_variable=True,
        change=(
            NEW,
            (
                "new stack names: a second deployment beside the first. `make destroy` the old one (with the old name)"
                " first"
            ),
        ),
        lands=(
            "k8s:DaemonSet/ray-image-prepull",
            "k8s:Namespace/inference",
            *_NAMED_OBJECTS,
            "k8s:RayService",
            "stack:cluster",
            "stack:gpu",
            "stack:network",
            "stack:serving",
            "stack:system",
        ),
        flip=flip("other-cluster"),
    ),
    SettingSpec(
        "REGION",
        "sa-east-1",
        "AWS Region of every stack",
        "an AWS commercial Region, e.g. us-east-2",
        ci_variable=True,
        change=(NEW, "a second deployment in the other Region. `make destroy` the old one (with the old Region) first"),
        lands=(
            "head",
            "k8s:DaemonSet/ray-image-prepull",
            "stack:cluster",
            "stack:gpu",
            "stack:network",
            "stack:serving",
            "workers:decode",
            "workers:prefill",
        ),
        flip=flip("us-east-2"),
    ),
    SettingSpec(
        "K8S_VERSION",
        "1.35",
        "Kubernetes version of the control plane and nodes",
        ", ".join(versions.SUPPORTED_KUBERNETES_VERSIONS),
        change=(
            ROLLING,
            (
                "control plane in place, then the add-ons, then each nodegroup rolls. One minor version per deploy,"
                " alone: preflight refuses a skip, a downgrade, or a version change together with another nodegroup"
                " change. Run `make lookup` first (add-on versions)"
            ),
        ),
        lands=("stack:cluster", "stack:gpu", "stack:system"),
        flip=flip("1.36"),
    ),
    SettingSpec(
        "NAMESPACE",
        "inference",
        "Namespace of the RayService",
        "",
        parser=DnsLabel(),
        change=(
            REPLACEMENT,
            "new Namespace and RayService applied, then the old ones deleted; the model restarts (up to 30 minutes)",
        ),
        lands=(
            "k8s:Namespace/inference",
            "k8s:Namespace/serving",
            *_NAMED_OBJECTS,
            "k8s:RayService",
            "stack:serving",
        ),
        flip=flip("serving"),
    ),
    SettingSpec(
        "VPC_CIDR",
        "10.0.0.0/16",
        "IPv4 range of the VPC (3 private /19 and 3 public /24 subnets)",
        "a private IPv4 CIDR, /16 or /17",
        change=(REFUSED, "replaces the VPC under the cluster. Keep it, or `make destroy` and deploy again"),
        lands=("stack:network",),
        flip=flip("10.1.0.0/16"),
    ),
    SettingSpec(
        "ENDPOINT_ACCESS",
        "public-and-private",
        "Where the Kubernetes API endpoint is reachable from",
        "",
        parser=Choice(("public-and-private", "private", "public")),
        ci_variable=True,
        change=(
            IN_PLACE,
            (
                "EKS updates the endpoint; to or from `public` the kubectl provider's Lambdas move out of or into the"
                " VPC (with their own security group whenever they are in it)"
            ),
        ),
        lands=("stack:cluster",),
        flip=flip("private"),
    ),
    SettingSpec(
        "PUBLIC_ACCESS_CIDRS",
        "",
        "Allow-list for the public API endpoint (empty = anywhere)",
        "comma-separated IPv4 CIDRs; needs ENDPOINT_ACCESS=public-and-private",
        ci_variable=True,
        change=(IN_PLACE, "EKS updates the allow-list"),
        lands=("stack:cluster",),
        flip=flip("203.0.113.0/24"),
    ),
    SettingSpec(
        "ADMIN_PRINCIPAL_ARNS",
        "",
        "IAM roles/users given cluster-admin access entries (CI deploy role, people)",
        "comma-separated IAM role or user ARNs",
        ci_variable=True,
        change=(IN_PLACE, "access entries added or removed (each keyed by its ARN, so the others stay)"),
        lands=("stack:cluster",),
        flip=flip("arn:aws:iam::123456789012:role/admin"),
    ),
    SettingSpec(
        "SYSTEM_NODEGROUP_NAME",
        "system-nodes",
        "Name of the CPU system nodegroup",
        "",
        parser=DnsLabel(),
        change=(
            REPLACEMENT,
            (
                "the new nodegroup starts beside the old one (its nodes count against the Standard quota meanwhile),"
                " then the old one goes"
            ),
        ),
        lands=("stack:system",),
        flip=flip("system-b"),
    ),
    SettingSpec(
        "SYSTEM_NODE_TYPE",
        "m7i.xlarge",
        "Instance type of the system nodes (operator, Ray head, CoreDNS)",
        "an x86_64 EC2 type with at least 4 vCPU and 16 GiB",
        change=(ROLLING, "a new launch template version: nodes replaced one at a time (up to two extra per AZ first)"),
        lands=("stack:system",),
        flip=flip("m7i.2xlarge"),
    ),
    SettingSpec(
        "SYSTEM_NODE_COUNT",
        "1",
        "Number of system nodes",
        "",
        parser=Integer(1, 10),
        change=(IN_PLACE, "nodegroup scaling"),
        lands=("k8s:PodDisruptionBudget/kuberay-operator", "stack:system"),
        flip=flip("2"),
    ),
    SettingSpec(
        "SYSTEM_ROOT_VOLUME_GIB",
        "100",
        "Encrypted gp3 root volume of each system node (the Ray head pulls the ~20 GB image)",
        "",
        parser=Integer(80, 1000),
        change=(ROLLING, "a new launch template version"),
        lands=("stack:system",),
        flip=flip("120"),
    ),
    SettingSpec(
        "GPU_NODEGROUP_NAME",
        "gpu-workers",
        "Name of the EFA GPU nodegroup",
        "",
        parser=DnsLabel(),
        change=(
            REFUSED,
            "unless parked: `GPU_NODE_COUNT=0 make deploy`, then rename with GPU_NODE_COUNT=0, then unpark",
        ),
        lands=("stack:gpu",),
        flip=flip("gpu-b"),
    ),
    SettingSpec(
        "GPU_NODE_TYPE",
        "g6.8xlarge",
        "Instance type of the GPU nodes",
        "an x86_64 NVIDIA GPU type with EFA: " + ", ".join(BUILT_IN_GPU_TYPES) + ", or another after `make lookup`",
        change=(
            ROLLING,
            (
                f"a new launch template version (GPU_UPDATE_STRATEGY), and the workers' resources change: {RECREATE}."
                f" {_RECREATE_HOW}. `make lookup` for the new type's AZs first"
            ),
        ),
        lands=("stack:gpu", "stack:serving", "workers:decode", "workers:prefill"),
        flip=flip("g6.16xlarge"),
    ),
    SettingSpec(
        "GPU_NODE_COUNT",
        "",
        "Number of GPU nodes; empty = what the replicas need (prefill nodes + decode nodes); 0 parks the GPUs and keeps"
        " everything else",
        "empty, 0, or the nodes the replicas need",
        change=(IN_PLACE, "nodegroup scaling; 0 parks the GPUs, empty (or the count the replicas need) unparks"),
        lands=("stack:gpu",),
        flip=flip("0"),
    ),
    SettingSpec(
        "PARK_AT",
        "02:00",
        "When the park workflow parks the GPUs each day (PARK_TIME_ZONE); empty = no scheduled park",
        parser=WholeHour(),
        ci_variable=True,
        change=(PREFLIGHT_ONLY, _SCHEDULE_HOW),
        flip=flip("22:00"),
    ),
    SettingSpec(
        "UNPARK_AT",
        "",
        "When the park workflow unparks the GPUs on UNPARK_DAYS (PARK_TIME_ZONE), to the approved GPU_NODE_COUNT; about"
        " 20 minutes before the first request can be answered; empty = no scheduled unpark",
        parser=WholeHour(),
        ci_variable=True,
        change=(PREFLIGHT_ONLY, _SCHEDULE_HOW),
        flip=flip("07:00"),
    ),
    SettingSpec(
        "UNPARK_DAYS",
        "mon-fri",
        "The days UNPARK_AT unparks on (in PARK_TIME_ZONE)",
        parser=Weekdays(),
        ci_variable=True,
        change=(PREFLIGHT_ONLY, _SCHEDULE_HOW),
        flip=flip("mon-sun", given={"UNPARK_AT": "07:00"}),
    ),
    SettingSpec(
        "PARK_TIME_ZONE",
        "UTC",
        "The time zone of PARK_AT, UNPARK_AT, UNPARK_DAYS and the KEEP_GPUS_UNTIL date",
        parser=TimeZone(),
        ci_variable=True,
        change=(PREFLIGHT_ONLY, _SCHEDULE_HOW),
        flip=flip("Europe/Berlin"),
    ),
    SettingSpec(
        "GPU_UPDATE_STRATEGY",
        "minimal",
        "How EKS replaces GPU nodes on a rolling update (new launch template, AMI or Kubernetes version)",
        "minimal (terminate, then launch: no extra GPU quota or placement-group room), default (launch 2 extra nodes"
        " first)",
        parser=Choice(("minimal", "default")),
        change=(IN_PLACE, "the nodegroup's update configuration"),
        lands=("stack:gpu",),
        flip=flip("default"),
    ),
    SettingSpec(
        "GPU_ROOT_VOLUME_GIB",
        "200",
        "Encrypted gp3 root volume of each GPU node (image ~20 GB, weights ~18 GiB)",
        "",
        parser=Integer(100, 2000),
        change=(ROLLING, "a new launch template version (GPU_UPDATE_STRATEGY)"),
        lands=("stack:gpu",),
        flip=flip("300"),
    ),
    SettingSpec(
        "GPU_AZ",
        "",
        "AZ of the GPU nodes (EFA cannot cross AZs); empty = the cached look-up, else REGION + 'a'",
        "an AZ of REGION that offers GPU_NODE_TYPE",
        ci_variable=True,
        change=(
            REFUSED,
            (
                "the nodegroup's subnet is create-only and its name fixed. Park, deploy the new GPU_AZ with a new"
                " GPU_NODEGROUP_NAME and GPU_NODE_COUNT=0, then unpark (if the VPC's AZs change too, preflight refuses"
                " that as well: `make destroy` and deploy again)"
            ),
        ),
        lands=("stack:gpu", "stack:network"),
        flip=flip("sa-east-1c"),
    ),
    SettingSpec(
        "GPU_PLACEMENT_GROUP",
        "on",
        "Cluster placement group of the GPU nodes: on = one the GPU stack creates (lowest latency between them, but all"
        " nodes must fit one spot: InsufficientInstanceCapacity is likelier), off = none, or the name of an existing"
        " cluster placement group (the one a capacity reservation was made in)",
        "on, off, or a placement group name; not on with GPU_CAPACITY_RESERVATION_ID",
        change=(
            ROLLING,
            (
                "a new launch template version (GPU_UPDATE_STRATEGY); `on` to `off` deletes the stack's placement group"
                " once the nodes have left it"
            ),
        ),
        lands=("stack:gpu",),
        flip=flip("off"),
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_ID",
        "",
        "EC2 capacity reservation the GPU nodes launch into (an On-Demand Capacity Reservation or a Capacity Block for"
        " ML); empty = none",
        "empty or a reservation ID cr-<17 hex>, in GPU_AZ, of GPU_NODE_TYPE, active, with free instances for the nodes"
        " (checked by the preflight)",
        change=(
            ROLLING,
            (
                "a new launch template version: the nodes are replaced into the new reservation (or out of it). A"
                " Capacity Block nodegroup updates only at size 0: the preflight refuses the roll while nodes run in"
                " the block; park, deploy the change, unpark"
            ),
        ),
        lands=("stack:gpu",),
        flip=flip("cr-0123456789abcdef0", given={"GPU_PLACEMENT_GROUP": "off"}),
    ),
    SettingSpec(
        "GPU_CAPACITY_RESERVATION_TYPE",
        "on-demand",
        "What GPU_CAPACITY_RESERVATION_ID is: on-demand (a Capacity Reservation) or capacity-block (a Capacity Block"
        " for ML: the nodegroup's capacity type CAPACITY_BLOCK)",
        "needs GPU_CAPACITY_RESERVATION_ID for capacity-block",
        parser=Choice(("on-demand", "capacity-block")),
        change=(
            REFUSED,
            (
                "the nodegroup's capacity type is create-only and its name fixed: unless parked, `GPU_NODE_COUNT=0 make"
                " deploy`, then change it with a new GPU_NODEGROUP_NAME and GPU_NODE_COUNT=0, then unpark"
            ),
        ),
        lands=("stack:gpu",),
        flip=flip(
            "capacity-block",
            given={"GPU_PLACEMENT_GROUP": "off", "GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0"},
        ),
    ),
)
