#!/usr/bin/env bash
# The step "Required repository variables" of the deploy, park and destroy jobs.
set -eo pipefail
for name in CLUSTER_NAME REGION AWS_DEPLOY_ROLE_ARN; do
  if [ -z "${!name}" ]; then
    echo "::error::set the repository variable $name (Settings > Secrets and variables > Actions > Variables)"
    exit 1
  fi
done
if [[ ",$ADMIN_PRINCIPAL_ARNS," != *",$AWS_DEPLOY_ROLE_ARN,"* ]]; then
  echo "::warning::ADMIN_PRINCIPAL_ARNS does not list AWS_DEPLOY_ROLE_ARN: unless cdk.json does, kubectl answers Unauthorized"
fi
