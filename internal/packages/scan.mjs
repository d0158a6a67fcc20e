// Import scanner of the package installer, run as `bun -e <this file>` on the
// host, outside the jail. Bun's own transpiler reads the sources, so what it
// finds is what Bun will resolve when the function runs: type-only imports
// are left out, comments and strings never count, and a file that does not
// parse is reported with Bun's message and position instead of being guessed
// at.
//
// Protocol, one JSON value per line:
//   out first: {"builtins": [...]}: the modules this Bun provides itself
//     (node:module's builtinModules, which lists bun, bun:*, Node's modules
//     and the ones Bun implements natively such as ws and undici).
//   in:  {"loader": "ts"|"tsx"|"js"|"jsx", "code": "...", "exports": bool}
//   out: {"imports": [{"path", "kind"}]} in source order (with "exports":
//        the names the module exports, when asked), or
//        {"error": {"message", "line", "column", "more"}} when the code does
//        not parse (line and column 1-based, 0 when Bun gives none; more
//        counts further errors).
// It never loads, resolves or runs what it scans: scanImports only parses.

import { builtinModules } from "node:module";

const transpilers = new Map();
function transpiler(loader) {
  let t = transpilers.get(loader);
  if (!t) {
    t = new Bun.Transpiler({ loader });
    transpilers.set(loader, t);
  }
  return t;
}

function describe(err) {
  const all = err?.name === "AggregateError" && Array.isArray(err.errors) ? err.errors : [err];
  const first = all[0] ?? err;
  const pos = first?.position;
  return {
    message: String(first?.message ?? first ?? "unknown error").split("\n")[0],
    line: pos?.line ?? 0,
    column: pos?.column ?? 0,
    more: Math.max(0, all.length - 1),
  };
}

function answer(line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (err) {
    return { error: { message: `bad request: ${err.message}`, line: 0, column: 0, more: 0 } };
  }
  // Bun's runtime skips a shebang line, scanImports does not: blank it,
  // keeping the line numbers of errors.
  const code = req.code.startsWith("#!") ? req.code.replace(/^#![^\n]*/, "") : req.code;
  try {
    const imports = transpiler(req.loader).scanImports(code);
    const out = { imports: imports.map(({ path, kind }) => ({ path, kind })) };
    // scan is slower than scanImports: only `host check` asks for exports.
    if (req.exports) out.exports = transpiler(req.loader).scan(code).exports;
    return out;
  } catch (err) {
    return { error: describe(err) };
  }
}

const write = (v) => process.stdout.write(JSON.stringify(v) + "\n");
write({ builtins: builtinModules });

// Requests are split by hand rather than with a line reader: a JSON-encoded
// source holds no raw newline, and a large file must not hit a line limit.
const decoder = new TextDecoder();
let pending = "";
for await (const chunk of Bun.stdin.stream()) {
  pending += decoder.decode(chunk, { stream: true });
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    const line = pending.slice(0, nl);
    pending = pending.slice(nl + 1);
    if (line.trim()) write(answer(line));
  }
}
