"""Bad input fails first: every class of bad setting gives one line naming the setting, the value and
what is allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from settings import SettingError
from settings.loader import STRICT_SWITCHES
from settings.specs import SPECS
from tests.conftest import REPO, run_entry_point, settings_for
from tests.pinned import pinned_environ


def _error(env: dict[str, str] | None = None, context: dict[str, Any] | None = None) -> SettingError:
    with pytest.raises(SettingError) as caught:
        settings_for(env or {}, context or {})
    message = str(caught.value)
    assert "\n" not in message
    return caught.value


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
        ({"PARK_AT": "02:30"}, "PARK_AT", "a whole hour HH:00 from 00:00 to 23:00 (the park workflow runs hourly)"),
        ({"PARK_AT": "2am"}, "PARK_AT", "empty (off), or a whole hour"),
        ({"UNPARK_AT": "24:00"}, "UNPARK_AT", "a whole hour HH:00"),
        ({"UNPARK_AT": "02:00"}, "UNPARK_AT", "another hour than PARK_AT (02:00), or empty"),
        ({"UNPARK_DAYS": "monday-friday"}, "UNPARK_DAYS", "comma-separated days or ranges of mon/tue/wed"),
        ({"UNPARK_DAYS": ","}, "UNPARK_DAYS", "e.g. mon-fri"),
        ({"PARK_TIME_ZONE": "Europe/Berln"}, "PARK_TIME_ZONE", "(did you mean Europe/Berlin?)"),
        ({"PARK_TIME_ZONE": "utc"}, "PARK_TIME_ZONE", "(did you mean UTC?)"),
        ({"PARK_TIME_ZONE": "CEST"}, "PARK_TIME_ZONE", "an IANA time zone name"),
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
            "only 1 on g6.8xlarge, which has 1 GPU(s): a tensor-parallel engine stays inside one node",
        ),
        ({"TENSOR_PARALLEL_SIZE": "16"}, "TENSOR_PARALLEL_SIZE", "whole number from 1 to 8"),
        ({"K8S_VERSION": "1.29"}, "K8S_VERSION", "1.34, 1.35, 1.36"),
        ({"GPU_AZ": "sa-east-1"}, "GPU_AZ", "availability zone name"),
        ({"GPU_AZ": "us-east-1a"}, "GPU_AZ", "availability zone of REGION=sa-east-1"),
        ({"REGION": "sa-east-3"}, "REGION", "an AWS Region"),
        ({"REGION": "sa-eastt-1"}, "REGION", "did you mean sa-east-1"),
        ({"REGION": " us-east-2"}, "REGION", "an AWS Region, without blanks (did you mean us-east-2?)"),
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
        ({"REGION": "ap-east-1"}, "REGION", "an opt-in Region serves them from another account"),
        ({"GPU_NODE_TYPE": "h100"}, "GPU_NODE_TYPE", "(H100 is a GPU; the types with it: p5.48xlarge)"),
        (
            {"GPU_NODE_TYPE": "g6.12xlarge", "TENSOR_PARALLEL_SIZE": "8"},
            "TENSOR_PARALLEL_SIZE",
            "1, 2 or 4 on g6.12xlarge, which has 4 GPU(s)",
        ),
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
        # The hints: what a value of that shape usually is.
        ({"VPC_CIDR": "10.0.0.7/16"}, "VPC_CIDR", "host bits set: did you mean 10.0.0.0/16?"),
        ({"SERVE_ALLOWED_CIDRS": "203.0.113.7/24"}, "SERVE_ALLOWED_CIDRS", "did you mean 203.0.113.0/24?"),
        (
            {"HF_TOKEN_SECRET_NAME": "arn:aws:secretsmanager:sa-east-1:123456789012:secret:hf-token-AbCdEf"},
            "HF_TOKEN_SECRET_NAME",
            "an ARN: give the name",
        ),
        (
            {"ADMIN_PRINCIPAL_ARNS": "arn:aws:sts::123456789012:assumed-role/Admin/jane"},
            "ADMIN_PRINCIPAL_ARNS",
            "did you mean arn:aws:iam::123456789012:role/Admin?",
        ),
        ({"REGION": "US-EAST-1"}, "REGION", "in lower case (did you mean us-east-1?)"),
        ({"GPU_NODE_TYPE": "G6.8xlarge"}, "GPU_NODE_TYPE", "in lower case (did you mean g6.8xlarge?)"),
        ({"OBSERVABILITY": "yes"}, "OBSERVABILITY", "on or off"),
        ({"OBSERVABILITY": "on", "ENDPOINT_ACCESS": "public"}, "OBSERVABILITY", "needs the private endpoint"),
        ({"SYSTEM_NODEGROUP_NAME": "system_nodes"}, "SYSTEM_NODEGROUP_NAME", "DNS label"),
        ({"MODEL_IMAGES": "yes"}, "MODEL_IMAGES", "on or off"),
        ({"ENFORCE_EAGER": "yes"}, "ENFORCE_EAGER", "auto, true or false"),
        ({"KV_TRANSPORT": "efa"}, "KV_TRANSPORT", "libfabric or ucx"),
        ({"TOOL_CALL_PARSER": "qwen3-coder"}, "TOOL_CALL_PARSER", "did you mean qwen3_coder?"),
        ({"REASONING_PARSER": "Qwen3"}, "REASONING_PARSER", "did you mean qwen3?"),
        ({"ENGINE_ARGS": "max_num_seqs=64"}, "ENGINE_ARGS", "a JSON object"),
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


def test_every_setting_has_a_bad_value_test() -> None:
    """A new setting lands with the test of its bad values: the parametrization above names each one."""
    import ast

    tree = ast.parse((REPO / "tests" / "test_settings_bad_values.py").read_text())
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


def _run_app(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}} | pinned_environ(env)
    full_env["CDK_OUTDIR"] = "/nonexistent-must-not-be-written"
    return subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.own_process
def test_app_prints_one_line_and_exits_2_on_a_bad_setting() -> None:
    result = _run_app({"GPU_NODE_TYPE": "m7i.xlarge"})
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: GPU_NODE_TYPE='m7i.xlarge' is not allowed: "), (
        result.stderr
    )
    assert "Traceback" not in result.stderr and "jsii" not in result.stderr.lower()


def test_a_misspelt_environment_setting_is_warned_about_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from settings.loader import near_misses

    assert near_misses(
        {
            "PREFIL_REPLICAS": "2",
            "REGON": "us-east-2",
            "AWS_REGION": "us-east-2",
            "PATH": "/bin",
            "GITHUB_REPOSITORY_OWNER": "o",
            "gpu_node_type": "g6e.12xlarge",
            "http_proxy": "http://proxy:3128",
        }
    ) == [
        (
            "warning: PREFIL_REPLICAS is not a setting and is ignored (did you mean PREFILL_REPLICAS?); see"
            " docs/settings.md"
        ),
        "warning: REGON is not a setting and is ignored (did you mean REGION?); see docs/settings.md",
        "warning: gpu_node_type is not a setting and is ignored (did you mean GPU_NODE_TYPE?); see docs/settings.md",
    ]
    # app.py's main() in this process (the test above runs the real process).
    status, _, stderr = run_entry_point(
        "app",
        {"PREFIL_REPLICAS": "2", "GPU_NODE_TYPE": "m7i.xlarge"},
        tmp_path / "out",
        monkeypatch,
        capfd,
        unset=STRICT_SWITCHES,  # outside CI: a warning (the test below: CI)
    )
    assert status == 2
    assert [line for line in stderr.splitlines() if line.startswith("warning: ")] == [
        "warning: PREFIL_REPLICAS is not a setting and is ignored (did you mean PREFILL_REPLICAS?); see"
        " docs/settings.md"
    ]


@pytest.mark.parametrize("switch", ["CI", "STRICT_SETTINGS"])
def test_with_ci_or_strict_settings_a_misspelt_setting_stops_the_synth(
    switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """In CI a warning scrolls past and the deploy goes on with the default GPU: GPU_NODETYPE stops it there."""
    status, _, stderr = run_entry_point(
        "app",
        {switch: "true", "GPU_NODETYPE": "p5.48xlarge"},
        tmp_path / "out",
        monkeypatch,
        capfd,
        unset=STRICT_SWITCHES,
    )
    assert status == 2
    assert stderr.strip().splitlines() == [
        "error: GPU_NODETYPE='p5.48xlarge' is not allowed: no such setting (did you mean GPU_NODE_TYPE?); with CI or"
        " STRICT_SETTINGS set a misspelt setting stops the synth instead of deploying the default; see"
        " docs/settings.md"
    ]
    from settings.loader import strict_settings

    assert not strict_settings({"CI": "false", "STRICT_SETTINGS": "0"}) and strict_settings({"CI": "1"})
