#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 20000x: a count of
# inputs, which unlike a duration does not race Go 1.26's fuzz deadline), one at a time.
# `make test` runs it briefly; run `FUZZTIME=2000000x make fuzz` by hand to fuzz longer.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-20000x}"

found=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		found=$((found + 1))
		echo "[fuzz] ${pkg} ${target} for ${fuzztime}"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' || true)
echo "[fuzz] ${found} targets passed"
