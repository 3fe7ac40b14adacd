"""Every IAM policy document of synthesized templates, with CloudFormation's intrinsics resolved to the
strings they become in an account (account 123456789012), so that validators that read plain IAM JSON
(parliament) check the ARNs the stacks really grant."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from parliament import analyze_policy_string

from tools.maintainer.accepted_findings import Finding

ACCOUNT = "123456789012"
PARTITION = "aws"

# The ARN (Fn::GetAtt X.Arn) and the Ref of each resource type the policies point at, as CloudFormation
# returns them; NAME is the logical ID standing in for the physical name.
_ARN = {
    "AWS::IAM::Role": "arn:aws:iam::{account}:role/{name}",
    "AWS::Lambda::Function": "arn:aws:lambda:{region}:{account}:function:{name}",
    "AWS::KMS::Key": "arn:aws:kms:{region}:{account}:key/{name}",
    "AWS::Logs::LogGroup": "arn:aws:logs:{region}:{account}:log-group:{name}:*",
    "AWS::EKS::Cluster": "arn:aws:eks:{region}:{account}:cluster/{name}",
    "AWS::SSM::Parameter": "arn:aws:ssm:{region}:{account}:parameter/{name}",
    "AWS::SecretsManager::Secret": "arn:aws:secretsmanager:{region}:{account}:secret:{name}",
    "AWS::EC2::VPC": "arn:aws:ec2:{region}:{account}:vpc/{name}",
    "AWS::S3::Bucket": "arn:aws:s3:::{name}",
}
_PSEUDO = {
    "AWS::Partition": PARTITION,
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackName": "stack",
}


class Resolver:
    """Resolves intrinsics within one template; Fn::ImportValue through the exports of all of them."""

    def __init__(self, templates: Mapping[str, Mapping[str, Any]], region: str) -> None:
        self.templates, self.region = templates, region
        self.exports = {
            str(o["Export"]["Name"]): (stack, o["Value"])
            for stack, t in templates.items()
            for o in t.get("Outputs", {}).values()
            if "Export" in o
        }

    def resolve(self, value: Any, stack: str) -> Any:
        if isinstance(value, list):
            return [self.resolve(v, stack) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), resources = next(iter(value.items())), self.templates[stack]["Resources"]
            if key == "Ref":
                if arg in _PSEUDO or arg == "AWS::Region":
                    return self.region if arg == "AWS::Region" else _PSEUDO[arg]
                resource = resources[arg]
                if resource["Type"] == "AWS::SSM::Parameter":
                    return self.resolve(resource["Properties"].get("Name", arg), stack)
                if resource["Type"] == "AWS::SecretsManager::Secret":  # a secret's Ref is its ARN
                    return _ARN[resource["Type"]].format(region=self.region, account=ACCOUNT, name=f"{arg}-AbCdEf")
                return arg
            if key == "Fn::GetAtt":
                name, attribute = arg
                resource_type = resources[name]["Type"]
                if attribute == "Arn" and resource_type in _ARN:
                    return _ARN[resource_type].format(region=self.region, account=ACCOUNT, name=name)
                return f"{name}.{attribute}"
            if key == "Fn::Join":
                separator, parts = arg
                return separator.join(str(self.resolve(p, stack)) for p in parts)
            if key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(self.resolve({"Ref": m[1]}, stack)), text)
            if key == "Fn::If":
                return self.resolve(arg[1], stack)
            if key == "Fn::ImportValue":
                other, exported = self.exports[str(self.resolve(arg, stack))]
                return self.resolve(exported, other)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items, stack)[int(index)]
        return {k: self.resolve(v, stack) for k, v in value.items()}


def identity_policies(templates: Mapping[str, Mapping[str, Any]], region: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, document) of every identity policy: IAM policies, managed policies and roles' inline policies."""
    resolver = Resolver(templates, region)
    for stack, template in templates.items():
        for name, resource in template["Resources"].items():
            properties = resource.get("Properties", {})
            documents = []
            if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                documents.append((f"{stack}/{name}", properties["PolicyDocument"]))
            if resource["Type"] == "AWS::IAM::Role":
                documents += [
                    (f"{stack}/{name}/{p['PolicyName']}", p["PolicyDocument"]) for p in properties.get("Policies", [])
                ]
            for where, document in documents:
                resolved = resolver.resolve(document, stack)
                resolved["Statement"] = [s for s in resolved["Statement"] if s != {"Ref": "AWS::NoValue"}]
                yield where, json.loads(json.dumps(resolved))


def findings_of(where: str, document: dict[str, Any]) -> list[Finding]:
    """parliament's findings, one per action where it names several (RESOURCE_STAR, RESOURCE_MISMATCH)."""
    found = []
    for finding in analyze_policy_string(json.dumps(document)).findings:
        detail = finding.detail
        if isinstance(detail, list):
            actions = [d["action"] if isinstance(d, dict) else str(d) for d in detail]
        else:
            words = str(detail).split()
            actions = [words[-1]] if words else [""]
        found += [Finding("parliament", finding.issue, where, action) for action in actions]
    return found
