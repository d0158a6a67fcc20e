# sandbox
# join: triage check
# join-timeout: 30m
#
# Runs once per incident, when triage and every file's check have delivered: triage's result,
# and check's results as a list in the order of the deploy's files.


def main(triage: dict, check: list):
    risky = [c["path"] for c in check if c["risky"]]
    summary = f"{triage['incident']} ({triage['severity']}) on {triage['service']}: {len(check)} files changed by {triage['version']}, {len(risky)} worth a look"
    print(summary)
    return {"incident": triage["incident"], "files": [c["path"] for c in check], "risky": risky, "summary": summary}
