// A client of the host's /mcp written by nobody here: the official MCP TypeScript SDK over its
// StreamableHTTPClientTransport. It initializes, lists the tools, calls one with the arguments
// given, and prints what it saw as one JSON object on stdout, for ts_test.go to judge.
//
//   node client.mjs <url> <token> <tool> <arguments as JSON>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token, tool, args] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "ts-sdk-test", version: "0.0.1" });
await client.connect(transport);
const listed = await client.listTools();
const progress = [];
const called = await client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, {
  onprogress: (p) => progress.push(p.message ?? ""),
});
console.log(JSON.stringify({
  server: client.getServerVersion(),
  protocol: transport.protocolVersion,
  tools: listed.tools,
  result: called,
  progress,
}));
await client.close();
