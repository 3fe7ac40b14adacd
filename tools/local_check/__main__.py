"""`python -m tools.local_check plan|run …`: the project's half imports the CDK, the GPU host's half does not."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("plan", "run"):
        print(
            "usage: python -m tools.local_check plan [--output FILE] | run [--plan FILE] [options]  (run --help)",
            file=sys.stderr,
        )
        return 2
    if argv[0] == "plan":
        from tools.local_check.plan import main as plan

        return plan(argv[1:])
    from tools.local_check.runner import main as run

    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
