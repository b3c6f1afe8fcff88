#!/usr/bin/env bash
# Fails when the generated files (deepcopy, CRDs, RBAC, vendored Gateway API CRDs) differ from
# what the generators produce from the current sources: runs the generators and compares the
# trees before and after. Works on committed and uncommitted changes alike.
#
#   hack/verify-generated.sh MAKE_TARGET...
set -euo pipefail
snapshot() { find api config -type f -print0 | sort -z | xargs -0 sha256sum; }
before=$(snapshot)
make --no-print-directory "$@" >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "generated files were out of date; 'make $*' has now rewritten them:" >&2
  diff <(echo "$before") <(echo "$after") | sed -n 's/^> [0-9a-f]*  /  /p' >&2
  echo "review and commit them." >&2
  exit 1
fi
echo "generated files are up to date"
