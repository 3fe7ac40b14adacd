"""Session-wide fixtures: each configuration is synthesized once and shared by every test."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

from settings import Settings, load_settings
from settings.specs import SPECS
from tests.pinned import PINNED, pinned_environ

REPO = Path(__file__).resolve().parent.parent

# The CDK and the stacks are imported where a synth needs them: xdist's controller process loads this file too, and
# importing them there (its jsii kernel included) cost ~2 CPU-seconds it never used.
if TYPE_CHECKING:
    from aws_cdk.assertions import Template

    from stacks.application import Deployment


@dataclass
class Synth:
    """One synthesized app: its settings, stacks, templates (as JSON and as assertions) and cdk-nag report."""

    settings: Settings
    deployment: Deployment
    outdir: Path
    templates: dict[str, dict[str, Any]]
    nag_error: str

    def template(self, stack: str) -> Template:
        from aws_cdk.assertions import Template

        return Template.from_json(self.templates[stack])

    def resources(self, stack: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.templates[stack]["Resources"].items() if v["Type"] == resource_type}

    @property
    def nag_report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.outdir / "validation-report.json").read_text())
        return data


# The templates of every synth this process made, with its settings: tests/day2_helpers.py takes them instead of
# synthesizing the same configuration again (the session's default and parked synths are day 2's "before").
SYNTHESIZED: list[tuple[Settings, dict[str, dict[str, Any]]]] = []


def synthesize(settings: Settings, outdir: Path) -> Synth:
    from aws_cdk import Validations
    from cdk_nag import AwsSolutionsChecks

    from stacks.application import build_stacks, new_app

    app = new_app(str(outdir))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    deployment = build_stacks(app, settings)
    nag_error = ""
    try:
        app.synth()
    except Exception as error:  # cdk-nag findings fail the synth; test_nag reports them
        nag_error = str(error)
    templates = {
        part: json.loads((outdir / f"{name}.template.json").read_text()) for part, name in settings.stack_names.items()
    }
    SYNTHESIZED.append((settings, templates))
    return Synth(settings=settings, deployment=deployment, outdir=outdir, templates=templates, nag_error=nag_error)


def settings_for(env: Mapping[str, str] | None = None, context: Mapping[str, Any] | None = None) -> Settings:
    """The settings of `env` and `context` over the configuration the tests pin (tests/pinned.py), not the code's
    defaults: only the tests marked `defaults` read those (load_settings({}, {}))."""
    return load_settings(env or {}, context or {}, PINNED)


# The longest files first: xdist hands out whole files in collection order (--no-loadscope-reorder), and a long file
# started last would run alone at the end.
LONGEST_FIRST = (
    "test_gcs_fault_tolerance",
    "test_topology",
    "test_local_check",
    "test_review",
    "test_head_security",
    "test_pinned",
    "test_setting_landing",
)


# `make test-fast` leaves these out (marker `slow`): a test that synthesizes the whole app (a *_synth fixture, or
# app.py run as the synth runs it), starts a real Ray cluster, or waits on a background scenario. CI runs them all.
SLOW_FIXTURES = frozenset({"ray_cluster"})
SLOW_MODULES = frozenset(
    {
        "test_topology", "test_gcs_fault_tolerance", "test_autoscaling_ray", "test_serve_auth",
        "test_local_check_faults", "test_head_security", "test_setting_landing", "test_pinned",
        "test_review", "test_examples",
    }
)  # fmt: skip
# Single tests of that kind in modules that are otherwise quick.
SLOW_TESTS = frozenset(
    {
        "tests/test_local_check.py::test_the_whole_flow_on_a_real_ray_cluster_with_a_stand_in_engine",
        "tests/test_self_contained.py::test_a_copy_of_the_repository_alone_validates_its_manifests",
        "tests/test_cloudformation_checks.py::test_two_synths_are_byte_identical",
        "tests/test_ci_access_settings.py::test_two_synths_are_byte_identical",
    }
)


def _slow(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        item.path.stem in SLOW_MODULES
        or any(name.endswith("_synth") for name in fixtures)
        or bool(fixtures & SLOW_FIXTURES)
        or item.get_closest_marker("own_process") is not None
        or item.nodeid in BACKGROUND
        or item.nodeid.split("[")[0] in SLOW_TESTS
        or "_synth" in item.nodeid.partition("[")[2]  # parametrized over synth fixtures by name
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _slow(item):
            item.add_marker(pytest.mark.slow)
    # Last: the files whose long scenario runs in the background from the session's start (BACKGROUND below); by the
    # time a worker reaches them it has finished.
    last = {Path(nodeid.split("::")[0]).stem for nodeid in BACKGROUND}
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)} | dict.fromkeys(last, len(LONGEST_FIRST) + 1)
    items.sort(key=lambda item: rank.get(item.path.stem, len(LONGEST_FIRST)))


# The real-Ray scenarios that wait most of their run (the autoscaler proof: a stream that outlives Ray Serve's drain,
# the autoscaler's delays, about a minute at under half a core; the API-key proof: Serve's start, the keys' rotation;
# the local check's planted faults: four deployments and their transfer statistics' settling, ~45 s mostly asleep)
# start in the background at the session's first test, when their test was collected, so that no worker waits with
# them; each test, run last, reads what its scenario printed (scenario_result). One worker starts each: a lock in the
# directory every xdist worker's temporary directory is in.
# Test -> (the scenario's module, the function that makes its input).
AUTOSCALER_PROOF = (
    "tests/test_autoscaling_ray.py::test_load_on_decode_adds_a_decode_node_only_and_the_cluster_returns_to_its_minimum"
)
SERVE_AUTH_PROOF = "tests/test_serve_auth.py::test_keys_are_enforced_rotated_without_a_restart_and_never_logged"
LOCAL_CHECK_FAULTS = "tests/test_local_check_faults.py::test_faults_in_the_pd_engines_fail_the_steps_that_see_them"
BACKGROUND = {
    AUTOSCALER_PROOF: ("tests.autoscaling_scenario", "tests.test_autoscaling_ray:scenario_spec"),
    SERVE_AUTH_PROOF: ("tests.serve_auth_scenario", "tests.test_serve_auth:scenario_spec"),
    LOCAL_CHECK_FAULTS: ("tests.local_check_faults_scenario", "tests.test_local_check_faults:scenario_spec"),
}
SCENARIO_TIMEOUT_S = 420  # the longest a scenario's test waits for it
_background_dir: list[Path] = []  # the session's shared directory, once the fixture has run


def _background_files(nodeid: str) -> dict[str, Path]:
    stem = _background_dir[0] / nodeid.rsplit("::", 1)[-1]
    return {kind: stem.with_suffix(f".{kind}") for kind in ("lock", "json", "out", "err", "rc")}


@pytest.fixture(scope="session", autouse=True)
def _background_scenarios(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    base = tmp_path_factory.getbasetemp()
    _background_dir[:] = [base.parent if hasattr(request.config, "workerinput") else base]
    collected = {item.nodeid for item in request.session.items}
    started: list[subprocess.Popen[bytes]] = []
    for nodeid, (module, spec_of) in BACKGROUND.items():
        if nodeid not in collected:
            continue
        files = _background_files(nodeid)
        try:
            os.close(os.open(files["lock"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:  # another worker started it
            continue
        spec_module, function = spec_of.split(":")
        try:
            files["json"].write_text(json.dumps(getattr(importlib.import_module(spec_module), function)()))
        except Exception:  # the test builds it again, runs the scenario itself and shows the error
            files["lock"].unlink()
            continue
        q = {kind: shlex.quote(str(path)) for kind, path in files.items()}
        script = (
            f"{shlex.join(_scenario_command(module, files['json']))} > {q['out']} 2> {q['err']};"
            f" echo $? > {q['rc']}.tmp && mv {q['rc']}.tmp {q['rc']}"
        )
        started.append(subprocess.Popen(["bash", "-c", script], cwd=REPO, start_new_session=True))
    yield
    # This worker's session ended while a scenario it started still runs: its test may be on another worker, waiting
    # for it (this worker ran out of files first), so let it finish, within its test's own limit; an interrupted
    # session stops it.
    interrupted = request.session.exitstatus == pytest.ExitCode.INTERRUPTED
    for process in started:
        if process.poll() is None and not interrupted:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=SCENARIO_TIMEOUT_S)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # the scenario kills its own Ray cluster
            process.wait(timeout=60)


def scenario_result(
    nodeid: str, spec: dict[str, Any], spec_file: Path, *, timeout: float = SCENARIO_TIMEOUT_S
) -> dict[str, Any]:
    """What the test's BACKGROUND scenario printed last: the run started at the session's start, once it has finished,
    or one run now when none was started (the test run on its own, or its input could not be made then)."""
    module, _ = BACKGROUND[nodeid]
    files = _background_files(nodeid) if _background_dir else None
    if files is None or not files["lock"].exists():
        return run_scenario(module, spec, spec_file, timeout=timeout)
    deadline = time.monotonic() + timeout
    while not files["rc"].exists():
        assert time.monotonic() < deadline, f"{nodeid}: its background scenario did not finish within {timeout:.0f} s"
        time.sleep(0.5)
    assert json.loads(files["json"].read_text()) == json.loads(json.dumps(spec)), "the background run had another input"
    return _scenario_output(int(files["rc"].read_text()), files["out"].read_text(), files["err"].read_text())


@pytest.fixture(autouse=True)
def _pinned_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tools read os.environ (tools/entry.py) and subprocesses inherit it: both see the pinned configuration,
    never a setting exported in the shell that runs the tests. Only a pinned value the code's default no longer
    equals is set (an environment variable beats `-c` and cdk.json, which some tests set on purpose)."""
    for spec in SPECS:
        if spec.env in PINNED and PINNED[spec.env] != spec.default:
            monkeypatch.setenv(spec.env, PINNED[spec.env])
        else:
            monkeypatch.delenv(spec.env, raising=False)


@pytest.fixture(scope="session")
def default_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """The pinned base configuration (tests/pinned.py); equal to the built-in defaults while they agree (dist/)."""
    yield synthesize(settings_for(), tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="session")
def parked_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """GPU_NODE_COUNT=0: the GPUs parked, everything else kept."""
    yield synthesize(settings_for({"GPU_NODE_COUNT": "0"}), tmp_path_factory.mktemp("parked"))


@pytest.fixture(scope="session")
def p5_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """A multi-card type: p5.48xlarge has 32 network cards and 8 GPUs; with TENSOR_PARALLEL_SIZE=8 each
    phase's engine takes a whole node: one prefill node and one decode node, GPU_NODE_COUNT left empty."""
    settings = settings_for(
        {"GPU_NODE_TYPE": "p5.48xlarge", "TENSOR_PARALLEL_SIZE": "8", "GPU_AZ": "us-east-2b", "REGION": "us-east-2"}
    )
    yield synthesize(settings, tmp_path_factory.mktemp("p5"))


@pytest.fixture(scope="session")
def hf_token_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """HF_TOKEN_SECRET_NAME set: the Secrets Store CSI provider, Pod Identity and the workers' token wiring."""
    yield synthesize(settings_for({"HF_TOKEN_SECRET_NAME": "prod/hf-token"}), tmp_path_factory.mktemp("hf_token"))


@pytest.fixture(scope="session")
def observed_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """OBSERVABILITY=on: the add-on, the managed Prometheus collector, the dashboard and the alarms."""
    yield synthesize(settings_for({"OBSERVABILITY": "on"}), tmp_path_factory.mktemp("observability"))


@pytest.fixture(scope="session")
def private_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """ENDPOINT_ACCESS=private: the API reachable only from inside the VPC."""
    yield synthesize(settings_for({"ENDPOINT_ACCESS": "private"}), tmp_path_factory.mktemp("private"))


# One configuration with every feature that adds resources of its own (an S3 model source, the maxima, the GCS store):
# synthesized once instead of three times; each feature's tests read it under their own name.
FEATURES = {
    "MODEL_SOURCE": "s3://example-models/qwen3.5-9b",
    "PREFILL_MAX_REPLICAS": "2",
    "DECODE_MAX_REPLICAS": "3",
    "GCS_FAULT_TOLERANCE": "redis",
}


@pytest.fixture(scope="session")
def features_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    yield synthesize(settings_for(FEATURES), tmp_path_factory.mktemp("features"))


@pytest.fixture(scope="session")
def s3_synth(features_synth: Synth) -> Synth:
    """MODEL_SOURCE=s3://...: the workers' Pod Identity reads the prefix; the mirror Job's role writes it."""
    return features_synth


@pytest.fixture(scope="session")
def autoscaling_synth(features_synth: Synth) -> Synth:
    """PREFILL_MAX_REPLICAS=2 DECODE_MAX_REPLICAS=3: Serve, the Ray autoscaler and the Cluster Autoscaler."""
    return features_synth


@pytest.fixture(scope="session")
def gcs_synth(features_synth: Synth) -> Synth:
    """GCS_FAULT_TOLERANCE=redis: the ElastiCache store, its token, the head's identity and the RayCluster's options."""
    return features_synth


# The exposed endpoint as the "done when" runs it, with a DNS name in a hosted zone and access logs.
CERTIFICATE_ARN = "arn:aws:acm:sa-east-1:123456789012:certificate/0123abcd-0123-4567-89ab-0123456789ab"
ENDPOINT = {
    "SERVE_EXPOSURE": "internal",
    "SERVE_CERTIFICATE_ARN": CERTIFICATE_ARN,
    "SERVE_HOSTNAME": "llm.example.com",
    "SERVE_HOSTED_ZONE_ID": "Z0123456789ABCDEFGHIJ",
    "SERVE_ACCESS_LOGS": "on",
}


@pytest.fixture(scope="session")
def endpoint_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    """SERVE_EXPOSURE=internal with a certificate, a hosted zone and access logs: the controller, the Ingress, the
    keys."""
    yield synthesize(settings_for(ENDPOINT), tmp_path_factory.mktemp("endpoint"))


def run_scenario(
    module: str, spec: dict[str, Any], spec_file: Path, *, timeout: float, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A tests.*_scenario module (a real local Ray, in a process of its own) run on its spec: what it printed last,
    parsed. A scenario that fails fails the test with the end of its stderr."""
    spec_file.write_text(json.dumps(spec))
    done = subprocess.run(
        _scenario_command(module, spec_file),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )
    return _scenario_output(done.returncode, done.stdout, done.stderr)


def _scenario_command(module: str, spec_file: Path) -> list[str]:
    return [sys.executable, "-m", module, str(spec_file)]


def _scenario_output(returncode: int, stdout: str, stderr: str) -> dict[str, Any]:
    """What a scenario printed last, parsed; a scenario that failed fails the test with the end of its stderr."""
    assert returncode == 0, stderr[-3000:]
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def run_entry_point(
    module: str,
    env: Mapping[str, str],
    outdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    unset: tuple[str, ...] = (),
) -> tuple[int, str, str]:
    """`python app.py` (or ci_app.py) in this process: its main() with `env` over the pinned settings in os.environ
    (`unset` removed first), the CDK app writing to `outdir`; its exit status, stdout and stderr (file descriptors 1
    and 2: what Node printed too). Saves a Python start and a jsii kernel per run; one test per entry point still
    runs the real process (exit status, nothing else printed)."""
    entry = importlib.import_module(module)
    assert Path(str(entry.__file__)).parent == REPO, entry.__file__
    from stacks.application import new_app

    monkeypatch.setattr(entry, "new_app", lambda: new_app(str(outdir)))
    for name in unset:
        monkeypatch.delenv(name, raising=False)
    for name, value in pinned_environ(env).items():
        monkeypatch.setenv(name, value)
    capfd.readouterr()
    status: int = entry.main()
    out, err = capfd.readouterr()
    return status, out, err
