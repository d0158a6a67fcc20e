# Warm-jail prelude for bash scripts: bash warm.sh <script>.
#
# Waits for the host's hand-over on stdin: one line per variable of the job's
# environment, each "export NAME=$'...'" as the host quoted it, then an empty
# line. The rest of stdin is the payload, as a cold run gets it; the script
# then runs as cold, with that environment and that stdin.
# EOF before the empty line means the host tore the jail down without a job:
# nothing runs.
# The ready line (runtimes.ReadyMarker) tells the host that the jail now waits
# for nothing but its hand-over.
builtin printf '\036host-ready\n'
__host_ready=
while IFS= read -r __host_handover_line; do
	if [ -z "$__host_handover_line" ]; then
		__host_ready=1
		break
	fi
	eval "$__host_handover_line"
done
unset __host_handover_line
[ -n "$__host_ready" ] || exit 0
unset __host_ready
# The script runs in this very shell (see bash.sh), with the end line after it.
. "${BASH_SOURCE[0]%/*}/bash.sh"
