#!/usr/bin/env bash
# The step "make review" of .github/workflows/ci.yml (job review).
set -eo pipefail
merge_base="$(git merge-base "$BASE_SHA" "$HEAD_SHA")"
if [ "$ALLOWED" = true ]; then
  export ALLOW_REPLACEMENT=1
fi
status=0
make review BASE="$merge_base" REVIEW_FILE=review.md || status=$?
if [ ! -s review.md ]; then
  printf '# make review\n\n`make review` wrote no report (exit status %s): see the job log.\n' "$status" > review.md
fi
# The job summary holds at most 1 MiB per step.
head -c 1000000 review.md >> "$GITHUB_STEP_SUMMARY"
echo "reported=true" >> "$GITHUB_OUTPUT"
echo "$status" > review-status
