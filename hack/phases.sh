# Phases with time budgets, for hack/check.sh. Source it; do not run it.
#
# A phase is a named command with a budget in seconds. run_phase runs one in
# the foreground (its output streams); start_phase runs one in the
# background at a lower CPU priority, its output kept in a log that
# wait_phase prints when the phase ends, so that host work fills the CPU a
# guest leaves idle without slowing the guest or mixing its output into the
# guest's. A background phase may itself run phases (they are recorded in
# files, not in this shell's variables). phase_table prints every phase's
# budget, time and outcome, and phases_ok fails when a phase failed or took
# more than OVERRUN times its budget: a suite that grew, or a machine much
# slower than usual, is then a failure naming the phase instead of a run
# that creeps towards CI's limit unnoticed.

# OVERRUN: how many times its budget a phase may take before the run fails.
: "${OVERRUN:=2}"
# NICE: the niceness of background phases.
: "${NICE:=10}"
PHASE_DIR=${PHASE_DIR:-$(mktemp -d)}
export PHASE_DIR
PHASE_T0=${PHASE_T0:-$(date +%s)}
export PHASE_T0

now() { date +%s; }

# Each phase is a file $PHASE_DIR/<start>-<name>.rec:
#   name budget start end rc mode
# (The start is ten digits, so that one name cannot match another that
# ends with it: kernel-lab and build-kernel-lab.)
# phase_rec prints the record of NAME, or nothing (and succeeds) when that
# phase has not begun: a background phase may not have written it yet, and
# a failing command here would end the run under set -e.
phase_rec() {
	local f
	for f in "$PHASE_DIR"/[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-"$1".rec; do
		if [ -e "$f" ]; then
			echo "$f"
			return 0
		fi
	done
	return 0
}

phase_begin() {
	local name=$1 budget=$2 mode=$3 t
	t=$(now)
	printf '%s %s %s - - %s\n' "$name" "$budget" "$t" "$mode" >"$PHASE_DIR/$(printf '%010d' "$t")-$name.rec"
	echo
	echo "==== phase $name: start at $((t - PHASE_T0)) s (budget $budget s${mode:+, $mode})"
}

phase_end() {
	local name=$1 rc=$2 rec budget start mode t
	rec=$(phase_rec "$name")
	read -r _ budget start _ _ mode <"$rec"
	t=$(now)
	printf '%s %s %s %s %s %s\n' "$name" "$budget" "$start" "$t" "$rc" "$mode" >"$rec"
	echo "==== phase $name: $( ((rc == 0)) && echo ok || echo "FAILED (exit $rc)") in $((t - start)) s (budget $budget s)"
}

# run_phase NAME BUDGET CMD...: runs CMD in the foreground.
run_phase() {
	local name=$1 budget=$2 rc=0
	shift 2
	phase_begin "$name" "$budget" ""
	"$@" || rc=$?
	phase_end "$name" "$rc"
}

# start_phase NAME BUDGET CMD...: runs CMD in the background at niceness
# NICE (NICE=0 start_phase ... for a guest), its output in a log of its own.
declare -A PHASE_PID=()
start_phase() {
	local name=$1 budget=$2
	shift 2
	phase_begin "$name" "$budget" background
	echo "     its output follows when it ends"
	(
		rc=0
		# renice this subshell, not a command: "$@" may be a function.
		[ "$NICE" = 0 ] || renice -n "$NICE" -p "$BASHPID" >/dev/null
		"$@" >"$PHASE_DIR/$name.log" 2>&1 || rc=$?
		phase_end "$name" "$rc" >>"$PHASE_DIR/$name.log"
		exit "$rc"
	) &
	PHASE_PID[$name]=$!
}

# wait_phase NAME: waits for a background phase and prints its output.
wait_phase() {
	local name=$1
	wait "${PHASE_PID[$name]}" || true
	echo
	echo "==== phase $name: its output (it ran in the background)"
	cat "$PHASE_DIR/$name.log"
}

# await_phase NAME: waits until a phase, perhaps one run by a background
# phase, has ended (or its runner has, without it).
await_phase() {
	local rec end
	while :; do
		rec=$(phase_rec "$1")
		if [ -n "$rec" ]; then
			read -r _ _ _ end _ <"$rec"
			[ "$end" = - ] || return 0
		fi
		# The background phases are this shell's children: none left
		# running means nothing will start or end it.
		[ -n "$(jobs -pr)" ] || return 0
		sleep 2
	done
}

# phase_ok NAME: whether NAME ran and passed.
phase_ok() {
	local rec rc
	rec=$(phase_rec "$1")
	[ -n "$rec" ] || return 1
	read -r _ _ _ _ rc _ <"$rec"
	[ "$rc" = 0 ]
}

# skip_phase NAME BUDGET WHY: records a phase that did not run, and why.
skip_phase() {
	local t
	t=$(now)
	printf '%s %s %s %s skip %s\n' "$1" "$2" "$t" "$t" "$3" >"$PHASE_DIR/$(printf '%010d' "$t")-$1.rec"
	echo
	echo "==== phase $1: not run: $3"
}

# phase_table prints the phases in the order they started; phases_ok then
# fails, naming each, when a phase failed, never ended or overran.
phase_table() {
	local rec name budget start end rc mode took status
	echo
	echo "==== phases (seconds from the start; the run fails past ${OVERRUN}x a phase's budget)"
	printf '%-20s %6s %6s %6s  %s\n' phase start budget took outcome
	for rec in "$PHASE_DIR"/*.rec; do
		[ -e "$rec" ] || continue
		read -r name budget start end rc mode <"$rec"
		if [ "$end" = - ]; then
			took=$(($(now) - start)) status="NEVER ENDED"
		else
			took=$((end - start))
			case $rc in
			0) status=ok ;;
			skip) status="not run: $mode" mode= ;;
			*) status="FAILED (exit $rc)" ;;
			esac
		fi
		if [ "$took" -gt $((OVERRUN * budget)) ]; then
			status="$status, OVER ${OVERRUN}x BUDGET"
		elif [ "$took" -gt "$budget" ]; then
			status="$status, over budget"
		fi
		printf '%-20s %6s %6s %6s  %s%s\n' "$name" "$((start - PHASE_T0))" "$budget" "$took" "$status" "${mode:+ ($mode)}"
	done
	printf '%-20s %6s %6s %6s\n' total "" "" "$(($(now) - PHASE_T0))"
}

phases_ok() {
	local rec name budget start end rc mode bad=()
	for rec in "$PHASE_DIR"/*.rec; do
		[ -e "$rec" ] || continue
		read -r name budget start end rc mode <"$rec"
		if [ "$end" = - ]; then
			bad+=("$name never ended")
			continue
		fi
		case $rc in
		0 | skip) ;;
		*) bad+=("$name failed (exit $rc)") ;;
		esac
		if [ $((end - start)) -gt $((OVERRUN * budget)) ]; then
			bad+=("$name took $((end - start)) s, over ${OVERRUN}x its budget of $budget s")
		fi
	done
	if [ ${#bad[@]} -gt 0 ]; then
		printf 'make check: %s\n' "${bad[@]}" >&2
		return 1
	fi
}
