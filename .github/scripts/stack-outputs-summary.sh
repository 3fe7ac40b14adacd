#!/usr/bin/env bash
# The step "Stack outputs to the job summary" of .github/workflows/deploy.yml (job deploy).
set -eo pipefail
{
  echo "## Stack outputs"
  echo
  echo '```json'
  cat cdk-outputs.json
  echo '```'
} >> "$GITHUB_STEP_SUMMARY"
