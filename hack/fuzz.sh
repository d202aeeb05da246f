#!/usr/bin/env bash
# Runs every Go fuzz target of the given modules (default: all) for
# FUZZ_EXECS executions each, one target at a time, with GOWORK=off in the
# target's package directory, exactly as
#
#   go test -run '^$' -fuzz '^Name$' -fuzztime ${FUZZ_EXECS}x
#
# It stops at the first finding: go test has then written the failing input
# to the package's testdata/fuzz/<Name>/, which is where it stays, as a
# regression seed, once the code is fixed (plain `go test` runs it from
# then on). Each target gets a summary line: executions and time.
#
# Environment:
#   FUZZ_EXECS  executions per target (default 1000000)
#   FUZZ_RUN    a regular expression; only targets whose name matches run
#   FUZZFLAGS   extra flags for go test, e.g. -parallel=1
#
# Usage: hack/fuzz.sh [module...]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("${PILLAR_MODULES[@]}")
execs=${FUZZ_EXECS:-1000000}
filter=${FUZZ_RUN:-.}
[[ $execs =~ ^[1-9][0-9]*$ ]] || die "FUZZ_EXECS=$execs is not a positive number"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cd "$REPO_ROOT"

# Targets: the packages with a `func Fuzz` in a test file, asked for their
# list by go test itself, so build tags decide (a kernel-tagged target is
# not one; a _linux_test.go target is, on Linux).
targets=()
for m in "${modules[@]}"; do
	while read -r dir; do
		names=$(cd "$dir" && GOWORK=off go test -list '^Fuzz' . | grep '^Fuzz' || true)
		for n in $names; do
			[[ $n =~ $filter ]] && targets+=("$dir $n")
		done
	done < <(git ls-files -co --exclude-standard -- "$m/*_test.go" "$m/**/*_test.go" |
		xargs -r grep -l '^func Fuzz' | xargs -r -n1 dirname | sort -u)
done
[ ${#targets[@]} -gt 0 ] || die "no fuzz targets in ${modules[*]} matching '$filter'"
echo ">> ${#targets[@]} fuzz targets, $execs executions each"

summary=()
total_start=$SECONDS
for t in "${targets[@]}"; do
	dir=${t% *} name=${t#* }
	log="$logs/${dir//\//_}_$name.log"
	echo ">> $dir $name"
	start=$SECONDS
	# shellcheck disable=SC2086 # FUZZFLAGS is a list of flags
	if (cd "$dir" && GOWORK=off go test -run '^$' -fuzz "^$name\$" -fuzztime "${execs}x" ${FUZZFLAGS:-} .) >"$log" 2>&1; then
		status=ok
	else
		status=FAIL
	fi
	took=$((SECONDS - start))
	done_execs=$({ grep -o 'execs: [0-9]*' "$log" || true; } | tail -1 | cut -d' ' -f2)
	line=$(printf '%-4s %-32s %-26s %9s execs %6ss' "$status" "$dir" "$name" "${done_execs:-0}" "$took")
	summary+=("$line")
	echo "$line"
	if [ "$status" = FAIL ]; then
		echo "---- go test output (last 40 lines) ----" >&2
		tail -40 "$log" >&2
		echo "make fuzz: $dir $name failed; the input is in $dir/testdata/fuzz/$name/ (fix the code, keep the input, add a named regression test)" >&2
		exit 1
	fi
done

echo ">> summary ($((SECONDS - total_start))s in all)"
printf '%s\n' "${summary[@]}"
