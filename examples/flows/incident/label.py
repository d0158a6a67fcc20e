# sandbox
#
# Step 2, when the alert is not high: no one is paged; the incident is labelled and queued for
# the service's team.


def main(incident: str, service: str, severity: str, title: str):
    labels = ["incident", f"service:{service}", f"severity:{severity}"]
    print(f"{incident}: {', '.join(labels)}")
    return {"incident": incident, "title": title, "labels": labels, "queue": f"{service}-oncall"}
