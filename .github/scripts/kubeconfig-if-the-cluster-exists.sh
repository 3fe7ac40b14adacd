#!/usr/bin/env bash
# The step "make kubeconfig (if the cluster still exists)" of .github/workflows/destroy.yml (job destroy).
set -eo pipefail
if aws eks describe-cluster --name "$CLUSTER_NAME" --query cluster.status --output text 2> describe-error.txt; then
  make kubeconfig
elif grep -q ResourceNotFoundException describe-error.txt; then
  echo "::notice::no EKS cluster $CLUSTER_NAME in $REGION: skipping the Kubernetes clean-up"
else
  cat describe-error.txt >&2
  exit 1
fi
