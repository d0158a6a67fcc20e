// sandbox
// network: proxy api.anthropic.com
// env: ANTHROPIC_API_KEY=$sealed:anthropic-key@api.anthropic.com
// timeout: 5m
// limit: 1 per args.service
// rate: 50/1m
// volume: repo-$args[service] repo
// approve: timeout 4h stage
// next: agent.run.apply

// Step 2, when the alert is high: Claude Code (through the Claude Agent SDK, as in the Claude
// template) reads the alert and the deploy and writes a diagnosis. Its proposal, rolling the
// service back, is a change to the service's repository volume (repo-<service>): the pinned
// version and the incident's notes. The change is staged (approve: ... stage): the volume's
// head stays where it was while a person reads the diff (`host approvals show <job>`, the
// dashboard's Approvals page, or the signed links announced on agent.approval.investigate).
// Approving commits it and goes on to apply; rejecting throws it away.
// Flow control, across every host: one investigation of a service at a time (a second alert
// for it waits, holding no run slot, until the first ends), and at most 50 a minute on the one
// Anthropic key.

import { mkdirSync, writeFileSync } from "node:fs";
import { query } from "@anthropic-ai/claude-agent-sdk";

export async function main(
  incident: string,
  service: string,
  title: string,
  description: string,
  version: string,
  previous: string,
  files: { path: string }[],
) {
  let diagnosis = "";
  for await (const msg of query({
    prompt:
      `Incident ${incident} on ${service}: ${title}\n${description}\n\n` +
      `It began after deploy ${version}, which changed: ${files.map((f) => f.path).join(", ")}.\n` +
      `In two sentences: the likely cause, and whether rolling back to ${previous} would help.`,
    options: {
      pathToClaudeCodeExecutable: "/usr/bin/claude",
      permissionMode: "bypassPermissions",
      allowDangerouslySkipPermissions: true,
      maxTurns: 1,
    },
  })) {
    if (msg.type === "assistant") {
      diagnosis += msg.message.content
        .filter((b: any) => b.type === "text")
        .map((b: any) => b.text)
        .join("");
    }
  }
  console.log(`diagnosis of ${incident}: ${diagnosis.length} characters`);
  // The proposal, as files in the service's repository: what a person approves is this diff.
  mkdirSync("repo/incidents", { recursive: true });
  writeFileSync("repo/VERSION", `${previous}\n`);
  writeFileSync(
    `repo/incidents/${incident}.md`,
    `# ${incident}: ${title}\n\n${diagnosis}\n\nProposed: roll ${service} back from ${version} to ${previous}.\n`,
  );
  return { incident, service, diagnosis, action: "rollback", from: version, to: previous };
}
