# Reused-jail loop for bash scripts: bash reuse.sh <script> (see runtimes.BuildReuse).
#
# Reads one message at a time on stdin: its environment as warm.sh reads it
# ("export NAME=$'...'" lines, then an empty line), then the payload's length
# in bytes on a line, then the payload. Each message runs the script in a
# subshell of its own (its variables, traps, cd and exports end with it), with
# the payload on its stdin as a cold run gets it, and a newline after it (a
# here-string: bash writes it to a pipe itself, where a pipeline would fork). After it, every process the
# message left is killed and /tmp and /dev/shm are emptied, then the end line
# (runtimes.EndMarker) goes to both streams. A failed message, or one whose
# leftovers cannot be cleaned, ends the loop after its end line: the host
# replaces the jail. EOF before a message ends the loop with nothing run.
__host_script=$1
__host_dir=$PWD
shopt -s nullglob dotglob

# The jail's own processes, before any message: its init (and the egress
# forwarder), this shell. Anything else after a message is the message's.
declare -A __host_keep=()
for __host_p in /proc/[0-9]*; do
	__host_keep[${__host_p#/proc/}]=1
done

# __host_sweep kills what the message left: up to 50 rounds, as a process may
# fork while its siblings are killed, and takes a moment to be gone. A zombie
# waits for its reaper, harmless.
__host_sweep() {
	local round p pid st left
	for ((round = 0; round < 60; round++)); do
		left=
		for p in /proc/[0-9]*; do
			pid=${p#/proc/}
			[ -n "${__host_keep[$pid]}" ] && continue
			IFS= read -r st <"$p/stat" 2>/dev/null || continue
			st=${st##*) }
			[ "${st%% *}" = Z ] && continue
			kill -9 "$pid" 2>/dev/null
			left=1
		done
		[ -z "$left" ] && return 0
		# A killed process takes a moment to be gone (its memory is torn down).
		sleep "0.0$((round < 5 ? round + 1 : 5))"
	done
	return 1
}

# __host_wipe empties /tmp and /dev/shm (rm runs only when something is there).
__host_wipe() {
	local f=(/tmp/* /dev/shm/*)
	((${#f[@]} == 0)) && return 0
	chmod -R u+rwx -- "${f[@]}" 2>/dev/null
	rm -rf -- "${f[@]}" 2>/dev/null
	f=(/tmp/* /dev/shm/*)
	((${#f[@]} == 0))
}

builtin printf '\036host-ready\n'
while :; do
	__host_env=()
	__host_got=
	while IFS= read -r __host_line; do
		if [ -z "$__host_line" ]; then
			__host_got=1
			break
		fi
		__host_env+=("$__host_line")
	done
	[ -n "$__host_got" ] || exit 0
	IFS= read -r __host_n || exit 0
	LC_ALL=C IFS= read -r -d '' -N "$__host_n" __host_payload
	cd "$__host_dir" 2>/dev/null
	(
		for __host_line in "${__host_env[@]}"; do
			eval "$__host_line"
		done
		unset __host_env __host_line __host_got __host_n __host_payload __host_keep __host_p __host_dir
		unset -f __host_sweep __host_wipe
		shopt -u nullglob dotglob
		set --
		BASH_ARGV0=$__host_script
		unset __host_script
		. "$0"
	) <<<"$__host_payload"
	__host_code=$?
	unset __host_payload
	__host_clean=1
	__host_sweep || __host_clean=
	__host_wipe || __host_clean=
	builtin printf '\036host-end %d\n' "$__host_code"
	builtin printf '\036host-end %d\n' "$__host_code" >&2
	if [ "$__host_code" != 0 ] || [ -z "$__host_clean" ]; then
		exit 0
	fi
	# Ready for the next message: the host returns the jail to its pool only on this line.
	builtin printf '\036host-ready\n'
done
