"""What changing each setting does to a deployed stack: the docs' "Changing a deployed stack" table (docs/day2.md).

`make preflight` enforces the refusals (preflight/redeploy.py, from the deployed templates and the
synthesized ones) and tests/test_day2.py checks the effects below on pairs of real synths.
"""

from __future__ import annotations

from typing import Final

IN_PLACE = "in place"
ROLLING = "rolling update"
REPLACEMENT = "replacement"
RECREATE = "RayCluster re-created"
REFUSED = "refused"
NEW = "new deployment"

_RECREATE_HOW = "`make diff` shows `RayClusterConfigFingerprint` changing; `make destroy STACKS=CLUSTER_NAME-serving && make deploy` (GPU nodes stay)"

# setting -> (effect, what happens or how to apply it)
CHANGE_EFFECTS: Final[dict[str, tuple[str, str]]] = {
    "CLUSTER_NAME": (NEW, "new stack names: a second deployment beside the first. `make destroy` the old one (with the old name) first"),
    "REGION": (NEW, "a second deployment in the other Region. `make destroy` the old one (with the old Region) first"),
    "K8S_VERSION": (
        ROLLING,
        "control plane in place, then the add-ons, then each nodegroup rolls. One minor version per deploy, alone: preflight refuses a skip, "
        "a downgrade, or a version change together with another nodegroup change. Run `make lookup` first (add-on versions)",
    ),
    "NAMESPACE": (REPLACEMENT, "new Namespace and RayService applied, then the old ones deleted; the model restarts (up to 30 minutes)"),
    "VPC_CIDR": (REFUSED, "replaces the VPC under the cluster. Keep it, or `make destroy` and deploy again"),
    "ENDPOINT_ACCESS": (
        IN_PLACE,
        "EKS updates the endpoint; to or from `public` the kubectl provider's Lambdas move out of or into the VPC (with their own security group whenever they are in it)",
    ),
    "PUBLIC_ACCESS_CIDRS": (IN_PLACE, "EKS updates the allow-list"),
    "ADMIN_PRINCIPAL_ARNS": (IN_PLACE, "access entries added or removed (each keyed by its ARN, so the others stay)"),
    "SYSTEM_NODEGROUP_NAME": (
        REPLACEMENT,
        "the new nodegroup starts beside the old one (its nodes count against the Standard quota meanwhile), then the old one goes",
    ),
    "SYSTEM_NODE_TYPE": (ROLLING, "a new launch template version: nodes replaced one at a time (up to two extra per AZ first)"),
    "SYSTEM_NODE_COUNT": (IN_PLACE, "nodegroup scaling"),
    "SYSTEM_ROOT_VOLUME_GIB": (ROLLING, "a new launch template version"),
    "GPU_NODEGROUP_NAME": (REFUSED, "unless parked: `GPU_NODE_COUNT=0 make deploy`, then rename with GPU_NODE_COUNT=0, then unpark"),
    "GPU_NODE_TYPE": (
        ROLLING,
        f"a new launch template version (GPU_UPDATE_STRATEGY), and the workers' resources change: {RECREATE}. {_RECREATE_HOW}. "
        "`make lookup` for the new type's AZs first",
    ),
    "GPU_NODE_COUNT": (IN_PLACE, "nodegroup scaling; 0 parks the GPUs, empty (or the count the replicas need) unparks"),
    "GPU_UPDATE_STRATEGY": (IN_PLACE, "the nodegroup's update configuration"),
    "GPU_ROOT_VOLUME_GIB": (ROLLING, "a new launch template version (GPU_UPDATE_STRATEGY)"),
    "GPU_AZ": (
        REFUSED,
        "the nodegroup's subnet is create-only and its name fixed. Park, deploy the new GPU_AZ with a new GPU_NODEGROUP_NAME and "
        "GPU_NODE_COUNT=0, then unpark (if the VPC's AZs change too, preflight refuses that as well: `make destroy` and deploy again)",
    ),
    "GPU_PLACEMENT_GROUP": (
        ROLLING,
        "a new launch template version (GPU_UPDATE_STRATEGY); `on` to `off` deletes the stack's placement group once the nodes have left it",
    ),
    "GPU_CAPACITY_RESERVATION_ID": (
        ROLLING,
        "a new launch template version: the nodes are replaced into the new reservation (or out of it). A Capacity Block nodegroup "
        "updates only at size 0: the preflight refuses the roll while nodes run in the block; park, deploy the change, unpark",
    ),
    "GPU_CAPACITY_RESERVATION_TYPE": (
        REFUSED,
        "the nodegroup's capacity type is create-only and its name fixed: unless parked, `GPU_NODE_COUNT=0 make deploy`, then change it "
        "with a new GPU_NODEGROUP_NAME and GPU_NODE_COUNT=0, then unpark",
    ),
    "DLC_IMAGE": (RECREATE, _RECREATE_HOW),
    "KUBERAY_VERSION": (
        IN_PLACE,
        "pinned to the CRDs in schemas/kuberay/; when a commit moves it, preflight refuses the deploy until `make kuberay-crds` "
        "has applied the new CRDs (Helm never upgrades them)",
    ),
    "KUBERAY_NAMESPACE": (
        REFUSED,
        "the chart's cluster-scoped objects have fixed names, so two releases cannot coexist: `make destroy STACKS=CLUSTER_NAME-system` "
        "(takes the serving stack, and with OBSERVABILITY=on the observability stack, with it; the GPU nodes stay), then deploy",
    ),
    "RAY_VERSION": (RECREATE, _RECREATE_HOW),
    "RAY_SERVICE_NAME": (
        REPLACEMENT,
        "new RayService applied, then the old one deleted (it would otherwise keep the GPU nodes). With HF_TOKEN_SECRET_NAME set the "
        "token's SecretProviderClass keeps its name, so the preflight refuses it: `make destroy STACKS=CLUSTER_NAME-serving` first",
    ),
    "MODEL_ID": (IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
    "MODEL_SOURCE": (IN_PLACE, "serveConfigV2: Ray Serve redeploys the application (new weights are downloaded)"),
    "PREFILL_REPLICAS": (IN_PLACE, "serveConfigV2, and KubeRay scales the prefill worker group (the GPU nodegroup follows when GPU_NODE_COUNT is empty)"),
    "DECODE_REPLICAS": (IN_PLACE, "serveConfigV2, and KubeRay scales the decode worker group (the GPU nodegroup follows when GPU_NODE_COUNT is empty)"),
    "TENSOR_PARALLEL_SIZE": (IN_PLACE, "serveConfigV2 (the engines' bundles), and KubeRay scales the worker groups when the node counts change"),
    "MAX_MODEL_LEN": (IN_PLACE, "serveConfigV2: Ray Serve redeploys the application"),
    "SERVE_CLIENT_NAMESPACES": (IN_PLACE, "the NetworkPolicy of the Serve port"),
    "METRICS_NAMESPACE": (IN_PLACE, "the NetworkPolicy of the metrics port"),
    "OBSERVABILITY": (
        RECREATE,
        "`on` adds the CLUSTER_NAME-observability stack and lets the managed collector's subnets reach the Ray pods' metrics port (NetworkPolicy); "
        f"the Ray workers give up a core and a GiB to the add-on's pods (and take them back with `off`): {_RECREATE_HOW}. Back to `off`: first `OBSERVABILITY=on make destroy STACKS=CLUSTER_NAME-observability` (a stack left out of the app is neither deleted by a deploy nor found by `cdk destroy`)",
    ),
    "HF_TOKEN_SECRET_NAME": (
        RECREATE,
        f"the CSI driver and Pod Identity are added in place; the workers' token volume is a RayCluster change: {_RECREATE_HOW}",
    ),
}


def change_table_markdown() -> str:
    rows = ["| Setting | Effect on a deployed stack | What happens, or how to apply it |", "|---|---|---|"]
    rows += [f"| `{name}` | {effect} | {how} |" for name, (effect, how) in CHANGE_EFFECTS.items()]
    return "\n".join(rows)
