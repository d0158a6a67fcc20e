// sandbox
// network: proxy api.anthropic.com
// timeout: 5m
// next: flow.out.triage
// secrets: anthropic

// Step 2: Claude Code (through the Claude Agent SDK, as in the Claude template) writes a
// one-sentence summary of the triaged issue. The result goes to flow.out.triage.

import { query } from "@anthropic-ai/claude-agent-sdk";

type Anthropic = { apiKey: string };

export async function main(
  action: string,
  number: number,
  title: string,
  body: string,
  labels: string[],
  repo: string,
  anthropic: Anthropic,
) {
  if (action !== "opened") {
    return { repo, number, labels, summary: null, skipped: `action ${action}` };
  }
  // The agent's own processes read credentials from the environment.
  process.env.ANTHROPIC_API_KEY = anthropic.apiKey;

  let summary = "";
  for await (const msg of query({
    prompt: `Summarise GitHub issue #${number} of ${repo} in one sentence.\nTitle: ${title}\n\n${body}`,
    options: {
      pathToClaudeCodeExecutable: "/usr/bin/claude",
      permissionMode: "bypassPermissions",
      allowDangerouslySkipPermissions: true,
      maxTurns: 1,
    },
  })) {
    if (msg.type === "assistant") {
      summary += msg.message.content
        .filter((b: any) => b.type === "text")
        .map((b: any) => b.text)
        .join("");
    }
  }
  console.log(`summary of #${number}: ${summary.length} characters`);
  return { repo, number, title, labels, summary };
}
