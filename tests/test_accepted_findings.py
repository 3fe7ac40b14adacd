"""accepted-findings.yaml and the check `make checkov` runs with it; the Kubernetes objects checkov scans."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import Synth
from tools.maintainer.accepted_findings import Accepted, Finding, accepted, checkov_findings, main, unaccepted, unused
from tools.maintainer.k8s_objects import kuberay_pods, write


def test_every_entry_has_a_reason_and_a_known_check() -> None:
    entries = accepted()
    assert {e.validator for e in entries} == {"parliament", "checkov-kubernetes"}
    for entry in entries:
        assert len(entry.reason) > 20, entry
        if entry.validator == "checkov-kubernetes":
            assert re.fullmatch(r"CKV_K8S_\d+", entry.check), entry


def test_a_new_finding_and_a_stale_acceptance_both_fail() -> None:
    entries = [
        Accepted(
            "checkov-kubernetes",
            "CKV_K8S_16",
            ("Pod.*.ray-llm-prefill", "Pod.*.ray-llm-decode"),
            "*",
            "privileged for EFA",
        )
    ]
    ok = Finding("checkov-kubernetes", "CKV_K8S_16", "Pod.inference.ray-llm-prefill")
    new = Finding("checkov-kubernetes", "CKV_K8S_16", "Pod.inference.ray-llm-head")  # the head must never be privileged
    assert unaccepted([ok, new], entries) == [new]
    assert unused([ok], entries, "checkov-kubernetes") == []
    assert unused([new], entries, "checkov-kubernetes") == entries


def _report(tmp_path: Path, failed: list[tuple[str, str]], passed: int = 10) -> Path:
    report = {
        "check_type": "kubernetes",
        "results": {"failed_checks": [{"check_id": c, "resource": r} for c, r in failed]},
        "summary": {"passed": passed, "failed": len(failed)},
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    return path


def test_the_checkov_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One finding per accepted entry, named as its first glob with the namespace filled in.
    every_accepted = [
        (e.check, e.where[0].replace("Pod.*.", "Pod.inference.").replace("*", "Pod.inference.ray-llm-head"))
        for e in accepted()
        if e.validator == "checkov-kubernetes"
    ]
    assert checkov_findings(json.loads(_report(tmp_path, every_accepted).read_text()))
    assert main(["checkov-kubernetes", str(_report(tmp_path, every_accepted))]) == 0
    # A privileged head would be new.
    assert (
        main(
            [
                "checkov-kubernetes",
                str(_report(tmp_path, [*every_accepted, ("CKV_K8S_16", "Pod.inference.ray-llm-head")])),
            ]
        )
        == 1
    )
    assert "CKV_K8S_16 at Pod.inference.ray-llm-head: not in accepted-findings.yaml" in capsys.readouterr().err
    # Fewer findings than accepted: the list has gone stale.
    assert main(["checkov-kubernetes", str(_report(tmp_path, every_accepted[1:]))]) == 1
    assert "matches no finding any more" in capsys.readouterr().err
    # checkov that scanned nothing is no pass, nor one that could not parse every object.
    assert main(["checkov-kubernetes", str(_report(tmp_path, every_accepted, passed=0))]) == 1
    objects = tmp_path / "objects"
    objects.mkdir()
    for index in range(3):
        (objects / f"{index}.yaml").write_text("kind: Pod\n")
    report = _report(tmp_path, every_accepted)
    data = json.loads(report.read_text())
    data["summary"]["resource_count"] = 2
    report.write_text(json.dumps(data))
    assert main(["checkov-kubernetes", str(report), "--objects", str(objects)]) == 1
    assert "some objects went unchecked" in capsys.readouterr().err


def test_checkov_sees_the_pods_kuberay_makes(default_synth: Synth, tmp_path: Path) -> None:
    (ray_service,) = [
        d
        for r in default_synth.resources("serving", "Custom::AWSCDK-EKS-KubernetesResource").values()
        for d in json.loads(r["Properties"]["Manifest"])
        if d["kind"] == "RayService"
    ]
    pods = kuberay_pods(ray_service)
    assert [p["metadata"]["name"] for p in pods] == ["ray-llm-head", "ray-llm-prefill", "ray-llm-decode"]
    assert pods[0]["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pods[1]["spec"]["containers"][0]["securityContext"] == {"privileged": True}
    count = write(tmp_path / "k8s", [default_synth.outdir])
    kinds = sorted(p.name.split("-", 2)[1] for p in (tmp_path / "k8s").glob("*.yaml"))
    assert count == len(kinds)
    assert {"daemonset", "namespace", "networkpolicy", "rayservice", "pod", "job"} <= set(kinds)
