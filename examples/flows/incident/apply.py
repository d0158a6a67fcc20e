# sandbox
#
# Step 3, once a person approved investigate's proposal: carry it out. The proposal arrives with
# the decision in it: approval = {"by", "comment", "at"}.


def main(incident: str, service: str, action: str, to: str, approval: dict):
    # Call your deploy system here (give the function `network: proxy <its host>`); the example
    # says what it would do.
    done = f"{action} {service} to {to}"
    print(f"{incident}: {done}, approved by {approval['by']}")
    return {"incident": incident, "done": done, "approved_by": approval["by"], "comment": approval.get("comment", "")}
