#!/usr/bin/env bash
# The step "Required repository variables" of the deploy, park and destroy jobs; $1 names the role variable
# (default AWS_DEPLOY_ROLE_ARN; the park workflow's job scale passes AWS_PARK_ROLE_ARN).
set -eo pipefail
role="${1:-AWS_DEPLOY_ROLE_ARN}"
for name in CLUSTER_NAME REGION "$role"; do
  if [ -z "${!name}" ]; then
    echo "::error::set the repository variable $name (Settings > Secrets and variables > Actions > Variables)"
    exit 1
  fi
done
if [ "$role" = AWS_DEPLOY_ROLE_ARN ] && [[ ",$ADMIN_PRINCIPAL_ARNS," != *",$AWS_DEPLOY_ROLE_ARN,"* ]]; then
  echo "::warning::ADMIN_PRINCIPAL_ARNS does not list AWS_DEPLOY_ROLE_ARN: unless cdk.json does, kubectl answers Unauthorized"
fi
