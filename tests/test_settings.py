"""Bad input fails first: every class of bad setting gives one line naming the setting, the value and
what is allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from settings import SettingError, load_settings
from settings.specs import SPECS, settings_table_markdown
from settings.zones import offerings_context_key, zones_context_key
from tests.conftest import REPO, settings_for
from tests.pinned import pinned_environ


def _error(env: dict[str, str] | None = None, context: dict[str, Any] | None = None) -> SettingError:
    with pytest.raises(SettingError) as caught:
        settings_for(env or {}, context or {})
    message = str(caught.value)
    assert "\n" not in message
    return caught.value


@pytest.mark.defaults
def test_defaults_are_the_references() -> None:
    s = load_settings({}, {})
    assert (s.cluster_name, s.region, s.kubernetes_version, s.namespace) == (
        "ray-llm-multinode",
        "sa-east-1",
        "1.35",
        "inference",
    )
    assert (s.system_node.name, s.system_node_count, s.system_nodegroup_name) == ("m7i.xlarge", 1, "system-nodes")
    assert (s.gpu_node.name, s.gpu_node_count, s.gpu_nodegroup_name) == ("g6.8xlarge", 2, "gpu-workers")
    assert s.dlc_image == "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert (s.kuberay_version, s.kuberay_namespace, s.ray_version, s.ray_service_name) == (
        "1.7.0",
        "kuberay-operator",
        "2.58.0",
        "ray-llm",
    )
    assert (s.model_id, s.model_source) == ("qwen3.5-9b", "Qwen/Qwen3.5-9B")
    assert s.gpu_az == "sa-east-1a" and s.gpu_az_source == "built-in default"


def test_environment_beats_context() -> None:
    s = settings_for({"GPU_NODE_COUNT": "0"}, {"gpu_node_count": 2, "cluster_name": "from-context"})
    assert s.gpu_node_count == 0 and s.cluster_name == "from-context"


@pytest.mark.parametrize(
    ("env", "setting", "fragment"),
    [
        ({"GPU_NODE_TYPE": "g6.8xlarg"}, "GPU_NODE_TYPE", "did you mean g6.8xlarge"),
        ({"SYSTEM_NODE_TYPE": "m7i.huge"}, "SYSTEM_NODE_TYPE", "an EC2 instance type"),
        ({"GPU_NODE_TYPE": "g6.xlarg"}, "GPU_NODE_TYPE", "did you mean g6.8xlarge"),
        ({"SYSTEM_NODE_TYPE": "m7i.larg"}, "SYSTEM_NODE_TYPE", "did you mean m7i.xlarge"),
        ({"GPU_NODE_TYPE": "m7i.xlarge"}, "GPU_NODE_TYPE", "has no GPU"),
        ({"GPU_NODE_TYPE": "g6.4xlarge"}, "GPU_NODE_TYPE", "make lookup"),
        ({"SYSTEM_NODE_TYPE": "m7i.large"}, "SYSTEM_NODE_TYPE", "at least 4 vCPU and 16 GiB"),
        ({"GPU_NODE_COUNT": "-1"}, "GPU_NODE_COUNT", "whole number from 0 to 64"),
        ({"GPU_NODE_COUNT": "two"}, "GPU_NODE_COUNT", "whole number"),
        ({"SYSTEM_NODE_COUNT": "1.5"}, "SYSTEM_NODE_COUNT", "whole number from 1 to 10"),
        (
            {"GPU_NODE_COUNT": "3"},
            "GPU_NODE_COUNT",
            "empty or 2 (what the replicas need), or 0 (parked): 1 prefill + 1 decode node(s)",
        ),
        (
            {"TENSOR_PARALLEL_SIZE": "2"},
            "TENSOR_PARALLEL_SIZE",
            "1: a tensor-parallel engine stays inside one node, and g6.8xlarge has 1 GPU(s)",
        ),
        ({"TENSOR_PARALLEL_SIZE": "16"}, "TENSOR_PARALLEL_SIZE", "whole number from 1 to 8"),
        ({"K8S_VERSION": "1.29"}, "K8S_VERSION", "1.34, 1.35, 1.36"),
        ({"GPU_AZ": "sa-east-1"}, "GPU_AZ", "availability zone name"),
        ({"GPU_AZ": "us-east-1a"}, "GPU_AZ", "availability zone of REGION=sa-east-1"),
        ({"REGION": "sa-east-3"}, "REGION", "an AWS Region"),
        ({"REGION": "sa-eastt-1"}, "REGION", "did you mean sa-east-1"),
        ({"CLUSTER_NAME": "Ray_LLM"}, "CLUSTER_NAME", "DNS label"),
        ({"NAMESPACE": "-inference"}, "NAMESPACE", "DNS label"),
        ({"RAY_SERVICE_NAME": "r" * 54}, "RAY_SERVICE_NAME", "at most 53 characters"),
        ({"GPU_NODEGROUP_NAME": "gpu.workers"}, "GPU_NODEGROUP_NAME", "DNS label"),
        ({"DLC_IMAGE": "ray:latest"}, "DLC_IMAGE", "not :latest"),
        ({"KUBERAY_VERSION": "1.4.0"}, "KUBERAY_VERSION", "1.7.0, the version of the CRDs in schemas/kuberay/"),
        (
            {"KUBERAY_VERSION": "1.7.1"},
            "KUBERAY_VERSION",
            "the CRDs in schemas/kuberay/ (to move to another release: `make vendor-kuberay VERSION=X.Y.Z`)",
        ),
        ({"GPU_UPDATE_STRATEGY": "rolling"}, "GPU_UPDATE_STRATEGY", "minimal or default"),
        ({"RAY_VERSION": "2.40.0"}, "RAY_VERSION", "at least 2.52.0"),
        ({"RAY_VERSION": "2.51.0"}, "RAY_VERSION", "token authentication"),
        ({"SERVE_CLIENT_NAMESPACES": "apps,Bad_NS"}, "SERVE_CLIENT_NAMESPACES", "DNS label"),
        ({"SERVE_EXPOSURE": "public"}, "SERVE_EXPOSURE", "cluster, internal or internet-facing"),
        (
            {"SERVE_EXPOSURE": "internet-facing", "SERVE_ALLOWED_CIDRS": "203.0.113.0/24"},
            "SERVE_CERTIFICATE_ARN",
            "an ACM certificate ARN in sa-east-1",
        ),
        (
            {
                "SERVE_EXPOSURE": "internet-facing",
                "SERVE_CERTIFICATE_ARN": "none",
                "SERVE_ALLOWED_CIDRS": "203.0.113.0/24",
            },
            "SERVE_CERTIFICATE_ARN",
            "clear text",
        ),
        (
            {
                "SERVE_EXPOSURE": "internal",
                "SERVE_CERTIFICATE_ARN": (
                    "arn:aws:acm:us-east-1:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
                ),
            },
            "SERVE_CERTIFICATE_ARN",
            "a certificate in REGION=sa-east-1",
        ),
        (
            {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "arn:aws:acm:sa-east-1:1234:certificate/x"},
            "SERVE_CERTIFICATE_ARN",
            "an ACM certificate ARN",
        ),
        (
            {
                "SERVE_CERTIFICATE_ARN": (
                    "arn:aws:acm:sa-east-1:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
                )
            },
            "SERVE_CERTIFICATE_ARN",
            "empty while SERVE_EXPOSURE=cluster",
        ),
        (
            {
                "SERVE_EXPOSURE": "internet-facing",
                "SERVE_CERTIFICATE_ARN": (
                    "arn:aws:acm:sa-east-1:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
                ),
            },
            "SERVE_ALLOWED_CIDRS",
            "an allow-list is required",
        ),
        (
            {
                "SERVE_EXPOSURE": "internal",
                "SERVE_CERTIFICATE_ARN": "none",
                "SERVE_ALLOWED_CIDRS": "10.0.0.0/8,10.1.2.3/16",
            },
            "SERVE_ALLOWED_CIDRS",
            "'10.1.2.3/16' is not one",
        ),
        ({"SERVE_ALLOWED_CIDRS": "10.0.0.0/8"}, "SERVE_ALLOWED_CIDRS", "empty while SERVE_EXPOSURE=cluster"),
        ({"SERVE_ACCESS_LOGS": "on"}, "SERVE_ACCESS_LOGS", "off while SERVE_EXPOSURE=cluster"),
        (
            {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none", "SERVE_ACCESS_LOGS": "yes"},
            "SERVE_ACCESS_LOGS",
            "on or off",
        ),
        (
            {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none", "SERVE_HOSTNAME": "llm_.example"},
            "SERVE_HOSTNAME",
            "fully qualified domain name",
        ),
        (
            {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none", "SERVE_HOSTED_ZONE_ID": "Z0123456789"},
            "SERVE_HOSTED_ZONE_ID",
            "unless SERVE_HOSTNAME",
        ),
        (
            {
                "SERVE_EXPOSURE": "internal",
                "SERVE_CERTIFICATE_ARN": "none",
                "SERVE_HOSTNAME": "llm.example.com",
                "SERVE_HOSTED_ZONE_ID": "example.com",
            },
            "SERVE_HOSTED_ZONE_ID",
            "hosted zone ID",
        ),
        (
            {"SERVE_EXPOSURE": "internal", "SERVE_CERTIFICATE_ARN": "none", "SERVE_API_KEYS": "off"},
            "SERVE_API_KEYS",
            "an endpoint beyond the cluster takes keys",
        ),
        ({"SERVE_API_KEYS": "yes"}, "SERVE_API_KEYS", "on, off, or empty"),
        ({"MODEL_SOURCE": "not a repo"}, "MODEL_SOURCE", "ORG/NAME"),
        ({"MODEL_SOURCE": "s3://Bucket/qwen"}, "MODEL_SOURCE", "S3's bucket naming rules"),
        (
            {"PREFILL_REPLICAS": "2", "PREFILL_MAX_REPLICAS": "1"},
            "PREFILL_MAX_REPLICAS",
            "at least PREFILL_REPLICAS (2)",
        ),
        ({"DECODE_MAX_REPLICAS": "0"}, "DECODE_MAX_REPLICAS", "empty, or integer 1-64"),
        ({"GCS_FAULT_TOLERANCE": "rocksdb"}, "GCS_FAULT_TOLERANCE", "off or redis"),
        (
            {"GCS_FAULT_TOLERANCE": "redis", "GCS_STORE_NODE_TYPE": "t4g.micro"},
            "GCS_STORE_NODE_TYPE",
            "cache.FAMILY.SIZE",
        ),
        ({"MODEL_SOURCE": "s3://bucket/qwen*"}, "MODEL_SOURCE", "no '*'"),
        (
            {"MODEL_SOURCE": "s3://bucket/q", "MODEL_SOURCE_KMS_KEY_ARN": "alias/models"},
            "MODEL_SOURCE_KMS_KEY_ARN",
            "a KMS key ARN",
        ),
        ({"MODEL_SOURCE": "s3://bucket/q", "MODEL_NEXT_SOURCE": "s3://bucket/q/r"}, "MODEL_NEXT_SOURCE", "beside"),
        ({"VPC_CIDR": "10.0.0.0/18"}, "VPC_CIDR", "/16 to /17"),
        (
            {"ENDPOINT_ACCESS": "public", "PUBLIC_ACCESS_CIDRS": "1.2.3.0/24"},
            "PUBLIC_ACCESS_CIDRS",
            "unless ENDPOINT_ACCESS=public-and-private",
        ),
        ({"REGION": "ap-east-1"}, "DLC_IMAGE", "opt-in Regions"),
        ({"SYSTEM_ROOT_VOLUME_GIB": "20"}, "SYSTEM_ROOT_VOLUME_GIB", "whole number from 80 to 1000"),
        ({"VPC_CIDR": "8.8.0.0/16"}, "VPC_CIDR", "private IPv4 CIDR"),
        ({"ENDPOINT_ACCESS": "open"}, "ENDPOINT_ACCESS", "public-and-private, private or public"),
        (
            {"ENDPOINT_ACCESS": "private", "PUBLIC_ACCESS_CIDRS": "1.2.3.0/24"},
            "PUBLIC_ACCESS_CIDRS",
            "unless ENDPOINT_ACCESS=public-and-private",
        ),
        ({"ADMIN_PRINCIPAL_ARNS": "ci-deploy"}, "ADMIN_PRINCIPAL_ARNS", "IAM role or user ARNs"),
        ({"PREFILL_REPLICAS": "0"}, "PREFILL_REPLICAS", "whole number from 1 to 64"),
        (
            {"ADMIN_PRINCIPAL_ARNS": "arn:aws:iam::123456789012:role/ci,arn:aws:iam::123456789012:role/ci"},
            "ADMIN_PRINCIPAL_ARNS",
            (
                "each ARN once (EKS allows one access entry per principal; arn:aws:iam::123456789012:role/ci is listed"
                " twice)"
            ),
        ),
        ({"GPU_CAPACITY_RESERVATION_ID": "cr-123"}, "GPU_CAPACITY_RESERVATION_ID", "cr- and 17 hexadecimal digits"),
        (
            {"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789ABCDEF0"},
            "GPU_CAPACITY_RESERVATION_ID",
            "cr- and 17 hexadecimal digits",
        ),
        ({"GPU_CAPACITY_RESERVATION_TYPE": "spot"}, "GPU_CAPACITY_RESERVATION_TYPE", "on-demand or capacity-block"),
        (
            {"GPU_CAPACITY_RESERVATION_TYPE": "capacity-block"},
            "GPU_CAPACITY_RESERVATION_TYPE",
            "unless GPU_CAPACITY_RESERVATION_ID names the Capacity Block",
        ),
        (
            {"GPU_PLACEMENT_GROUP": "my group"},
            "GPU_PLACEMENT_GROUP",
            "on, off, or the name of an existing cluster placement group",
        ),
        (
            {"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0"},
            "GPU_PLACEMENT_GROUP",
            "a new placement group holds no reservation",
        ),
        ({"DECODE_REPLICAS": "65"}, "DECODE_REPLICAS", "whole number from 1 to 64"),
        ({"GPU_ROOT_VOLUME_GIB": "50"}, "GPU_ROOT_VOLUME_GIB", "whole number from 100 to 2000"),
        ({"HF_TOKEN_SECRET_NAME": "my secret"}, "HF_TOKEN_SECRET_NAME", "a Secrets Manager secret name"),
        ({"KUBERAY_NAMESPACE": "KubeRay"}, "KUBERAY_NAMESPACE", "DNS label"),
        ({"MAX_MODEL_LEN": "128"}, "MAX_MODEL_LEN", "whole number from 256 to 1048576"),
        ({"METRICS_NAMESPACE": "Monitoring"}, "METRICS_NAMESPACE", "DNS label"),
        ({"MODEL_ID": "qwen 3.5"}, "MODEL_ID", "letters, digits"),
        ({"OBSERVABILITY": "yes"}, "OBSERVABILITY", "on or off"),
        ({"OBSERVABILITY": "on", "ENDPOINT_ACCESS": "public"}, "OBSERVABILITY", "needs the private endpoint"),
        ({"SYSTEM_NODEGROUP_NAME": "system_nodes"}, "SYSTEM_NODEGROUP_NAME", "DNS label"),
        ({"MODEL_IMAGES": "yes"}, "MODEL_IMAGES", "on or off"),
        ({"ENFORCE_EAGER": "yes"}, "ENFORCE_EAGER", "auto, true or false"),
        ({"MAX_MODEL_LEN": "1048576"}, "MAX_MODEL_LEN", "at most 262144, Qwen/Qwen3.5-9B's native context"),
        ({"MAX_MODEL_LEN": "131072"}, "MAX_MODEL_LEN", "MAX_MODEL_LEN up to"),
    ],
)
def test_bad_value_names_the_setting_the_value_and_what_is_allowed(
    env: dict[str, str], setting: str, fragment: str
) -> None:
    error = _error(env)
    assert error.env_name == setting
    message = str(error)
    # The value given; for a setting left at its default (DLC_IMAGE in an opt-in Region), the default.
    assert message.startswith(f"{setting}={env[setting]!r} is not allowed: " if setting in env else f"{setting}=")
    assert fragment in message


def test_every_region_accepted_has_an_eks_add_on_registry() -> None:
    """The EFA device plugin's image comes from the deploy Region's EKS registry: a Region botocore knows and
    the table (settings/registries.py) does not would fail the synth, so a new Region shows up here."""
    from settings.parsers import known_regions as _known_regions
    from settings.registries import OTHER_ACCOUNTS, eks_addon_registry

    assert {r: eks_addon_registry(r) for r in _known_regions() if eks_addon_registry(r) is None} == {}
    assert eks_addon_registry("sa-east-1") == "602401143452.dkr.ecr.sa-east-1.amazonaws.com"
    assert eks_addon_registry("af-south-1") == "877085696533.dkr.ecr.af-south-1.amazonaws.com"
    assert set(OTHER_ACCOUNTS) <= set(_known_regions())
    assert eks_addon_registry("xx-nowhere-1") is None


def test_capacity_settings() -> None:
    s = settings_for({}, {})
    assert (s.gpu_placement_group, s.gpu_capacity_reservation_id, s.gpu_capacity_block) == ("on", "", False)
    block = settings_for(
        {
            "GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0",
            "GPU_CAPACITY_RESERVATION_TYPE": "capacity-block",
            "GPU_PLACEMENT_GROUP": "off",
        },
        {},
    )
    assert block.gpu_capacity_block and block.gpu_placement_group == "off"
    named = settings_for({"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0", "GPU_PLACEMENT_GROUP": "gpu-pg"}, {})
    assert (named.gpu_placement_group, named.gpu_capacity_block) == ("gpu-pg", False)


def test_every_setting_has_a_bad_value_test() -> None:
    """A new setting lands with the test of its bad values: the parametrization above names each one."""
    import ast

    tree = ast.parse((REPO / "tests" / "test_settings.py").read_text())
    (bad_values,) = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "test_bad_value_names_the_setting_the_value_and_what_is_allowed"
    ]
    (parametrize,) = bad_values.decorator_list
    assert isinstance(parametrize, ast.Call) and isinstance(parametrize.args[1], ast.List)
    tested = {
        case.elts[1].value
        for case in parametrize.args[1].elts
        if isinstance(case, ast.Tuple) and isinstance(case.elts[1], ast.Constant)
    }
    assert {s.env for s in SPECS} - tested == set()


def test_unknown_context_key_suggests_the_closest() -> None:
    error = _error(context={"gpu_node_cont": 2})
    assert error.env_name == "gpu_node_cont"
    assert "did you mean gpu_node_count" in str(error)


def test_cdk_context_keys_are_not_ours_to_reject() -> None:
    settings_for(
        {},
        {
            "@aws-cdk/aws-eks:defaultToAL2023": True,
            "aws:cdk:enable-path-metadata": True,
            "availability-zones:account=1:region=x": ["a"],
        },
    )


def test_cached_look_ups_choose_the_gpu_az_and_reject_one_known_not_to_offer_the_type() -> None:
    context = {
        zones_context_key("sa-east-1"): ["sa-east-1a", "sa-east-1b", "sa-east-1c"],
        offerings_context_key("sa-east-1", "g6.8xlarge"): ["sa-east-1c"],
    }
    s = settings_for({}, context)
    assert s.gpu_az == "sa-east-1c" and s.gpu_az_source == "cached look-up"
    assert "sa-east-1c" in s.availability_zones
    error = _error({"GPU_AZ": "sa-east-1a"}, context)
    assert "offers g6.8xlarge: sa-east-1c" in str(error)


def test_a_gpu_type_without_efa_from_a_cached_look_up_is_rejected() -> None:
    facts = {
        "name": "g6.4xlarge",
        "vcpus": 16,
        "memory_mib": 65536,
        "gpus": 1,
        "gpu_model": "L4",
        "gpu_memory_mib": 24576,
        "network_cards": 1,
        "efa_supported": False,
    }
    error = _error({"GPU_NODE_TYPE": "g6.4xlarge"}, {"ray-llm:instance-type:g6.4xlarge": facts})
    assert "has no EFA" in str(error)


def test_each_phase_gets_nodes_of_its_own() -> None:
    # g6.12xlarge (4 GPUs) alone: one prefill node and one decode node, never both phases on one node.
    s = settings_for({"GPU_NODE_TYPE": "g6.12xlarge"}, {})
    assert (s.prefill_nodes, s.decode_nodes, s.gpu_node_count) == (1, 1, 2)
    # Four engines of each phase still fit one node each; a fifth prefill engine needs a second prefill node.
    assert (
        settings_for(
            {"GPU_NODE_TYPE": "g6.12xlarge", "PREFILL_REPLICAS": "4", "DECODE_REPLICAS": "4"}, {}
        ).gpu_node_count
        == 2
    )
    assert settings_for({"GPU_NODE_TYPE": "g6.12xlarge", "PREFILL_REPLICAS": "5"}, {}).gpu_node_count == 3
    # Tensor parallelism: two 2-GPU engines per g6.12xlarge.
    tp = settings_for({"GPU_NODE_TYPE": "g6.12xlarge", "TENSOR_PARALLEL_SIZE": "2", "PREFILL_REPLICAS": "3"}, {})
    assert (tp.engines_per_node, tp.prefill_nodes, tp.decode_nodes) == (2, 2, 1)
    assert "empty or 2" in str(_error({"GPU_NODE_TYPE": "g6.12xlarge", "GPU_NODE_COUNT": "1"}))
    # p5.48xlarge with the defaults alone synthesizes: one node per phase.
    assert (
        settings_for({"GPU_NODE_TYPE": "p5.48xlarge", "REGION": "us-east-2", "GPU_AZ": "us-east-2b"}, {}).gpu_node_count
        == 2
    )


def test_an_explicit_node_count_must_match_and_zero_parks() -> None:
    assert settings_for({"GPU_NODE_COUNT": "2"}, {}).gpu_node_count == 2
    assert settings_for({"GPU_NODE_COUNT": "0"}, {}).gpu_node_count == 0
    assert settings_for({"GPU_NODE_COUNT": ""}, {}).gpu_node_count == 2


@pytest.mark.defaults
def test_the_docs_settings_table_is_generated_from_the_specs() -> None:
    settings_page = (REPO / "docs" / "settings.md").read_text()
    assert settings_table_markdown() in settings_page, "docs/settings.md's table is stale: run `make docs-tables`"
    assert len(SPECS) == len({s.env for s in SPECS})


@pytest.mark.defaults
def test_the_docs_say_what_changing_each_setting_does() -> None:
    from settings.specs import CHANGE_EFFECTS, change_table_markdown

    assert list(CHANGE_EFFECTS) == [s.env for s in SPECS], "one row per setting, in the settings table's order"
    assert change_table_markdown() in (REPO / "docs" / "day2.md").read_text(), (
        "docs/day2.md's change table is stale: run `make docs-tables`"
    )


@pytest.mark.defaults
def test_every_generated_part_of_the_docs_is_current() -> None:
    """The settings, change, preflight and chart tables and the defaults' quota, between their markers."""
    from tools.docs_tables import stale_pages

    assert stale_pages(write=False) == [], "run `make docs-tables`"


def _run_app(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}} | pinned_environ(env)
    full_env["CDK_OUTDIR"] = "/nonexistent-must-not-be-written"
    return subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=120
    )


def test_app_prints_one_line_and_exits_2_on_a_bad_setting() -> None:
    result = _run_app({"GPU_NODE_TYPE": "m7i.xlarge"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: GPU_NODE_TYPE='m7i.xlarge' is not allowed: "), (
        result.stderr
    )
    assert "Traceback" not in result.stderr and "jsii" not in result.stderr.lower()


def test_a_parser_says_what_it_allows_with_the_numbers_it_checks() -> None:
    """The "Allowed" column and the check come from the same parser: one place for each constraint."""
    from settings.specs import SPECS

    by_env = {s.env: s for s in SPECS}
    replicas = by_env["PREFILL_REPLICAS"]
    assert replicas.allowed_text == "integer 1-64"
    assert replicas.parse("64") == 64
    with pytest.raises(SettingError, match="whole number from 1 to 64"):
        replicas.parse("65")
    assert by_env["RAY_SERVICE_NAME"].allowed_text.endswith("at most 53 characters")
    assert by_env["OBSERVABILITY"].allowed_text == "on or off"
    # Settings that depend on others are parsed together in the loader, and say so if asked alone.
    with pytest.raises(TypeError):
        by_env["GPU_NODE_COUNT"].parse("2")


def test_each_parser_returns_the_type_of_its_settings_field() -> None:
    """The loader hands a spec's parsed value over as it is, under the spec's context key: the field must be of
    the parser's return type (a Flag fills a bool, never the text 'off'; mypy cannot see through the hand-over)."""
    from typing import get_type_hints

    from settings import Settings

    fields = get_type_hints(Settings)
    wrong = {}
    for spec in SPECS:
        if spec.parser is not None:
            returns = get_type_hints(type(spec.parser).__call__)["return"]
            if fields.get(spec.context_key) != returns:
                wrong[spec.env] = (
                    f"Settings.{spec.context_key}: {fields.get(spec.context_key)}, its parser returns {returns}"
                )
    assert wrong == {}


def test_every_parsed_setting_reaches_the_settings_as_its_parser_returns_it() -> None:
    settings = settings_for()
    from tests.pinned import PINNED

    handed = {
        s.env: (getattr(settings, s.context_key), s.parse(PINNED.get(s.env, s.default)))
        for s in SPECS
        if s.parser is not None
    }
    assert {env: pair for env, pair in handed.items() if pair[0] != pair[1] or type(pair[0]) is not type(pair[1])} == {}
    assert settings.observability is False and settings.model_images is False


def test_a_flag_is_a_bool_in_its_own_words() -> None:
    from settings.parsers import Flag

    eager = Flag("true", "false")
    assert (eager("X", "true"), eager("X", "false"), eager.allowed) == (True, False, "true or false")
    with pytest.raises(SettingError, match=r"X='off' is not allowed: true or false"):
        eager("X", "off")


def _read_by_the_stacks(field: str) -> list[str]:
    """The modules of stacks/ and k8s_constructs/ that read `field` of the Settings."""
    import re

    pattern = re.compile(rf"\.{re.escape(field)}\b")
    return sorted(
        str(p.relative_to(REPO))
        for d in ("stacks", "k8s_constructs")
        for p in (REPO / d).rglob("*.py")
        if pattern.search(p.read_text())
    )


def test_a_preflight_only_setting_is_read_by_no_stack() -> None:
    """ "no effect on deployed stacks" (PREFLIGHT_ONLY) holds only while no stack or manifest reads the setting."""
    from settings.specs import CHANGE_EFFECTS, PREFLIGHT_ONLY

    read = {
        env: _read_by_the_stacks(env.lower()) for env, (effect, _) in CHANGE_EFFECTS.items() if effect == PREFLIGHT_ONLY
    }
    assert {env: modules for env, modules in read.items() if modules} == {}
    assert _read_by_the_stacks("gpu_az"), "the search finds a setting the stacks read"


def test_a_misspelt_environment_setting_is_warned_about_in_one_line() -> None:
    from settings.loader import near_misses

    assert near_misses(
        {
            "PREFIL_REPLICAS": "2",
            "REGON": "us-east-2",
            "AWS_REGION": "us-east-2",
            "PATH": "/bin",
            "GITHUB_REPOSITORY_OWNER": "o",
        }
    ) == [
        (
            "warning: PREFIL_REPLICAS is not a setting and is ignored (did you mean PREFILL_REPLICAS?); see"
            " docs/settings.md"
        ),
        "warning: REGON is not a setting and is ignored (did you mean REGION?); see docs/settings.md",
    ]
    result = _run_app({"PREFIL_REPLICAS": "2", "GPU_NODE_TYPE": "m7i.xlarge"})
    assert result.returncode == 2
    assert [line for line in result.stderr.splitlines() if line.startswith("warning: ")] == [
        "warning: PREFIL_REPLICAS is not a setting and is ignored (did you mean PREFILL_REPLICAS?); see"
        " docs/settings.md"
    ]


def test_every_make_target_a_message_names_exists() -> None:
    """Errors, fixes and notices name current procedures: each `make X` in the code is a target of the Makefile."""
    import re

    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))
    named = {
        (str(path.relative_to(REPO)), target)
        for folder in ("settings", "preflight", "stacks", "k8s_constructs", "tools")
        for path in (REPO / folder).rglob("*.py")
        for target in re.findall(r"`make ([a-z][a-z-]*)", path.read_text())
    }
    assert named and {(path, target) for path, target in named if target not in targets} == set()
