# sandbox
# on: webhook.github
# next: agent.run.summarize
#
# Step 1: triage a GitHub "issues" delivery. The webhook body is GitHub's JSON, so its top-level
# keys (action, issue, repository) arrive as arguments by name.

LABELS = {
    "bug": ["crash", "error", "broken", "fails", "exception", "panic"],
    "feature": ["feature", "support for", "would be nice", "please add"],
    "docs": ["readme", "documentation", "typo", "docs"],
}


def main(action: str, issue: dict, repository: dict):
    text = f"{issue.get('title', '')} {issue.get('body') or ''}".lower()
    labels = sorted(label for label, words in LABELS.items() if any(w in text for w in words))
    print(f"issue #{issue['number']} {action}: {labels or ['needs-triage']}")
    return {
        "action": action,
        "number": issue["number"],
        "title": issue["title"],
        "body": issue.get("body") or "",
        "author": issue.get("user", {}).get("login", ""),
        "repo": repository.get("full_name", ""),
        "labels": labels or ["needs-triage"],
        # A reference, not a value: the host resolves it when the next step runs.
        "anthropic": "$secret:anthropic",
    }
