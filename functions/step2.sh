# sandbox
#
# The second step: bash gets the payload as JSON on stdin and each top-level scalar as ARG_<KEY>;
# its last stdout line is its result.
payload=$(cat)
echo "step2 got $payload"
echo "{\"n\": $((ARG_N * 10)), \"from\": \"step2\"}"
