#!/usr/bin/env bash
# The step "Protected replacements need the allow-replacement label" of .github/workflows/ci.yml (job review).
set -eo pipefail
status="$(cat review-status)"
if [ "$status" != 0 ]; then
  echo "::error::make review failed (exit $status): a protected resource would be replaced or destroyed, or the review could not run; see the report in the job summary. If the replacement is intended, add the label allow-replacement."
  exit 1
fi
