# sandbox
# next: agent.run.report
#
# One job per file the deploy changed (triage's `each result.files`): what kind of change it is,
# and whether it deserves a look during the incident. report gathers every file's result.

KINDS = [
    ("migrations/", "schema migration", True),
    ("config/", "configuration", True),
    ("test", "test", False),
    (".md", "documentation", False),
]


def main(incident: str, path: str):
    kind, risky = next(((k, r) for part, k, r in KINDS if part in path), ("code", True))
    print(f"{incident}: {path} is {kind}{' (risky)' if risky else ''}")
    return {"path": path, "kind": kind, "risky": risky}
