// Job shim for TypeScript / JavaScript scripts: bun shim.mjs <script> <io-dir>.
//
// Imports the user's module, calls its exported `main` with the payload from
// <io-dir>/args.json bound by parameter name, and writes the JSON of the
// awaited return value to <io-dir>/result.json. Failures go to
// <io-dir>/error.json as {"kind": ..., "message": ...} so the host can tell a
// bad payload or a broken script (never retried) from an exception in main
// (retried).
//
// Exit codes: 0 success, 1 exception (in main, while importing the script, or
// an uncaught error/rejection), 2 argument / definition / result error. The
// host reads the files first; the exit code is only a fallback.
//
// Parameter names come from the script's source text rather than from the
// function object alone: after Bun transpiles TypeScript, `name?: string`
// looks exactly like a required `name`, and only the source says otherwise.

import { readFileSync, writeFileSync, renameSync, rmSync } from "node:fs";
import { resolve, basename } from "node:path";
import { pathToFileURL } from "node:url";

const ARGS_FILE = "args.json";
const RESULT_FILE = "result.json";
const ERROR_FILE = "error.json";
const EXIT_EXCEPTION = 1;
const EXIT_TERMINAL = 2;
// Cap on error messages: one line for a UI, not a dump of the payload.
const MAX_MESSAGE = 2000;

class Failure extends Error {
  constructor(kind, message, code = EXIT_TERMINAL) {
    super(message);
    this.kind = kind;
    this.code = code;
  }
}

// ---------------------------------------------------------------------------
// Reading parameter lists out of source text.

// mask returns src with the contents of comments, strings, template literal
// text and regular expression literals replaced by spaces (newlines kept), so
// that brackets, commas and `main` inside them cannot mislead the scans below.
// Offsets are unchanged, so positions found in the mask index the original.
export function mask(src) {
  const out = src.split("");
  const blank = (from, to) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  // Each entry is the brace depth of a `${` ... `}` currently open.
  const templates = [];
  let depth = 0;
  // The last significant code character, to tell a regex `/` from division.
  let prev = "";
  let i = 0;
  const n = src.length;

  // scanTemplate blanks template text starting at i (just after ` or }) and
  // stops after the closing ` or just after a `${`.
  const scanTemplate = () => {
    const start = i;
    while (i < n) {
      const c = src[i];
      if (c === "\\") {
        i += 2;
        continue;
      }
      if (c === "`") {
        blank(start, i);
        i++;
        prev = "`";
        return;
      }
      if (c === "$" && src[i + 1] === "{") {
        blank(start, i);
        i += 2;
        templates.push(depth);
        depth++;
        prev = "{";
        return;
      }
      i++;
    }
    blank(start, n);
  };

  while (i < n) {
    const c = src[i];
    const d = src[i + 1];
    if (c === "/" && d === "/") {
      const end = src.indexOf("\n", i);
      const stop = end < 0 ? n : end;
      blank(i, stop);
      i = stop;
      continue;
    }
    if (c === "/" && d === "*") {
      const end = src.indexOf("*/", i + 2);
      const stop = end < 0 ? n : end + 2;
      blank(i, stop);
      i = stop;
      continue;
    }
    if (c === "'" || c === '"') {
      let j = i + 1;
      while (j < n && src[j] !== c && src[j] !== "\n") j += src[j] === "\\" ? 2 : 1;
      blank(i + 1, Math.min(j, n));
      i = j + 1;
      prev = c;
      continue;
    }
    if (c === "`") {
      i++;
      scanTemplate();
      continue;
    }
    if (c === "/" && (prev === "" || "(,=:[!&|?{};+-*%<>~^".includes(prev))) {
      // A regex literal can only start where an operand is expected.
      let j = i + 1;
      let inClass = false;
      while (j < n && src[j] !== "\n") {
        const e = src[j];
        if (e === "\\") {
          j += 2;
          continue;
        }
        if (e === "[") inClass = true;
        else if (e === "]") inClass = false;
        else if (e === "/" && !inClass) break;
        j++;
      }
      blank(i + 1, Math.min(j, n));
      i = j + 1;
      prev = "/";
      continue;
    }
    if (c === "{") depth++;
    if (c === "}") {
      depth--;
      if (templates.length && depth === templates[templates.length - 1]) {
        templates.pop();
        i++;
        scanTemplate();
        continue;
      }
    }
    if (!/\s/.test(c)) prev = /[\w$]/.test(c) ? "a" : c;
    i++;
  }
  return out.join("");
}

// skipAngles returns the index just past a balanced <...> starting at i.
function skipAngles(m, i) {
  let depth = 0;
  for (; i < m.length; i++) {
    if (m[i] === "=" && m[i + 1] === ">") {
      i++;
      continue;
    }
    if (m[i] === "<") depth++;
    else if (m[i] === ">" && --depth === 0) return i + 1;
  }
  return -1;
}

function skipSpace(m, i) {
  while (i < m.length && /\s/.test(m[i])) i++;
  return i;
}

// closeParen returns the index of the ) matching the ( at i.
function closeParen(m, i) {
  let depth = 0;
  for (; i < m.length; i++) {
    if (m[i] === "(") depth++;
    else if (m[i] === ")" && --depth === 0) return i;
  }
  return -1;
}

// paramsAfter reads a function value starting at i in the mask: `function
// name<T>(...)`, `async (...) =>`, `<T>(...) =>` or `x =>`. It returns the
// [open, close] of the parameter list, or a single-identifier [start, end, true].
function paramsAfter(m, i) {
  i = skipSpace(m, i);
  if (m.startsWith("async", i) && !/[\w$]/.test(m[i + 5] ?? "")) i = skipSpace(m, i + 5);
  if (m.startsWith("function", i) && !/[\w$]/.test(m[i + 8] ?? "")) {
    i = skipSpace(m, i + 8);
    if (m[i] === "*") i = skipSpace(m, i + 1);
    const name = /^[A-Za-z_$][\w$]*/.exec(m.slice(i, i + 200));
    if (name) i = skipSpace(m, i + name[0].length);
  }
  if (m[i] === "<") {
    i = skipAngles(m, i);
    if (i < 0) return null;
    i = skipSpace(m, i);
  }
  if (m[i] === "(") {
    const close = closeParen(m, i);
    return close < 0 ? null : [i, close];
  }
  const single = /^([A-Za-z_$][\w$]*)\s*=>/.exec(m.slice(i, i + 200));
  if (single) return [i, i + single[1].length, true];
  return null;
}

// Where `main` can be declared, best first: exported declarations, then
// plain ones (for `export { main }`), then CommonJS assignments.
const DECLARATIONS = [
  /\bexport\s+(?:default\s+)?(?:async\s+)?function\s*\*?\s*main\b/g,
  /\bexport\s+(?:const|let|var)\s+main\s*(?::[^=]*)?=/g,
  /(?:^|[^.\w$])(?:async\s+)?function\s*\*?\s*main\b/g,
  /\b(?:const|let|var)\s+main\s*(?::[^=]*)?=/g,
  /\b(?:module\.)?exports\.main\s*=/g,
];

function findParamList(m) {
  for (const re of DECLARATIONS) {
    re.lastIndex = 0;
    let match;
    while ((match = re.exec(m)) !== null) {
      let i = match.index + match[0].length;
      // For `function main`, go back to `function` so paramsAfter sees it.
      if (/function\s*\*?\s*main$/.test(match[0])) {
        i = match.index + match[0].search(/function/);
      }
      const found = paramsAfter(m, i);
      if (found) return found;
    }
  }
  return null;
}

// splitTopLevel splits [from, to) of the mask at commas outside brackets.
function splitTopLevel(m, from, to) {
  const parts = [];
  let depth = 0;
  let angle = 0;
  let start = from;
  for (let i = from; i < to; i++) {
    const c = m[i];
    if (c === "=" && m[i + 1] === ">") {
      i++;
      continue;
    }
    if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") depth--;
    else if (c === "<") angle++;
    else if (c === ">" && angle > 0) angle--;
    else if (c === "," && depth === 0 && angle === 0) {
      parts.push([start, i]);
      start = i + 1;
    }
  }
  parts.push([start, to]);
  return parts;
}

// topLevelAssign finds the `=` of a default value in a parameter's mask text.
function topLevelAssign(m) {
  let depth = 0;
  let angle = 0;
  for (let i = 0; i < m.length; i++) {
    const c = m[i];
    if (c === "=" && (m[i + 1] === ">" || m[i + 1] === "=")) {
      i++;
      continue;
    }
    if (c === "(" || c === "[" || c === "{") depth++;
    else if (c === ")" || c === "]" || c === "}") depth--;
    else if (c === "<") angle++;
    else if (c === ">" && angle > 0) angle--;
    else if (c === "=" && depth === 0 && angle === 0 && !"!<>=".includes(m[i - 1])) return i;
  }
  return -1;
}

const squash = (s) => s.replace(/\s+/g, " ").trim();

// parseParam describes one parameter: {name, optional, rest, pattern, display}.
// Structure is read from the mask (comments blanked); the original text is
// only used for what is shown back to the user.
function parseParam(src, m) {
  const lead = m.length - m.trimStart().length;
  const trail = m.trimEnd().length;
  if (trail <= lead) return null;
  src = src.slice(lead, trail);
  m = m.slice(lead, trail);
  const eq = topLevelAssign(m);
  const head = eq < 0 ? m : m.slice(0, eq);
  const def = eq < 0 ? null : squash(src.slice(eq + 1));
  if (m.startsWith("...")) {
    const name = /^\.\.\.\s*([A-Za-z_$][\w$]*)/.exec(m);
    return { name: name ? name[1] : "", rest: true, display: "..." + (name ? name[1] : "args") };
  }
  if (m[0] === "{" || m[0] === "[") {
    // A destructuring pattern: show it without its type annotation.
    const close = m[0] === "{" ? "}" : "]";
    let depth = 0;
    let end = head.length;
    for (let i = 0; i < m.length; i++) {
      if (m[i] === m[0]) depth++;
      else if (m[i] === close && --depth === 0) {
        end = i + 1;
        break;
      }
    }
    const pattern = squash(src.slice(0, end));
    return { name: "", pattern: true, optional: eq >= 0, display: def === null ? pattern : `${pattern}=${def}` };
  }
  const id = /^([A-Za-z_$][\w$]*)\s*(\?)?/.exec(head);
  if (!id) return null;
  const optional = Boolean(id[2]) || eq >= 0;
  let display = id[1] + (id[2] ? "?" : "");
  if (def !== null) display += `=${def}`;
  return { name: id[1], optional, display };
}

// parseParams returns the parameters of the first `main` found in source
// text, or null when there is none or it cannot be read.
export function parseParams(source, whole = false) {
  const m = mask(source);
  const found = whole ? paramsAfter(m, 0) ?? methodParams(m) : findParamList(m);
  if (!found) return null;
  const [a, b, single] = found;
  if (single) {
    const name = source.slice(a, b);
    return [{ name, optional: false, display: name }];
  }
  const params = [];
  for (const [from, to] of splitTopLevel(m, a + 1, b)) {
    const p = parseParam(source.slice(from, to), m.slice(from, to));
    // TypeScript's `this: T` is a type annotation, not a parameter.
    if (p && p.name !== "this") params.push(p);
  }
  return params;
}

// methodParams handles `main(a, b) { ... }`, how a method's toString() reads.
function methodParams(m) {
  const open = m.indexOf("(");
  if (open < 0) return null;
  const close = closeParen(m, open);
  return close < 0 ? null : [open, close];
}

// ---------------------------------------------------------------------------
// Running main.

function oneLine(text) {
  for (const line of String(text).split(/\r?\n/)) {
    const t = line.trim();
    if (t) return t.slice(0, MAX_MESSAGE);
  }
  return "";
}

function describe(err) {
  if (err instanceof Error || (err && typeof err === "object" && "message" in err)) {
    const name = err.name || err.constructor?.name || "Error";
    const detail = oneLine(err.message ?? "");
    return detail ? `${name}: ${detail}` : name;
  }
  try {
    return `thrown value: ${oneLine(typeof err === "string" ? err : JSON.stringify(err) ?? String(err))}`;
  } catch {
    return `thrown value: ${oneLine(String(err))}`;
  }
}

function writeAtomic(path, text) {
  // Write then rename, so the host never reads a half-written result even if
  // the process is killed mid-write.
  const tmp = path + ".tmp";
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

function loadArgs(ioDir) {
  let raw;
  try {
    raw = readFileSync(resolve(ioDir, ARGS_FILE), "utf8");
  } catch (err) {
    // No payload file is the same as an empty payload.
    if (err?.code === "ENOENT") return {};
    throw err;
  }
  // The arguments may hold resolved secrets: read once, they leave the disk.
  rmSync(resolve(ioDir, ARGS_FILE), { force: true });
  if (!raw.trim()) return {};
  let args;
  try {
    args = JSON.parse(raw);
  } catch (err) {
    throw new Failure("argument", `the payload is not valid JSON: ${oneLine(err.message)}`);
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new Failure("argument", `the payload must be a JSON object, got ${Array.isArray(args) ? "array" : args === null ? "null" : typeof args}`);
  }
  return args;
}

// signatureOf reconciles the source-text parse (knows TS optionality) with
// the function's own text (always the function actually called).
function signatureOf(main, source) {
  let fromSource = null;
  let fromFunction = null;
  try {
    fromSource = source == null ? null : parseParams(source);
  } catch {}
  try {
    fromFunction = parseParams(Function.prototype.toString.call(main), true);
  } catch {}
  if (!fromFunction || /\{\s*\[native code\]\s*\}\s*$/.test(Function.prototype.toString.call(main))) {
    return fromSource;
  }
  if (!fromSource) return fromFunction;
  const same =
    fromSource.length === fromFunction.length &&
    fromSource.every((p, k) => p.name === fromFunction[k].name && Boolean(p.pattern) === Boolean(fromFunction[k].pattern));
  if (same) return fromSource;
  // The source scan found some other `main`: trust the function, but keep
  // the optional marks the source gave parameters of the same name.
  const optional = new Set(fromSource.filter((p) => p.optional && p.name).map((p) => p.name));
  return fromFunction.map((p) => (optional.has(p.name) ? { ...p, optional: true } : p));
}

function bind(params, args) {
  const has = (k) => Object.prototype.hasOwnProperty.call(args, k);
  const values = [];
  const missing = [];
  for (const [k, p] of params.entries()) {
    if (p.rest) break;
    if (p.pattern) {
      // `main({ a, b }: Args)`: the destructured object is the payload itself.
      values.push(k === 0 ? args : undefined);
      continue;
    }
    if (has(p.name)) values.push(args[p.name]);
    else if (p.optional) values.push(undefined); // so the default applies
    else {
      missing.push(p.name);
      values.push(undefined);
    }
  }
  if (missing.length) {
    const noun = missing.length === 1 ? "argument" : "arguments";
    const quoted = missing.map((n) => JSON.stringify(n)).join(", ");
    const sig = `main(${params.map((p) => p.display).join(", ")})`;
    throw new Failure("argument", `missing required ${noun} ${quoted} for ${sig}`);
  }
  return values;
}

// What the shim is waiting for, to say which part never finished.
let phase = "start";

async function run(script, ioDir) {
  const args = loadArgs(ioDir);

  let source = null;
  try {
    source = readFileSync(script, "utf8");
  } catch {}

  let mod;
  phase = "import";
  try {
    mod = await import(pathToFileURL(script).href);
  } catch (err) {
    // Bun reports a script that does not parse as a BuildMessage; retrying
    // cannot fix it. Other import failures (a missing package, an exception
    // in top-level code) are ordinary script errors.
    const build = buildErrorIn(err, script);
    if (build) {
      printError(err);
      throw new Failure("definition", build);
    }
    throw err;
  }

  phase = "main";
  let main = mod.main;
  // CommonJS (module.exports = { main }) and `export default function main`.
  if (main === undefined && mod.default && typeof mod.default === "object") main = mod.default.main;
  if (main === undefined && typeof mod.default === "function" && mod.default.name === "main") main = mod.default;
  if (main === undefined) {
    throw new Failure("definition", `${basename(script)} does not export a main function (export async function main(...) { ... })`);
  }
  if (typeof main !== "function") {
    throw new Failure("definition", `main is not a function (it is ${main === null ? "null" : typeof main})`);
  }

  const params = signatureOf(main, source);
  let values;
  if (params) {
    values = bind(params, args);
  } else {
    process.stderr.write("warning: could not read main's parameters; passing the whole payload as its first argument\n");
    values = [args];
  }

  const result = await main(...values);
  let text;
  try {
    text = JSON.stringify(result === undefined ? null : result);
  } catch (err) {
    throw new Failure("result", `main returned a value that is not JSON-serialisable: ${describe(err)}`);
  }
  if (text === undefined) {
    // JSON.stringify drops functions and symbols without complaint.
    throw new Failure("result", `main returned a value that is not JSON-serialisable (${typeof result})`);
  }
  writeAtomic(resolve(ioDir, RESULT_FILE), text);
}

// buildErrorIn describes err when it is Bun failing to parse the script
// itself (a BuildMessage, or an AggregateError of them when there are several),
// like "SyntaxError: Unexpected ; (job.ts:2:11)"; otherwise it returns "".
function buildErrorIn(err, script) {
  const first = err?.name === "AggregateError" && Array.isArray(err.errors) ? err.errors[0] : err;
  if (first?.name !== "BuildMessage") return "";
  const pos = first.position;
  if (pos?.file && resolve(pos.file) !== script) return "";
  const where = pos ? ` (${basename(pos.file || script)}:${pos.line}:${pos.column})` : "";
  const more = err !== first && err.errors.length > 1 ? ` and ${err.errors.length - 1} more` : "";
  return `SyntaxError: ${oneLine(first.message)}${where}${more}`;
}

function printError(err) {
  try {
    console.error(err);
  } catch {
    process.stderr.write(String(err?.stack ?? err) + "\n");
  }
}

// finish flushes stdout and stderr and exits. process.stdout.write is
// asynchronous on pipes, and process.exit drops whatever is still queued,
// so the streams are ended (which waits for the queue) before exiting. Exiting
// explicitly keeps a script that left a timer or socket open from hanging.
let finishing = false;
async function finish(ioDir, code, kind, message) {
  if (finishing) return;
  finishing = true;
  if (code !== 0) {
    try {
      writeAtomic(resolve(ioDir, ERROR_FILE), JSON.stringify({ kind, message }));
    } catch (err) {
      printError(err);
    }
  }
  const end = (stream) =>
    new Promise((done) => {
      try {
        stream.end(() => done());
      } catch {
        done();
      }
    });
  await Promise.all([end(process.stdout), end(process.stderr)]);
  process.exit(code);
}

function fail(ioDir, err) {
  if (err instanceof Failure) {
    // Say it in the log too: the host shows logs before it shows errors.
    process.stderr.write(`error: ${err.message}\n`);
    return finish(ioDir, err.code, err.kind, err.message);
  }
  printError(err);
  return finish(ioDir, EXIT_EXCEPTION, "exception", describe(err));
}

async function entry() {
  if (process.argv.length !== 4) {
    process.stderr.write("usage: bun shim.mjs <script> <io-dir>\n");
    process.exit(EXIT_TERMINAL);
  }
  const script = resolve(process.argv[2]);
  const ioDir = resolve(process.argv[3]);
  // The script should see argv as if it had been run directly.
  process.argv.splice(1, process.argv.length - 1, script);

  // Outputs from an earlier attempt in the same directory must not be
  // mistaken for this run's.
  for (const name of [RESULT_FILE, ERROR_FILE]) rmSync(resolve(ioDir, name), { force: true });

  // An error thrown from a timer or a promise nobody awaited would otherwise
  // kill the process without a word in error.json.
  process.on("uncaughtException", (err) => fail(ioDir, err));
  process.on("unhandledRejection", (err) => fail(ioDir, err));
  // process.exit() called by the script: like sys.exit() in Python, exit 0
  // is a normal end without a result and anything else a script error.
  process.on("exit", (code) => {
    if (finishing) return;
    try {
      if (!code) writeAtomic(resolve(ioDir, RESULT_FILE), "null");
      else writeAtomic(resolve(ioDir, ERROR_FILE), JSON.stringify({ kind: "exception", message: `process.exit(${code}) called` }));
    } catch {}
  });

  // The event loop emptied while the script's top-level code or main was
  // still awaiting a promise nothing will ever settle.
  process.on("beforeExit", () => {
    if (finishing) return;
    const what = phase === "import" ? "the script's top-level code" : "main";
    fail(ioDir, new Failure("exception", `${what} never finished: it awaits a promise that nothing is left to settle`, EXIT_EXCEPTION));
  });

  try {
    await run(script, ioDir);
  } catch (err) {
    return fail(ioDir, err);
  }
  return finish(ioDir, 0);
}

// No top-level await here: Bun 1.4 spins at 100% CPU forever when a
// top-level await never settles, whereas a plain promise lets the event loop
// empty and "beforeExit" report it.
if (import.meta.main) entry().catch((err) => printError(err));
