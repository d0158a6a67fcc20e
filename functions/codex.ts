// sandbox
// volume: codex-state .codex
// env: OPENAI_API_KEY=$sealed:openai@api.openai.com
// network: proxy api.openai.com
// timeout: 5m

// The Codex skeleton of Windmill's AI sandbox, run with the Codex CLI (npm: @openai/codex,
// tested with 0.169). Codex keeps its state — sessions (sessions/YYYY/MM/DD/rollout-*.jsonl),
// its SQLite databases, its installation id — in ~/.codex, its CODEX_HOME; HOME is the job
// directory, so that is the `codex-state` volume and survives the run. Store the key once:
//   host secrets set openai '"sk-..."'
// The key is sealed (the env: line): Codex and every command it runs hold a placeholder, which
// the host's egress proxy replaces with the key only in requests to api.openai.com.
// then: nats req agent.call.codex '{"prompt":"What is the fastest OSS workflow engine?"}'
// The result is Codex's final message. OPENAI_BASE_URL (an `env:` line) points Codex at another
// server that speaks the OpenAI Responses API; give `network:` its host too.

import { execSync } from "child_process";

export async function main(prompt: string) {
  // Codex reads/writes state in .codex/
  //
  // What changed from the skeleton's `codex --quiet "${prompt}"`, and why:
  // - Codex 0.169 has no --quiet ("unexpected argument"); `codex exec` is its non-interactive
  //   mode: the final message alone on stdout, progress on stderr (the job's log).
  // - --skip-git-repo-check: exec refuses to run outside a git repository, and the job
  //   directory is not one.
  // - --dangerously-bypass-approvals-and-sandbox: Codex runs its shell commands in its own
  //   bubblewrap sandbox, which cannot start inside this jail ("bwrap: No permissions to create
  //   new namespace"), so every command the model runs would fail. The jail is the sandbox; the
  //   flag is meant for exactly this ("environments that are externally sandboxed").
  // - provider(): Codex's built-in OpenAI provider ignores OPENAI_API_KEY (it wants
  //   `codex login`, which would store the key in the volume) and OPENAI_BASE_URL; a provider
  //   defined on the command line reads both.
  // - `-` with the prompt on stdin: inside "${prompt}" a prompt with a `"`, `$` or backtick
  //   broke the shell command (or ran part of it).
  const result = execSync(`codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox ${provider()} -`, {
    input: prompt,
    encoding: "utf-8",
    // OPENAI_API_KEY is in process.env already: the `env:` line above puts the placeholder there.
    env: { ...process.env },
  });
  return result.replace(/\n$/, ""); // the newline Codex prints after the message
}

function provider(): string {
  const baseURL = process.env.OPENAI_BASE_URL || "https://api.openai.com/v1";
  return `-c model_provider=openai-api -c 'model_providers.openai-api={name="OpenAI",base_url="${baseURL}",env_key="OPENAI_API_KEY",wire_api="responses"}'`;
}
