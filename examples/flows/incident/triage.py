# sandbox
# on: webhook.incident
# next: agent.run.investigate if result.severity == 'high'
# next: agent.run.label else
# next: agent.run.check each result.files
# next: agent.run.report
#
# Step 1: read the alert your monitoring posted to /hooks/incident. A high-severity alert goes
# to investigate (an agent, then a person's approval), any other to label. Each file the last
# deploy changed is checked by a job of its own, and report joins those checks with this result.

PAGE = {"critical", "high", "page"}


def main(incident: str, service: str, severity: str, title: str, description: str = "", deploy: dict | None = None):
    deploy = deploy or {}
    files = deploy.get("files", [])
    level = "high" if severity.lower() in PAGE else "low"
    print(f"{incident} on {service}: {severity} ({level}), {len(files)} files changed by {deploy.get('version')}")
    return {
        "incident": incident,
        "service": service,
        "severity": level,
        "title": title,
        "description": description,
        "version": deploy.get("version", ""),
        "previous": deploy.get("previous", ""),
        # One check job per element: an object arrives as the check's arguments.
        "files": [{"incident": incident, "path": path} for path in files],
    }
