// sandbox
// volume: opencode-state .local/share/opencode
// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com
// network: proxy api.anthropic.com
// timeout: 5m

// OpenCode (npm: opencode-ai, tested with 1.18.33) in the jail: one non-interactive turn of
// `opencode run` on the prompt, continuing the last session. OpenCode keeps its sessions in a
// SQLite database, ~/.local/share/opencode/opencode.db (XDG data dir; HOME is the job directory),
// so that directory is the `opencode-state` volume and the next run continues from it. Store the
// key once (the same secret as claude.ts):
//   host secrets set anthropic '{"apiKey":"sk-ant-..."}'
// The key is sealed (the env: line): OpenCode and everything it runs hold a placeholder, which
// the host's egress proxy replaces with the key only in requests to api.anthropic.com.
// then: nats req agent.call.opencode '{"prompt":"What is the fastest OSS workflow engine?"}'
// and again to continue; {"prompt":"...","session":"ses_..."} continues that session instead.
// The result is {session, text}: OpenCode's session id and its final message.
// ANTHROPIC_BASE_URL (an `env:` line) points OpenCode at another server that speaks the
// Anthropic Messages API; give `network:` its host too.

import { spawnSync } from "child_process";

const MODEL = "anthropic/claude-sonnet-4-5";

export async function main(prompt: string, session?: string) {
  const apiKey = keyFromSecret(process.env.ANTHROPIC_API_KEY);
  const baseURL = process.env.ANTHROPIC_BASE_URL || "https://api.anthropic.com/v1";

  // The whole configuration on the environment: no file in the job directory or the volume.
  // No key in it either: OpenCode's Anthropic provider reads ANTHROPIC_API_KEY itself.
  const config = {
    $schema: "https://opencode.ai/config.json",
    model: MODEL,
    autoupdate: false,
    share: "disabled",
    provider: { anthropic: { options: { baseURL } } },
  };
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    ANTHROPIC_API_KEY: apiKey,
    OPENCODE_CONFIG_CONTENT: JSON.stringify(config),
    // What OpenCode would otherwise try at start, and the proxy refuses (or should not be
    // asked): checking npm for a newer version, fetching the model list from
    // models.opencode.ai (it has a snapshot built in), downloading language servers, installing
    // its default plugins from npm, sharing the session on opencode.ai, reading Claude Code's
    // files, and indexing the home directory (the job directory) for its file picker.
    // Still refused by the proxy, harmless (1.18.33): registry.npmjs.org (a background npm
    // install into ~/.config/opencode, a WARN in the job's log) and github.com (likely ripgrep).
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
    OPENCODE_DISABLE_SHARE: "1",
    OPENCODE_DISABLE_CLAUDE_CODE: "1",
    OPENCODE_DISABLE_FFF: "1",
  };

  // --format json: one JSON event a line on stdout (the session id, the text parts, an error);
  // --print-logs: OpenCode's own log on stderr, which is the job's log.
  // The prompt goes on stdin, as written: OpenCode quotes message arguments that hold a space.
  const args = ["run", "--format", "json", "--print-logs", "--log-level", "WARN", "--model", MODEL];
  args.push(...(session ? ["--session", session] : ["--continue"]));
  const run = spawnSync("/usr/bin/opencode", args, {
    input: prompt,
    env,
    encoding: "utf-8",
    stdio: ["pipe", "pipe", "inherit"],
    maxBuffer: 64 << 20,
  });
  if (run.error) throw run.error;

  let sessionID = "";
  const texts = new Map<string, string>(); // message id -> its text, in order
  const errors: string[] = [];
  for (const line of run.stdout.split("\n")) {
    if (!line.trim()) continue;
    let ev: any;
    try {
      ev = JSON.parse(line);
    } catch {
      console.log(line); // not an event: keep it in the log
      continue;
    }
    if (ev.sessionID) sessionID = ev.sessionID;
    if (ev.type === "text" && ev.part?.text) {
      const id = ev.part.messageID ?? "";
      texts.set(id, (texts.get(id) ?? "") + ev.part.text);
    }
    if (ev.type === "error") {
      const e = ev.error ?? {};
      errors.push(`${e.name ?? "error"}: ${e.data?.message ?? JSON.stringify(e)}`);
    }
  }
  if (errors.length > 0 || run.status !== 0) {
    const why = errors.length > 0 ? errors.join("; ") : `exited with ${run.status ?? run.signal}`;
    throw new Error(`opencode: ${why}`);
  }
  const text = [...texts.values()].pop() ?? "";
  return { session: sessionID, text };
}

// With the sealed env: line this is the placeholder. A `$secret:anthropic` line instead hands
// over the key itself or, for {"apiKey": "..."} (claude.ts's form), the object as its JSON.
function keyFromSecret(v: string | undefined): string {
  if (!v) {
    throw new Error(
      "no Anthropic API key: ANTHROPIC_API_KEY is empty; declare it with `// env: ANTHROPIC_API_KEY=$sealed:anthropic.apiKey@api.anthropic.com` " +
        "and set the secret: host secrets set anthropic '{\"apiKey\":\"sk-ant-...\"}'",
    );
  }
  if (v.startsWith("{")) {
    let key: unknown;
    try {
      key = JSON.parse(v).apiKey;
    } catch {}
    if (typeof key !== "string" || key === "") {
      throw new Error("the secret `anthropic` is an object without a string apiKey: set it as '{\"apiKey\":\"sk-ant-...\"}'");
    }
    return key;
  }
  return v;
}
