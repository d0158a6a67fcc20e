# sandbox
# on: agent.error.>
# volume: failures failures
#
# The error handler: every job that fails for good anywhere lands here, with its job id,
# function, flow id and error, and is kept in the `failures` volume.
import json

def main(job_id: str, function: str, error: str, flow_id: str = "", attempts: int = 0):
    record = {"job_id": job_id, "function": function, "flow_id": flow_id, "error": error.strip().splitlines()[-1]}
    with open("failures/log.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    with open("failures/log.jsonl") as f:
        count = sum(1 for _ in f)
    return {"recorded": record, "failures_so_far": count}
