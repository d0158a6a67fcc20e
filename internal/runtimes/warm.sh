# Warm-jail prelude for bash scripts: bash warm.sh <script>.
#
# Waits for the host's hand-over on stdin: one line per variable of the job's
# environment, each "export NAME=$'...'" as the host quoted it, then an empty
# line. The rest of stdin is the payload, as a cold run gets it; the script
# then runs exactly as cold, with that environment and that stdin.
# EOF before the empty line means the host tore the jail down without a job:
# nothing runs.
while IFS= read -r __host_handover_line; do
	if [ -z "$__host_handover_line" ]; then
		unset __host_handover_line
		# Not exec: once the script is over, its end line (runtimes.EndMarker) on both
		# streams lets the host answer without waiting for the jail's teardown.
		bash "$@"
		__host_code=$?
		printf '\036host-end %d\n' "$__host_code"
		printf '\036host-end %d\n' "$__host_code" >&2
		exit "$__host_code"
	fi
	eval "$__host_handover_line"
done
exit 0
