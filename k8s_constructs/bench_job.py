"""An in-cluster benchmark of the Serve endpoint: a Kubernetes Job that runs vLLM's own `vllm bench serve`
(the Ray LLM image ships vLLM) against the RayService's Serve service, with a mixed workload.

The mix is what prefill/decode disaggregation is for: a stream of long prompts (RAG, summarisation)
and, at the same time, a stream of short prompts at a few request rates. With PD, the long prompts'
prefill runs on the prefill node, so the short requests' inter-token latency stays flat as the long
stream's rate rises; without PD it climbs. Each run prints one line `BENCH_RESULT <json>` (vLLM's saved
result plus the run's label), which `make bench-serving` collects from the Job's log.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

import cdk8s
import cdk8s_plus_28 as kplus
from constructs import Construct

from settings.scheduling import SYSTEM_NODE_LABELS

RESULT_MARKER = "BENCH_RESULT "


def client_security_context(*, read_only_root_filesystem: bool) -> kplus.ContainerSecurityContextProps:
    """The Jobs that are clients of the cluster or of AWS (the benchmark, the mirror): no capability, no escalation;
    root only because the Ray LLM image's user is root."""
    return kplus.ContainerSecurityContextProps(
        ensure_non_root=False,
        read_only_root_filesystem=read_only_root_filesystem,
        allow_privilege_escalation=False,
        capabilities=kplus.ContainerSecutiryContextCapabilities(drop=[kplus.Capability.ALL]),
        seccomp_profile=kplus.SeccompProfile(type=kplus.SeccompProfileType.RUNTIME_DEFAULT),
    )


@dataclass(frozen=True)
class Workload:
    """One class of requests: prompt and output lengths, how many, at what rate (requests/s)."""

    label: str
    input_len: int
    output_len: int
    num_prompts: int


LONG = Workload("long", input_len=3000, output_len=64, num_prompts=40)
SHORT = Workload("short", input_len=128, output_len=256, num_prompts=60)
RATES = (0.5, 1.0, 2.0)  # requests/s of each stream
# Then a ramp of mid-sized requests alone, at rates past one decode replica's capacity (~16 streams at once, the
# decode target): each step lasts RAMP_STEP_S, the last RAMP_HOLD_S, long enough for a new GPU node to join when
# DECODE_MAX_REPLICAS allows one (`make bench-serving` records the replicas and GPU nodes meanwhile).
RAMP = Workload("ramp", input_len=512, output_len=256, num_prompts=0)
RAMP_RATES = (1.0, 2.0, 4.0, 8.0)
RAMP_STEP_S = 120
RAMP_HOLD_S = 600
# At most this many ramp requests in flight (3 decode replicas' target): the rest wait in the client, so a rate
# past the cluster's capacity does not queue without bound and the run ends in about its planned time.
RAMP_MAX_CONCURRENCY = 48


@dataclass(frozen=True)
class BenchJobProps:
    name: str  # the Job's name
    namespace: str
    image: str  # the Ray LLM image (vLLM inside), by digest when `make lookup` resolved it
    base_url: str  # the Serve service, e.g. http://ray-llm-serve-svc.inference.svc.cluster.local:8000
    model_id: str
    tokenizer: str  # the Hugging Face repository (MODEL_SOURCE)
    rates: tuple[float, ...] = RATES
    long: Workload = LONG
    short: Workload = SHORT
    ramp_rates: tuple[float, ...] = RAMP_RATES
    ramp_step_s: int = RAMP_STEP_S
    ramp_hold_s: int = RAMP_HOLD_S
    ramp_rate_workload: Workload = RAMP
    # SERVE_API_KEYS=on: the Kubernetes Secret (key `key`) `make bench-serving` makes for the run from the API keys'
    # secret; vLLM's benchmark sends OPENAI_API_KEY as the bearer token.
    api_key_secret: str = ""


def bench_command(props: BenchJobProps, workload: Workload, rate: float, *, max_concurrency: int | None = None) -> str:
    """One `vllm bench serve` run, printing its saved result on one line."""
    result = f"/tmp/{workload.label}-{rate}.json"
    args = [
        "vllm", "bench", "serve",
        "--backend", "openai-chat", "--base-url", props.base_url, "--endpoint", "/v1/chat/completions",
        "--model", props.model_id, "--tokenizer", props.tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(workload.input_len), "--random-output-len", str(workload.output_len),
        "--num-prompts", str(workload.num_prompts), "--request-rate", str(rate), "--seed", "1",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", "/tmp", "--result-filename", result.removeprefix("/tmp/"),
    ]  # fmt: skip
    if max_concurrency:
        args += ["--max-concurrency", str(max_concurrency)]
    label = f'{{"workload": "{workload.label}", "rate": {rate}}}'
    merge = (
        "python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(json.loads(sys.argv[2]));"
        f' print("{RESULT_MARKER}" + json.dumps(r))\''
    )
    return f"{shlex.join(args)} > /tmp/{workload.label}-{rate}.log 2>&1 && {merge} {result} {shlex.quote(label)}"


def ramp_steps(props: BenchJobProps) -> list[tuple[Workload, float]]:
    """The ramp's runs: each rate for a step's length, the last one held."""
    steps = []
    for number, rate in enumerate(props.ramp_rates, 1):
        seconds = props.ramp_hold_s if number == len(props.ramp_rates) else props.ramp_step_s
        steps.append((replace(props.ramp_rate_workload, num_prompts=max(1, int(rate * seconds))), rate))
    return steps


def concurrent_runs(long: str, short: str, stem: str) -> str:
    """The long and the short run at the same time; their result lines printed one after the other once both
    ended. Printed as each run ends, two lines longer than a pipe's atomic write (vLLM's saved results are) could
    interleave, as two lines of a test's stand-in runs did under load. `wait PID` returns each run's own status."""
    return (
        f"( {long} ) > {stem}.long & long=$!; ( {short} ) > {stem}.short & short=$!; wait $long; wait $short; "
        f"cat {stem}.long {stem}.short"
    )


def bench_script(props: BenchJobProps) -> str:
    """For each rate: the long and the short stream at the same time, then both results; then the ramp."""
    steps = ["set -e"]
    for rate in props.rates:
        # A failed run fails the Job (`wait PID`, set -e).
        steps.append(
            concurrent_runs(
                bench_command(props, props.long, rate), bench_command(props, props.short, rate), f"/tmp/pair-{rate}"
            )
        )
    steps += [
        bench_command(props, workload, rate, max_concurrency=RAMP_MAX_CONCURRENCY)
        for workload, rate in ramp_steps(props)
    ]
    return "\n".join(steps)


class BenchJobChart(cdk8s.Chart):
    """Exposes ``job``."""

    def __init__(self, scope: Construct, construct_id: str, *, props: BenchJobProps) -> None:
        super().__init__(scope, construct_id, disable_resource_name_hashes=True)
        self.job = kplus.Job(
            self,
            "Bench",
            metadata=cdk8s.ApiObjectMetadata(
                name=props.name, namespace=props.namespace, labels={"app.kubernetes.io/name": props.name}
            ),
            backoff_limit=0,
            active_deadline=cdk8s.Duration.hours(2),
            ttl_after_finished=cdk8s.Duration.hours(12),
            automount_service_account_token=False,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
            containers=[
                kplus.ContainerProps(
                    name="bench",
                    image=props.image,
                    command=["/bin/bash", "-c", bench_script(props)],
                    # A client: no GPU, a few CPUs for the tokenizer and the asyncio load generator.
                    resources=kplus.ContainerResources(
                        cpu=kplus.CpuResources(request=kplus.Cpu.units(1), limit=kplus.Cpu.units(2)),
                        memory=kplus.MemoryResources(request=cdk8s.Size.gibibytes(2), limit=cdk8s.Size.gibibytes(4)),
                    ),
                    security_context=client_security_context(read_only_root_filesystem=False),
                    env_variables={
                        "HF_HOME": kplus.EnvValue.from_value("/tmp/hf"),
                        **(
                            {
                                "OPENAI_API_KEY": kplus.EnvValue.from_secret_value(
                                    kplus.SecretValue(
                                        secret=kplus.Secret.from_secret_name(self, "ApiKey", props.api_key_secret),
                                        key="key",
                                    )
                                )
                            }
                            if props.api_key_secret
                            else {}
                        ),
                    },
                )
            ],
        )
        self.job.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.is_("role", SYSTEM_NODE_LABELS["role"])))
