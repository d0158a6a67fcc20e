// sandbox
// volume: claude .claude
// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com
// secrets: anthropic
// tools: wordcount
// timeout: 5m

// The Claude Code template of Windmill's AI sandbox, completed as its text implies: Claude Code
// (through the Claude Agent SDK) with its session kept in the `claude` volume, so the second run
// resumes the first one's session. Store the credential once:
//   host secrets set anthropic '{"apiKey":"sk-ant-..."}'
// then: nats req agent.call.claude '{}'
// The key is sealed (the env: line): the job, Claude Code and every command it runs hold only a
// placeholder, which the host's egress proxy replaces with the key in requests to
// api.anthropic.com and nowhere else, so a prompt injection has no key to leak. The template's
// own way, the key as an argument ('{"anthropic":"$secret:anthropic"}'), still works: it puts
// the key itself in the environment, as Windmill does.
// The tools: line gives Claude Code the host's wordcount as an MCP tool (mcp__host__wordcount):
// the host serves it to this job alone at $HOST_MCP_URL, and each call runs in a jail of its own.

import { query } from "@anthropic-ai/claude-agent-sdk";
import * as fs from "fs";
import * as path from "path";

// path -> content, fileset resource, that contains your CLAUDE.md, and skills
type AgentInstructions = Record<string, string>

export async function main(
  anthropic?: RT.Anthropic,
  agent_instructions?: AgentInstructions,
) {
  const sessionFile = ".claude/session-id.txt";

  let sessionId = fs.existsSync(sessionFile)
    ? fs.readFileSync(sessionFile, "utf-8").trim()
    : undefined;

  // Writing claude.md and skills to .claude/
  for (const [filePath, content] of Object.entries(agent_instructions ?? {})) {
    const fullPath = path.join(filePath);
    fs.mkdirSync(path.dirname(fullPath), { recursive: true });
    fs.writeFileSync(fullPath, content);
  }

  const isResume = !!sessionId;

  // You can hardcode the prompt or pass it as input.
  // AgentInstructions can contain a CLAUDE.md where to put the bulk of the instructions as well.
  const prompt = !isResume
    ? "What is the fastest OSS workflow engine?"
    : "What did I ask you before?";

  // Script inputs are not environment variables - set them explicitly
  // so the agent's shell processes (git, curl, etc.) can access them.
  // Without the argument, ANTHROPIC_API_KEY is the sealed placeholder the env: line sets.
  if (anthropic?.apiKey) process.env.ANTHROPIC_API_KEY = anthropic.apiKey;

  let response = "";
  let newSessionId: string | undefined;
  let tokenCount = 0;
  const seenIds = new Set<string>();

  for await (const msg of query({
    prompt,
    options: {
      model: "opus",
      pathToClaudeCodeExecutable: "/usr/bin/claude",
      permissionMode: "bypassPermissions",
      allowDangerouslySkipPermissions: true,
      // The functions of the tools: line, as MCP tools. Read here, in main: a warm jail loads
      // this file before its job, and its environment, come.
      ...(process.env.HOST_MCP_URL
        ? {
            mcpServers: {
              host: {
                type: "http" as const,
                url: process.env.HOST_MCP_URL,
                headers: { Authorization: `Bearer ${process.env.HOST_MCP_TOKEN}` },
              },
            },
          }
        : {}),
      ...(isResume ? { resume: sessionId } : {}),
    },
  })) {
    if (msg.type === "system" && msg.subtype === "init") {
      newSessionId = msg.session_id;
    }
    if (msg.type === "assistant") {
      const msgId = msg.message.id;
      if (!seenIds.has(msgId)) {
        seenIds.add(msgId);
        tokenCount += msg.message.usage.input_tokens + msg.message.usage.output_tokens;
        console.log(`${tokenCount} tokens`);
      }

      response += msg.message.content
        .filter((b: any) => b.type === "text")
        .map((b: any) => b.text)
        .join("");
    }
  }

  if (newSessionId) {
    fs.writeFileSync(sessionFile, newSessionId);
  }

  // Delete all files created from agent_instructions
  for (const filePath of Object.keys(agent_instructions ?? {})) {
    fs.unlinkSync(path.join(filePath));
  }

  return {
    is_resume: isResume,
    previous_session_id: sessionId ?? null,
    new_session_id: newSessionId,
    prompt,
    response,
  };
}
