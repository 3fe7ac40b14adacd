#!/usr/bin/env bash
# The step "Is there a cluster to park?" of .github/workflows/park.yml (job park).
set -eo pipefail
if aws eks describe-cluster --name "$CLUSTER_NAME" --query cluster.status --output text 2> describe-error.txt; then
  echo "exists=true" >> "$GITHUB_OUTPUT"
elif grep -q ResourceNotFoundException describe-error.txt; then
  echo "::notice::no EKS cluster $CLUSTER_NAME in $REGION: nothing to park"
  echo "exists=false" >> "$GITHUB_OUTPUT"
else
  cat describe-error.txt >&2
  exit 1
fi
