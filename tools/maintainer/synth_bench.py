"""`make bench`: median wall time of `cdk synth` of this app against a one-bucket CDK app.

Same CDK CLI, same Python and virtual environment, same run, alternating so that a busy machine slows
both alike. Prints both medians and the ratio (goal: at most 1.5x; limit: 2x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from settings.context_files import REPO

CDK = [str(REPO / "node_modules" / ".bin" / "cdk")]

BASELINE_APP = """
import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

app = cdk.App()
stack = cdk.Stack(app, "OneBucket", env=cdk.Environment(region="sa-east-1"))
s3.Bucket(stack, "Bucket")
app.synth()
"""


def _time_synth(app_dir: Path, outdir: Path, extra_env: dict[str, str] | None = None) -> float:
    env = os.environ | {"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"} | (extra_env or {})
    start = time.perf_counter()
    subprocess.run(
        [*CDK, "synth", "--quiet", "--output", str(outdir)], cwd=app_dir, env=env, check=True, capture_output=True
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="synths of each app (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "baseline"
        baseline.mkdir()
        (baseline / "app.py").write_text(BASELINE_APP)
        (baseline / "cdk.json").write_text(f'{{"app": "{sys.executable} app.py"}}\n')
        ours: list[float] = []
        plain: list[float] = []
        unvalidated: list[float] = []
        for run in range(args.runs):
            ours.append(_time_synth(REPO, Path(tmp) / f"ours{run}"))
            plain.append(_time_synth(baseline, Path(tmp) / f"plain{run}"))
            # The same bucket app without CDK's built-in CloudFormation validation, which this app
            # turns off (cfn-lint in `make test` does that job): the like-for-like comparison.
            unvalidated.append(_time_synth(baseline, Path(tmp) / f"unvalidated{run}", {"CDK_VALIDATION": "false"}))
    ours_median = statistics.median(ours)
    print(f"cdk synth, median of {args.runs} alternating runs")
    rows = [
        ("this app (5 stacks, EKS, cdk8s)", ours),
        ("one-bucket app", plain),
        ("one-bucket app, no built-in validation", unvalidated),
    ]
    for label, times in rows:
        print(f"  {label:<40} {statistics.median(times):6.2f} s   runs: {', '.join(f'{t:.2f}' for t in times)}")
    ratio = ours_median / statistics.median(plain)
    strict_ratio = ours_median / statistics.median(unvalidated)
    print(
        f"  ratio to the one-bucket app: {ratio:.2f}x; to it without built-in validation: {strict_ratio:.2f}x (goal <="
        " 1.5x, limit <= 2x)"
    )
    return 0 if ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
