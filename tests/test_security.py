"""Who can reach the Ray cluster: Ray's token authentication on the RayCluster, the VPC CNI enforcing
NetworkPolicies, and the policies' connectivity computed by a tool written by others — np-guard's
network-config-analyzer (`nca`, in an environment of its own: it pins PyYAML and networkx versions that
conflict with this one's) — over the synthesized policies and pods of the real shape."""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO, Synth, settings_for
from tests.test_serving import _ray_service, deployed_manifest
from tests.validators import crd_errors, kuberay_cluster_errors

NCA = REPO / ".nca-venv" / "bin" / "nca"


def test_the_ray_cluster_uses_token_authentication(default_synth: Synth) -> None:
    cluster = _ray_service(default_synth)["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}
    assert crd_errors(_ray_service(default_synth)) == []
    assert kuberay_cluster_errors(cluster) == []
    # KubeRay's own rule (validation.go): token mode needs Ray >= 2.52.0, which RAY_VERSION enforces.
    assert kuberay_cluster_errors({**cluster, "rayVersion": "2.51.0"}) == [
        "authOptions.mode is 'token' but minimum Ray version is 2.52.0, got 2.51.0"
    ]


def test_the_vpc_cni_enforces_network_policies(default_synth: Synth) -> None:
    (vpc_cni,) = [
        r
        for r in default_synth.resources("cluster", "AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "vpc-cni"
    ]
    assert json.loads(vpc_cni["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}


def test_network_policies_pass_strict_kubernetes_validation(default_synth: Synth) -> None:
    policies = [o for o in deployed_manifest(default_synth) if o["kind"] == "NetworkPolicy"]
    assert [p["metadata"]["name"] for p in policies] == [
        "default-deny-ingress",
        "ray-cluster-internal",
        "kuberay-operator-to-head",
        "serve-clients",
        "metrics-collector",
    ]
    for policy in policies:
        kubernetes_validate.validate(policy, default_synth.settings.kubernetes_version, strict=True)


# --- connectivity, computed by nca ----------------------------------------------------------------------


def _pod(namespace: str, name: str, labels: dict[str, str], ports: dict[str, int]) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "example.com/image:1",
        "ports": [{"name": k, "containerPort": v} for k, v in ports.items()],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [container]},
    }


RAY_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000, "metrics": 8080, "nixl": 20000}


def _world(manifest: list[dict[str, Any]], settings: Any) -> list[dict[str, Any]]:
    """The synthesized policies, plus the namespaces and pods as KubeRay and the others would make them."""
    ns = settings.namespace
    ray = {"ray.io/is-ray-node": "yes", "ray.io/cluster": f"{settings.ray_service_name}-x7k2p"}
    pods = [
        _pod(ns, "head", {**ray, "ray.io/node-type": "head", "ray.io/group": "headgroup"}, RAY_PORTS),
        _pod(ns, "prefill-worker", {**ray, "ray.io/node-type": "worker", "ray.io/group": "prefill"}, RAY_PORTS),
        _pod(ns, "decode-worker", {**ray, "ray.io/node-type": "worker", "ray.io/group": "decode"}, RAY_PORTS),
        _pod(ns, "client", {"app": "client"}, {}),
        _pod(settings.kuberay_namespace, "operator", {"app.kubernetes.io/name": "kuberay-operator"}, {}),
        _pod(settings.metrics_namespace, "collector", {"app": "prometheus"}, {}),
        _pod("apps", "client", {"app": "client"}, {}),
        _pod("default", "attacker", {"app": "attacker"}, {}),
    ]
    names = {ns, settings.kuberay_namespace, settings.metrics_namespace, "apps", "default"}
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}}
        for n in sorted(names)
        if n != ns
    ]
    (own,) = [o for o in manifest if o["kind"] == "Namespace"]
    own = {
        **own,
        "metadata": {
            **own["metadata"],
            "labels": {**own["metadata"].get("labels", {}), "kubernetes.io/metadata.name": ns},
        },
    }
    return [own, *namespaces, *pods, *[o for o in manifest if o["kind"] == "NetworkPolicy"]]


def _flow(
    name: str, namespace: str, to: dict[str, str], source_namespace: str, source: dict[str, str], port: int
) -> dict[str, Any]:
    """One connection, written as the NetworkPolicy that allows exactly it (how nca takes a query)."""
    peer = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": source_namespace}},
        "podSelector": {"matchLabels": source},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": to},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": port}]}],
        },
    }


HEAD = {"ray.io/node-type": "head"}
PREFILL = {"ray.io/group": "prefill"}
DECODE = {"ray.io/group": "decode"}
OPERATOR = {"app.kubernetes.io/name": "kuberay-operator"}

# (name, destination pod, source namespace key, source pod, port)
REQUIRED = [
    ("prefill-to-head-gcs", HEAD, "ns", PREFILL, 6379),
    ("decode-to-head-gcs", HEAD, "ns", DECODE, 6379),
    ("head-to-prefill-raylet", PREFILL, "ns", HEAD, 10001),
    ("prefill-to-decode-nixl", DECODE, "ns", PREFILL, 20000),
    ("decode-to-prefill-nixl", PREFILL, "ns", DECODE, 20000),
    ("decode-to-prefill-serve", PREFILL, "ns", DECODE, 8000),
    ("operator-to-head-dashboard", HEAD, "operator", OPERATOR, 8265),
    ("operator-to-head-serve-health", HEAD, "operator", OPERATOR, 8000),
    ("client-to-head-serve", HEAD, "ns", {"app": "client"}, 8000),
    ("client-to-decode-serve", DECODE, "ns", {"app": "client"}, 8000),
    ("collector-to-prefill-metrics", PREFILL, "metrics", {"app": "prometheus"}, 8080),
    ("collector-to-head-metrics", HEAD, "metrics", {"app": "prometheus"}, 8080),
]
FORBIDDEN = [
    ("attacker-to-head-dashboard", HEAD, "default", {"app": "attacker"}, 8265),
    ("attacker-to-head-gcs", HEAD, "default", {"app": "attacker"}, 6379),
    ("attacker-to-head-client", HEAD, "default", {"app": "attacker"}, 10001),
    ("attacker-to-head-serve", HEAD, "default", {"app": "attacker"}, 8000),
    ("attacker-to-worker-metrics", PREFILL, "default", {"app": "attacker"}, 8080),
    ("other-namespace-client-to-serve", HEAD, "apps", {"app": "client"}, 8000),
    ("same-namespace-client-to-dashboard", HEAD, "ns", {"app": "client"}, 8265),
    ("same-namespace-client-to-gcs", HEAD, "ns", {"app": "client"}, 6379),
    ("operator-to-worker", PREFILL, "operator", OPERATOR, 8265),
    ("operator-to-head-gcs", HEAD, "operator", OPERATOR, 6379),
    ("collector-to-head-dashboard", HEAD, "metrics", {"app": "prometheus"}, 8265),
]


PERMITS, FORBIDS = "permits", "forbids"


@dataclass(frozen=True)
class Verdict:
    holds: bool  # nca's own result for the query (its `expected: 0` check) and its words both say so
    output: str  # nca's output for the query, and its warnings: the failure message


def _nca(world: Path, queries: Mapping[str, tuple[str, dict[str, Any]]], tmp: Path) -> dict[str, Verdict]:
    """Each query — (permits or forbids, the flow) by its name — of the policies in ``world``, in one nca run: a
    scheme file (nca's batch input), so the world is parsed once. Each flow is a network config of its own on the
    world's namespaces and pods (the scheme's global resources, as `--resource_list` gives them on the command
    line); each query writes its output to a file of its own and expects 0 (the permits or forbids holds)."""
    run = Path(tempfile.mkdtemp(prefix="nca-", dir=tmp))
    configs: list[dict[str, Any]] = [{"name": "world", "resourceList": [str(world)]}]
    scheme_queries: list[dict[str, Any]] = []
    for name, (query, flow) in queries.items():
        (run / f"{name}.yaml").write_text(yaml.safe_dump(flow))
        configs.append({"name": name, "networkPolicyList": [str(run / f"{name}.yaml")]})
        scheme_queries.append(
            {
                "name": name,
                query: ["world", name],
                "expected": 0,
                "outputConfiguration": {"outputPath": str(run / f"{name}.txt")},
            }
        )
    scheme = run / "scheme.yaml"
    scheme.write_text(
        yaml.safe_dump({"resourceList": [str(world)], "networkConfigList": configs, "queries": scheme_queries})
    )
    result = subprocess.run([str(NCA), "--scheme", str(scheme)], capture_output=True, text=True, timeout=300)
    # nca's SchemeRunner: one warning per query whose result is not the expected one (or that was not executed),
    # and as many as the exit code.
    failed = re.findall(r"Warning: (?:Unexpected result for query (\S+):|(\S+) was not executed)", result.stderr)
    failed_names = {a or b for a, b in failed}
    ran = {name for name in queries if (run / f"{name}.txt").exists()}
    assert ran == set(queries) and result.returncode == len(failed), result.stdout + result.stderr
    verdicts = {}
    for name, (query, _) in queries.items():
        output = (run / f"{name}.txt").read_text()
        said = (
            f"world permits all connections specified in {name}"
            if query == PERMITS
            else f"world forbids connections specified in {name}"
        )
        warnings = [line for line in result.stderr.splitlines() if f"query {name}:" in line or f" {name} was" in line]
        verdicts[name] = Verdict(
            holds=name not in failed_names and said in output.splitlines(), output=output + "\n".join(warnings)
        )
    return verdicts


def _namespaces(settings: Any) -> dict[str, str]:
    return {
        "ns": settings.namespace,
        "operator": settings.kuberay_namespace,
        "metrics": settings.metrics_namespace,
        "default": "default",
        "apps": "apps",
    }


@pytest.fixture(scope="module")
def world(default_synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert NCA.exists(), "network-config-analyzer is not installed: `make test` installs it in .nca-venv"
    directory = tmp_path_factory.mktemp("network") / "resources"
    directory.mkdir()
    (directory / "world.yaml").write_text(
        yaml.safe_dump_all(_world(deployed_manifest(default_synth), default_synth.settings))
    )
    return directory


@pytest.fixture(scope="module")
def verdicts(default_synth: Synth, world: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    """Every flow of the tests below, asked of the default world in one nca run."""
    settings = default_synth.settings
    queries = {
        name: (query, _flow(name, settings.namespace, to, _namespaces(settings)[source_ns], source, port))
        for query, flows in ((PERMITS, REQUIRED), (FORBIDS, FORBIDDEN))
        for name, to, source_ns, source, port in flows
    }
    queries[VPC_ADDRESS_FLOW] = (
        FORBIDS,
        _address_flow(VPC_ADDRESS_FLOW, settings.namespace, HEAD, COLLECTOR_ADDRESS, 8080),
    )
    assert len(queries) == len(REQUIRED) + len(FORBIDDEN) + 1  # one name, one query
    return _nca(world, queries, tmp_path_factory.mktemp("nca"))


@pytest.mark.parametrize("flow", REQUIRED, ids=[f[0] for f in REQUIRED])
def test_every_required_flow_is_allowed(
    verdicts: dict[str, Verdict], flow: tuple[str, dict[str, str], str, dict[str, str], int]
) -> None:
    assert verdicts[flow[0]].holds, verdicts[flow[0]].output


@pytest.mark.parametrize("flow", FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_every_other_flow_into_the_namespace_is_denied(
    verdicts: dict[str, Verdict], flow: tuple[str, dict[str, str], str, dict[str, str], int]
) -> None:
    assert verdicts[flow[0]].holds, verdicts[flow[0]].output


def _address_flow(name: str, namespace: str, to: dict[str, str], cidr: str, port: int) -> dict[str, Any]:
    """A connection from an address outside any pod (the managed collector's network interface)."""
    flow = _flow(name, namespace, to, "unused", {}, port)
    flow["spec"]["ingress"][0]["from"] = [{"ipBlock": {"cidr": cidr}}]
    return flow


COLLECTOR_ADDRESS = "10.0.31.242/32"  # in the managed collector's first subnet (settings.metrics_collector_cidrs)
NODE_ADDRESS = "10.0.64.10/32"  # in a private subnet: where the nodes and every pod get their addresses
OUTSIDE_ADDRESS = "192.168.7.10/32"
VPC_ADDRESS_FLOW = "vpc-address-to-head-metrics"


@pytest.fixture(scope="module")
def observed_world(observed_synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("observed-network") / "resources"
    directory.mkdir()
    (directory / "world.yaml").write_text(
        yaml.safe_dump_all(_world(deployed_manifest(observed_synth), observed_synth.settings))
    )
    return directory


def test_the_managed_collector_reaches_the_metrics_port_and_nothing_else(
    observed_synth: Synth, observed_world: Path, tmp_path: Path
) -> None:
    """OBSERVABILITY=on: the managed Prometheus collector connects from its own subnets. nca gives pods no
    addresses, so "no pod has such an address" is the subnets' test (test_observability); here: the
    collector's address reaches 8080 only, and a node/pod subnet address does not reach it."""
    settings = observed_synth.settings
    ns = settings.namespace
    assert ipaddress.ip_network(COLLECTOR_ADDRESS).subnet_of(ipaddress.ip_network(settings.metrics_collector_cidrs[0]))  # type: ignore[arg-type]
    queries = {"node-subnet-address-to-head-metrics": (FORBIDS, (HEAD, NODE_ADDRESS, 8080))}
    for name, to in (("collector-to-head", HEAD), ("collector-to-prefill", PREFILL), ("collector-to-decode", DECODE)):
        queries[f"{name}-metrics"] = (PERMITS, (to, COLLECTOR_ADDRESS, 8080))
    for port in (8265, 6379, 8000, 10001, 20000):
        queries[f"vpc-address-to-head-{port}"] = (FORBIDS, (HEAD, COLLECTOR_ADDRESS, port))
    queries["outside-address-to-head-metrics"] = (FORBIDS, (HEAD, OUTSIDE_ADDRESS, 8080))
    verdicts = _nca(
        observed_world,
        {name: (query, _address_flow(name, ns, *flow)) for name, (query, flow) in queries.items()},
        tmp_path,
    )
    assert len(verdicts) == 10
    for verdict in verdicts.values():
        assert verdict.holds, verdict.output


def test_without_observability_no_address_reaches_the_metrics_port(verdicts: dict[str, Verdict]) -> None:
    assert verdicts[VPC_ADDRESS_FLOW].holds, verdicts[VPC_ADDRESS_FLOW].output


def test_nca_does_catch_an_open_namespace(default_synth: Synth, tmp_path: Path) -> None:
    """The control: without the default-deny policy and with the internal rule opened to every pod, the
    attacker reaches the dashboard, and nca says so (through the same batch as the tests above)."""
    manifest = [o for o in deployed_manifest(default_synth) if o["metadata"].get("name") != "default-deny-ingress"]
    for obj in manifest:
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["name"] == "ray-cluster-internal":
            obj["spec"]["ingress"] = [{"from": [{"namespaceSelector": {}}]}]
    directory = tmp_path / "open"
    directory.mkdir()
    (directory / "world.yaml").write_text(yaml.safe_dump_all(_world(manifest, default_synth.settings)))
    settings = default_synth.settings
    flow = _flow("attacker-to-head-dashboard", settings.namespace, HEAD, "default", {"app": "attacker"}, 8265)
    verdicts = _nca(directory, {"forbids-attacker": (FORBIDS, flow), "permits-attacker": (PERMITS, flow)}, tmp_path)
    assert not verdicts["forbids-attacker"].holds
    assert "world does not forbid connections specified in forbids-attacker" in verdicts["forbids-attacker"].output
    assert "Unexpected result for query forbids-attacker: Expected 0, got 1" in verdicts["forbids-attacker"].output
    assert verdicts["permits-attacker"].holds, verdicts["permits-attacker"].output


def test_serve_clients_follow_the_setting() -> None:
    from k8s_constructs.ray_service import build_rayservice_chart

    chart = build_rayservice_chart(settings_for({"SERVE_CLIENT_NAMESPACES": "apps,gateway"}))
    import cdk8s

    (serve,) = [cdk8s.ApiObject.of(p).to_json() for p in chart.network_policies.policies if p.name == "serve-clients"]
    peers = serve["spec"]["ingress"][0]["from"]
    assert [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in peers] == ["apps", "gateway"]
    assert serve["spec"]["ingress"][0]["ports"] == [{"port": 8000, "protocol": "TCP"}]


def test_log_groups_are_encrypted_with_a_key_cloudwatch_logs_may_use(default_synth: Synth) -> None:
    groups = {
        **default_synth.resources("network", "AWS::Logs::LogGroup"),
        **default_synth.resources("cluster", "AWS::Logs::LogGroup"),
    }
    assert len(groups) == 2 and all("KmsKeyId" in g["Properties"] for g in groups.values())  # checkov CKV_AWS_158
    (key,) = default_synth.resources("network", "AWS::KMS::Key").values()
    (logs,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Service" in s.get("Principal", {})]
    assert "logs." in json.dumps(logs["Principal"]) and "kms:GenerateDataKey*" in logs["Action"]
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]
    assert key["Properties"]["EnableKeyRotation"] is True and key["DeletionPolicy"] == "Delete"


def test_checkov_skips_only_aws_cdk_libs_own_lambdas_with_reasons(default_synth: Synth) -> None:
    skipped: dict[str, list[str]] = {}
    for name, template in default_synth.templates.items():
        for logical_id, resource in template["Resources"].items():
            skips = resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
            if skips:
                assert resource["Type"] == "AWS::Lambda::Function", logical_id
                assert all(len(s["comment"]) > 40 for s in skips)
                skipped[f"{name}/{logical_id}"] = sorted(s["id"] for s in skips)
            elif resource["Type"] == "AWS::Lambda::Function":
                raise AssertionError(f"{logical_id}: a Lambda function without its checkov acknowledgement")
    assert len(skipped) == 3 and all("KubectlProvider" in k or "VpcRestrictDefaultSG" in k for k in skipped), skipped
