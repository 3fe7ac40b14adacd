"""The checks of a deploy over deployed stacks that ask AWS and the cluster beyond the deployed templates:
which stacks import an export now (ListImports), the cluster's KubeRay CRDs (kubectl), the account's
control-plane log group. The templates' own plan is preflight/redeploy.py's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from preflight.cluster_access import ClusterUnreachable, Kubectl, cluster_kubectl
from preflight.deployed import Deployed, find_resources
from preflight.redeploy import Redeploy
from preflight.results import CheckResult, fail, ok
from settings import versions

KUBERAY_CRD_LABEL = "ray-llm.aws/kuberay-crds-version"


def _export_names(template: Mapping[str, Any]) -> set[str]:
    """The export names a template declares (CDK writes them as literal strings)."""
    outputs = template.get("Outputs", {})
    return {name for output in outputs.values() if isinstance(name := output.get("Export", {}).get("Name"), str)}


def removed_exports(redeploy: Redeploy, deployed: Deployed) -> dict[str, str]:
    """export name -> its stack, for every export a deployed stack has and its synthesized template drops."""
    return {
        export: stack
        for stack, template in redeploy.templates.items()
        if stack in deployed.stacks
        for export in sorted(_export_names(deployed.stacks[stack].template) - _export_names(template))
    }


def importing_stacks(cloudformation: Any, export: str) -> list[str]:
    """The stacks that import an export now (ListImports); CloudFormation answers an error when none does."""
    try:
        return [
            str(name)
            for page in cloudformation.get_paginator("list_imports").paginate(ExportName=export)
            for name in page.get("Imports", [])
        ]
    except ClientError as error:
        if "is not imported by any stack" in str(error):
            return []
        raise


def check_removed_exports(redeploy: Redeploy, deployed: Deployed, cloudformation: Any) -> CheckResult:
    """CloudFormation refuses to delete an export another stack still imports, and `make deploy` updates the exporting
    stack first (it comes earlier in the order): e.g. GCS_FAULT_TOLERANCE redis -> off takes the store's exports out of
    the system stack while the deployed serving stack imports them."""
    name = "removed-exports"
    removed = removed_exports(redeploy, deployed)
    if not removed:
        return ok(name, "this deploy removes no export")
    blocked = {
        export: (stack, importers)
        for export, stack in removed.items()
        if (importers := importing_stacks(cloudformation, export))
    }
    if not blocked:
        return ok(name, f"{len(removed)} export(s) removed, none imported by a deployed stack")
    importers = sorted({i for _, found in blocked.values() for i in found})
    detail = "; ".join(
        f"{stack} would delete export {export}, which {', '.join(found)} import(s)"
        for export, (stack, found) in blocked.items()
    )
    return fail(
        name,
        detail,
        f're-create the importing stack(s) without the import: `make destroy STACKS="{" ".join(importers)}"`, then'
        " `make deploy`",
    )


def deployed_kuberay_version(deployed: Deployed) -> str | None:
    for stack in deployed.stacks.values():
        for resource in find_resources(
            stack.template, "Custom::AWSCDK-EKS-HelmChart", Chart=versions.KUBERAY_OPERATOR.chart
        ).values():
            return str(resource["Properties"].get("Version"))
    return None


def run_kubectl(redeploy: Redeploy, args: list[str]) -> subprocess.CompletedProcess[str]:
    """kubectl against this cluster only (a kubeconfig of its own, see preflight.cluster_access)."""
    try:
        with cluster_kubectl(redeploy.region, redeploy.cluster_name, timeout=60) as kubectl:
            return kubectl(args)
    except ClusterUnreachable as error:
        return subprocess.CompletedProcess(["kubectl", *args], 1, "", str(error))


def check_kuberay_crds(redeploy: Redeploy, deployed: Deployed, kubectl: Kubectl | None = None) -> CheckResult:
    """Helm installs a chart's CRDs once and never upgrades them: a new KubeRay needs them applied first."""
    name = "kuberay-crds"
    current = deployed_kuberay_version(deployed)
    target = redeploy.kuberay_version
    if current is None or current == target:
        return ok(name, f"KubeRay {target}: {'installed with its CRDs by Helm' if current is None else 'unchanged'}")
    label = KUBERAY_CRD_LABEL.replace(".", "\\.")
    run = kubectl or (lambda args: run_kubectl(redeploy, args))
    result = run(
        [
            "get",
            "crd",
            "rayservices.ray.io",
            "rayclusters.ray.io",
            "-o",
            f"jsonpath={{.items[*].metadata.labels.{label}}}",
        ]
    )
    found = result.stdout.split() if result.returncode == 0 else []
    fix = f"apply the KubeRay {target} CRDs first: `make kuberay-crds`, then `make deploy`"
    if result.returncode != 0:
        return fail(
            name, f"KubeRay {current} -> {target}; cannot read the cluster's CRDs: {result.stderr.strip()[:200]}", fix
        )
    if found == [target, target]:
        return ok(name, f"KubeRay {current} -> {target}; the {target} CRDs are applied")
    return fail(
        name,
        f"KubeRay {current} -> {target}; the cluster's CRDs are not those of {target} (Helm never upgrades them)",
        fix,
    )


def check_control_plane_log_group(redeploy: Redeploy, deployed: Deployed, logs: Any) -> CheckResult:
    """EKS never deletes /aws/eks/NAME/cluster, and EKS itself creates it when a cluster logs before our
    stack owns it (an earlier cluster of the name, or a cluster deployed before the stack created the
    group): the create of our log group of the same name then fails."""
    name = "control-plane-log-group"
    group = f"/aws/eks/{redeploy.cluster_name}/cluster"
    owned = any(
        find_resources(stack.template, "AWS::Logs::LogGroup", LogGroupName=group) for stack in deployed.stacks.values()
    )
    if owned:
        return ok(name, f"{group} belongs to a deployed stack")
    found = [g for g in logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"] if g["logGroupName"] == group]
    if not found:
        return ok(name, f"{group} does not exist yet")
    return fail(
        name,
        f"{group} already exists outside the stacks (EKS created it for an earlier cluster of this name, or before the"
        " stack owned it)",
        f"remove it (`aws logs delete-log-group --region {redeploy.region} --log-group-name {group}`; export its logs"
        " first if you need them), then deploy",
    )
