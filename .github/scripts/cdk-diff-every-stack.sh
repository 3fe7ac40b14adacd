#!/usr/bin/env bash
# The step "cdk diff (every stack)" of .github/workflows/diff.yml (job diff).
set -eo pipefail
status=0
make diff ARGS="--method template --no-color" 2>&1 | tee diff.txt || status=$?
{
  echo "## cdk diff against the deployed stacks"
  echo
  echo '```'
  head -c 1000000 diff.txt
  echo '```'
} >> "$GITHUB_STEP_SUMMARY"
exit "$status"
