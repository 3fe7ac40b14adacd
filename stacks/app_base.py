"""The App every synth starts from, and how a synth fails: light enough (no service stack imported) that ci_app.py
stops on a bad setting without loading the service stacks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from aws_cdk import App

PROJECT_TAG = "ray-llm-eks-pd"
# No construct creation stack traces in the cloud assembly: they hold the jsii kernel's temporary
# paths, so two synths of the same input would differ.
DETERMINISTIC_CONTEXT = {"aws:cdk:disable-stack-trace": True, "aws:cdk:disable-creation-stack-traces": True}


def new_app(outdir: str | None = None) -> App:
    """The App every synth uses (`cdk synth` and the tests): built-in CloudFormation validation off,
    because the tests run cfn-lint over every template (the same schema and more) without adding seconds
    to every synth; no stack traces, for determinism."""
    return App(
        builtin_cloud_formation_validation=False, stack_traces=False, context=DETERMINISTIC_CONTEXT, outdir=outdir
    )


def synthesize_or_say_why(app: App, build: Callable[[App], object]) -> int:
    """Build the stacks and synthesize; a failure (a construct rejecting a value the settings check let
    through) is one line on stderr and exit 1, the trace only with CDK_DEBUG set."""
    try:
        build(app)
        app.synth()
    except Exception as error:
        if os.environ.get("CDK_DEBUG"):
            raise
        first_line = next((line for line in str(error).splitlines() if line.strip()), type(error).__name__)
        print(f"error: synthesis failed: {first_line} (set CDK_DEBUG=true for the full trace)", file=sys.stderr)
        return 1
    return 0
