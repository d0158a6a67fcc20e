// A client that goes away in the middle of a call, as a killed agent or an aborted call whose
// process exits at once does: the official MCP TypeScript SDK over its
// StreamableHTTPClientTransport calls a tool, asking for progress, and prints "started" with the
// job id's progress line as soon as the job logs; ts_test.go then kills this process, so no
// notifications/cancelled is ever sent.
//
//   node disconnect.mjs <url> <token> <tool>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, tool] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-sdk-gone", version: "0.0.1" });
await client.connect(transport);
let said = false;
await client.callTool({ name: tool, arguments: {} }, undefined, {
  timeout: 600_000,
  onprogress: (p) => {
    if (!said) {
      said = true;
      console.log("started " + (p.message ?? ""));
    }
  },
});
console.log("answered");
