"""The Helm add-on registry (stacks/addons/): each chart declared once; the stacks, the preflight's
chart-index check, dist/helm/ and the docs' chart table follow it."""

from __future__ import annotations

import json
from typing import Any

from stacks.addons import HELM_ADDONS, chart_pins, enabled_addons
from stacks.addons.base import PLACEHOLDERS, HelmAddon
from tests.conftest import ENDPOINT, Synth, settings_for
from tools.maintainer.write_dist import render
from tools.preflight import preflight_input


def _releases(synth: Synth) -> dict[str, tuple[str, dict[str, object]]]:
    return {
        r["Properties"]["Release"]: (stack, r["Properties"])
        for stack, template in synth.templates.items()
        for r in template["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }


def test_each_enabled_add_on_is_installed_by_its_stack_as_declared(
    default_synth: Synth, hf_token_synth: Synth, endpoint_synth: Synth
) -> None:
    for synth in (default_synth, hf_token_synth, endpoint_synth):
        releases = _releases(synth)
        assert set(releases) == {a.release for a in enabled_addons(synth.settings)}
        for addon in enabled_addons(synth.settings):
            stack, props = releases[addon.release]
            pin = addon.pin(synth.settings)
            assert stack == addon.stack
            assert (props["Chart"], props["Version"], props["Repository"]) == (pin.chart, pin.version, pin.repository)
            assert props["Namespace"] == addon.namespace(synth.settings)
            assert _values_with_placeholders(props["Values"]) == addon.all_values(synth.settings, PLACEHOLDERS)
            assert props["Atomic"] is True and props["Wait"] is True


def _values_with_placeholders(values: Any) -> Any:
    """A release's Values as the chart gets them, with each deploy-time token (an import of another stack's
    output, or a reference) in place of its placeholder: the only token an add-on's values may hold is the VPC id."""
    if isinstance(values, str):
        return json.loads(values)
    (parts,) = [values["Fn::Join"][1]]
    return json.loads("".join(p if isinstance(p, str) else PLACEHOLDERS.vpc_id for p in parts))


def _service_accounts_named(values: Any) -> set[str]:
    """Every `serviceAccount.name` (at any depth) a chart's values set: the service accounts its pods run as."""
    found: set[str] = set()
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "serviceAccount" and isinstance(value, dict) and isinstance(value.get("name"), str):
                found.add(value["name"])
            found |= _service_accounts_named(value)
    elif isinstance(values, list):
        for item in values:
            found |= _service_accounts_named(item)
    return found


def _identity_problems(addon: HelmAddon) -> list[str]:
    from tests.conftest import settings_for

    named = _service_accounts_named(addon.all_values(settings_for(), PLACEHOLDERS))
    declared = {addon.pod_identity.service_account} if addon.pod_identity else set()
    return [
        f"{addon.release}: service account {name} without a Pod Identity grant" for name in sorted(named - declared)
    ] + [f"{addon.release}: Pod Identity for {name}, which its values never name" for name in sorted(declared - named)]


def test_every_service_account_an_add_on_names_has_its_grant() -> None:
    """An add-on whose chart runs as a named service account declares its Pod Identity (addons.install then creates the
    role, the association and the dependency); one that forgets fails here, not with AccessDenied in its pods' logs."""
    assert [problem for addon in HELM_ADDONS for problem in _identity_problems(addon)] == []
    forgetful = HelmAddon(
        construct_id="Forgetful",
        stack="system",
        pin=lambda s: HELM_ADDONS[0].pin(s),
        release="forgetful",
        namespace=lambda s: "kube-system",
        values=lambda s: {"serviceAccount": {"create": True, "name": "forgetful"}},
    )
    assert _identity_problems(forgetful) == ["forgetful: service account forgetful without a Pod Identity grant"]


def test_an_add_on_with_a_grant_gets_its_role_before_its_pods(autoscaling_synth: Synth) -> None:
    from stacks.addons import cluster_autoscaler

    template = autoscaling_synth.templates["system"]
    resources = template["Resources"]
    (release_id,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == "cluster-autoscaler"
    ]
    (association_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    association = resources[association_id]["Properties"]
    assert association_id.startswith("ClusterAutoscalerPodIdentity")
    assert (association["Namespace"], association["ServiceAccount"]) == (
        "kube-system",
        cluster_autoscaler.SERVICE_ACCOUNT,
    )
    assert association_id in resources[release_id]["DependsOn"]
    (role_id,) = [
        k for k, r in resources.items() if r["Type"] == "AWS::IAM::Role" and k.startswith("ClusterAutoscalerRole")
    ]
    assert association["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}


def test_the_secrets_provider_comes_only_with_a_token() -> None:
    releases = {a.release for a in enabled_addons(settings_for())}
    assert "secrets-store-csi-driver-provider-aws" not in releases
    assert "secrets-store-csi-driver-provider-aws" in {
        a.release for a in enabled_addons(settings_for({"HF_TOKEN_SECRET_NAME": "x/y"}))
    }


def test_the_cluster_autoscaler_comes_only_with_a_maximum() -> None:
    assert "cluster-autoscaler" not in {a.release for a in enabled_addons(settings_for())}
    assert "cluster-autoscaler" in {a.release for a in enabled_addons(settings_for({"PREFILL_MAX_REPLICAS": "2"}))}


def test_the_preflight_and_dist_follow_the_registry() -> None:
    settings = settings_for({"HF_TOKEN_SECRET_NAME": "x/y", "DECODE_MAX_REPLICAS": "2", **ENDPOINT})
    assert preflight_input(settings).helm_charts == chart_pins(settings) == tuple(a.pin(settings) for a in HELM_ADDONS)
    defaults = settings_for()
    helm_files = {name for name in render(defaults) if name.startswith("helm/")}
    assert helm_files == {f"helm/{a.release}.values.yaml" for a in enabled_addons(defaults)}


def test_every_add_on_says_what_it_is_for_and_keeps_its_construct_id() -> None:
    """The construct id names the release's logical ID: a renamed one would replace a deployed release."""
    ids = {a.release: a.construct_id for a in HELM_ADDONS}
    assert ids == {
        "kuberay-operator": "KubeRayOperator",
        "nvidia-device-plugin": "NvidiaDevicePlugin",
        "aws-efa-k8s-device-plugin": "EfaDevicePlugin",
        "secrets-store-csi-driver-provider-aws": "SecretsStoreCsiProvider",
        "cluster-autoscaler": "ClusterAutoscaler",
        "aws-load-balancer-controller": "AwsLoadBalancerController",
    }
    assert all(a.purpose for a in HELM_ADDONS)


def test_each_managed_add_on_is_installed_by_its_stack(default_synth: Synth, observed_synth: Synth) -> None:
    from stacks.addons.managed import MANAGED_ADDONS

    for synth in (default_synth, observed_synth):
        installed = {
            r["Properties"]["AddonName"]: (stack, r["Properties"])
            for stack, template in synth.templates.items()
            for r in template["Resources"].values()
            if r["Type"] == "AWS::EKS::Addon"
        }
        expected = {a.name: a for a in MANAGED_ADDONS if a.stack in synth.templates}
        assert set(installed) == set(expected)
        for name, (stack, props) in installed.items():
            addon = expected[name]
            assert stack == addon.stack
            assert props.get("ResolveConflicts") == ("OVERWRITE" if addon.follows_kubernetes_version else None)
            configuration = addon.configuration(synth.settings)
            assert (
                json.loads(props["ConfigurationValues"]) if "ConfigurationValues" in props else None
            ) == configuration


def test_a_managed_add_on_with_a_grant_gets_its_role_before_it(observed_synth: Synth) -> None:
    """The CloudWatch add-on's agent: its Pod Identity declared with the add-on (stacks/addons/managed.py), the same
    logical IDs as when the observability stack wired it by hand."""
    from stacks.addons.managed import MANAGED_ADDONS

    (addon,) = [a for a in MANAGED_ADDONS if a.pod_identity is not None]
    assert addon.pod_identity is not None
    resources = observed_synth.templates["observability"]["Resources"]
    (association_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    association = resources[association_id]["Properties"]
    assert association_id == "CloudWatchAgentPodIdentity"
    assert (association["Namespace"], association["ServiceAccount"]) == (
        addon.pod_identity.namespace,
        addon.pod_identity.service_account,
    )
    (addon_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::Addon"]
    assert association_id in resources[addon_id]["DependsOn"]
