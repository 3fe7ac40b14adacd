#!/usr/bin/env python3
"""CDK entry point of the CI access stack (GitHub OIDC provider, CI diff and deploy roles).

Deployed apart from the service stacks, by an administrator with their own credentials:
`GITHUB_REPOSITORY=org/repo make ci-access`. Like app.py: the settings are read and checked once, and a
bad one stops the synth with one line; region-only environment, so a synth needs no credentials.
"""

from __future__ import annotations

import os
import sys

from aws_cdk import Environment

from settings.ci_access import load_ci_access_settings
from settings.errors import SettingError
from stacks.app_base import new_app, synthesize_or_say_why


def main() -> int:
    app = new_app()
    try:
        settings = load_ci_access_settings(os.environ, app.node.get_all_context())
    except SettingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from stacks.ci_access_stack import CiAccessStack  # only once the settings are good: a bad one stops in a second

    return synthesize_or_say_why(
        app,
        lambda app: CiAccessStack(app, settings.stack_name, settings=settings, env=Environment(region=settings.region)),
    )


if __name__ == "__main__":
    sys.exit(main())
