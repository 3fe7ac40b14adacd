"""`make review BASE=<git ref>`: what a change would do, offline, before anyone deploys it.

Synthesizes BASE (in a temporary git worktree) and the working tree with the pinned CDK CLI, no AWS
credentials, then prints a table of resources added, changed, replaced and destroyed per stack, for each
stack whose template changed `cdk diff --template` (the CLI's own diff of two synthesized templates; a
stack whose template is byte-identical on both sides is said to be unchanged, without starting the CLI),
and the diff of the golden Kubernetes manifests (dist/). Exits 1 when a protected resource (the VPC and its subnets,
the cluster, a nodegroup, the KMS key, the placement group, …) would be replaced or destroyed, naming
each one and the property that forces it, unless ALLOW_REPLACEMENT=1.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from preflight.template_plan import (
    ADD,
    MODIFY,
    PROTECTED_TYPES,
    REMOVE,
    REPLACE,
    ResourceChange,
    clashes_across_stacks,
    counts,
    plan,
)
from settings.context_files import REPO

CDK = REPO / "node_modules" / ".bin" / "cdk"
UNCHANGED = "template unchanged (byte-identical to BASE's)"


class ReviewError(Exception):
    """One line for the user: what went wrong and with which input."""


def _git(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def _environment() -> dict[str, str]:
    # Both sides see the same settings (environment and their own cdk.json); no credentials are used.
    env = dict(os.environ)
    env.update(
        {
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "CDK_DISABLE_VERSION_CHECK": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    return env


def _cdk(args: list[str], *, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The pinned CDK CLI, without notices, in the review's environment."""
    return subprocess.run(
        [str(CDK), *args, "--no-notices"], cwd=cwd, env=_environment(), capture_output=True, text=True, check=False
    )


def synthesize(source: Path, outdir: Path, label: str) -> list[str]:
    """`cdk synth` of the app in ``source`` into ``outdir``; returns its stack names in deploy order."""
    result = _cdk(
        ["synth", "--quiet", "--app", f"{sys.executable} app.py", "--output", str(outdir), "--no-version-reporting"],
        cwd=source,
    )
    if result.returncode != 0:
        lines = [
            line
            for line in (result.stderr + result.stdout).splitlines()
            if line.strip() and not line.startswith("notice:")
        ]
        error = next(
            (line for line in lines if line.startswith("error:")), lines[-1] if lines else f"exit {result.returncode}"
        )
        raise ReviewError(f"{label} cannot be synthesized: {error.removeprefix('error: ')}")
    manifest = json.loads((outdir / "manifest.json").read_text())
    stacks = [
        name for name, artifact in manifest["artifacts"].items() if artifact["type"] == "aws:cloudformation:stack"
    ]
    return sorted(stacks, key=lambda name: len(manifest["artifacts"][name].get("dependencies", [])))


def cdk_diff(stack: str, head_out: Path, base_template: Path) -> str:
    result = _cdk(
        ["diff", stack, "--exclusively", "--app", str(head_out), "--template", str(base_template), "--no-color"],
        cwd=REPO,
    )
    return (result.stdout + result.stderr).strip()


def manifests_diff(base_dist: Path, head_dist: Path) -> str:
    names = sorted(
        {p.relative_to(d).as_posix() for d in (base_dist, head_dist) if d.exists() for p in d.rglob("*") if p.is_file()}
    )
    chunks: list[str] = []
    for name in names:
        before = (base_dist / name).read_text().splitlines(keepends=True) if (base_dist / name).exists() else []
        after = (head_dist / name).read_text().splitlines(keepends=True) if (head_dist / name).exists() else []
        chunks.extend(difflib.unified_diff(before, after, f"base/dist/{name}", f"head/dist/{name}"))
    return "".join(chunks)


def _why(change: ResourceChange) -> str:
    if change.action == REMOVE:
        return "removed from the template"
    return f"{', '.join(change.replaced_by)} cannot change in place"


def report(
    base: str, stacks: list[str], plans: dict[str, list[ResourceChange]], diffs: dict[str, str], manifests: str
) -> tuple[str, list[str]]:
    """The markdown report and the protected replacements it found."""
    protected = [
        f"`{stack}` {c.resource_type} `{c.logical_id}` is {'replaced' if c.action == REPLACE else 'destroyed'}:"
        f" {_why(c)} ({PROTECTED_TYPES[c.resource_type]})"
        for stack in stacks
        for c in plans.get(stack, [])
        if c.protected
    ] + [
        f"{clash} (destroy the stack that holds the old one first)"
        for clash in clashes_across_stacks([(stack, plans.get(stack, [])) for stack in stacks])
    ]
    lines = [f"## Review: `{base}` → working tree", ""]
    lines += ["| Stack | Added | Changed | Replaced | Destroyed |", "|---|---:|---:|---:|---:|"]
    for stack in stacks:
        tally = counts(plans.get(stack, []))
        lines.append(f"| `{stack}` | {tally[ADD]} | {tally[MODIFY]} | {tally[REPLACE]} | {tally[REMOVE]} |")
    lines.append("")
    if protected:
        lines += [
            (
                "**Protected resources replaced or destroyed** (set `ALLOW_REPLACEMENT=1`, or the `allow-replacement`"
                " label, to accept):"
            ),
            "",
        ]
        lines += [f"- {item}" for item in protected] + [""]
    else:
        lines += ["No protected resource is replaced or destroyed.", ""]
    for stack in stacks:
        if diffs.get(stack) == UNCHANGED:
            lines += [f"`cdk diff {stack}`: {UNCHANGED}.", ""]
            continue
        lines += [
            f"<details><summary><code>cdk diff {stack}</code></summary>",
            "",
            "```",
            diffs.get(stack, "(new stack)"),
            "```",
            "",
            "</details>",
            "",
        ]
    lines += ["### Kubernetes manifests (dist/)", ""]
    lines += ["```diff", manifests.rstrip(), "```"] if manifests else ["No change."]
    return "\n".join(lines) + "\n", protected


def review(base: str, workdir: Path) -> tuple[str, list[str]]:
    resolved = _git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if not base or resolved.returncode != 0:
        raise ReviewError(
            f"BASE={base!r} is not a commit of this repository (a branch, tag or commit such as origin/main or HEAD~1)"
        )
    worktree = workdir / "base"
    added = _git("worktree", "add", "--detach", str(worktree), resolved.stdout.strip())
    if added.returncode != 0:
        raise ReviewError(
            f"BASE={base!r}: git worktree add failed:"
            f" {added.stderr.strip().splitlines()[-1] if added.stderr.strip() else added.returncode}"
        )
    try:
        base_stacks = synthesize(worktree, workdir / "base.out", f"BASE={base!r}")
        head_stacks = synthesize(REPO, workdir / "head.out", "the working tree")
        stacks = head_stacks + [s for s in base_stacks if s not in head_stacks]
        plans: dict[str, list[ResourceChange]] = {}
        diffs: dict[str, str] = {}
        for stack in stacks:
            base_template = workdir / "base.out" / f"{stack}.template.json"
            head_template = workdir / "head.out" / f"{stack}.template.json"
            before = json.loads(base_template.read_text()) if base_template.exists() else None
            after = json.loads(head_template.read_text()) if head_template.exists() else None
            plans[stack] = plan(before, after)
            if before is not None and after is not None:
                # The CLI is a Node process per stack; an identical template has nothing for it to show.
                same = base_template.read_bytes() == head_template.read_bytes()
                diffs[stack] = UNCHANGED if same else cdk_diff(stack, workdir / "head.out", base_template)
            elif after is None:
                diffs[stack] = "(stack removed: every resource is destroyed)"
        return report(base, stacks, plans, diffs, manifests_diff(worktree / "dist", REPO / "dist"))
    finally:
        _git("worktree", "remove", "--force", str(worktree))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git ref to compare the working tree with")
    parser.add_argument("--output", type=Path, help="also write the markdown report to this file")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="review-") as tmp:
            text, protected = review(args.base, Path(tmp))
    except ReviewError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(text)
    if args.output:
        args.output.write_text(text)
    if protected and os.environ.get("ALLOW_REPLACEMENT") != "1":
        print(
            f"error: {len(protected)} protected resource(s) replaced or destroyed; ALLOW_REPLACEMENT=1 accepts them",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
