# Runs a bash script as `bash <script> [args]` would, in this very shell ($0
# included): bash bash.sh <script> [args], or sourced by warm.sh.
#
# However the script ends (its last line, exit, set -e), the end line
# (runtimes.EndMarker) goes to both streams, so the host answers without
# waiting for the runtime's exit and the jail's teardown. A script that sets
# its own EXIT trap, or execs, replaces it: it is answered once its jail is gone.
trap '__host_code=$?; builtin printf "\036host-end %d\n" "$__host_code"; builtin printf "\036host-end %d\n" "$__host_code" >&2; exit "$__host_code"' EXIT
BASH_ARGV0=$1
shift
. "$0"
