// Job shim for TypeScript / JavaScript scripts:
// bun shim.mjs <script> <io-dir> [--warm | --warm-late].
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
// With --warm the shim is a warm jail's runtime: it imports the script ahead
// of any job (its top-level code runs now, as in a Lambda init phase;
// --warm-late waits with that until the hand-over, for scripts whose
// top-level code may need the job's secrets), then reads the hand-over from
// stdin until EOF: {"args": {...}, "env": {"NAME": "value", ...}}. Only then
// does the job exist: the environment is completed and main runs as in a cold
// start. An import that fails ahead exits at once with EXIT_IMPORT_AHEAD,
// before any job: the host then starts the function's warm jails with
// --warm-late, where a failure is the job's, reported as a cold start does.
//
// Parameters are read from main itself, split by the engine, with
// TypeScript's `name?:` marks from Bun's transpiler (see "Reading main's
// parameters").

import { readFileSync, writeFileSync, renameSync, rmSync } from "node:fs";
import { resolve, basename } from "node:path";
import { pathToFileURL } from "node:url";

const ARGS_FILE = "args.json";
const RESULT_FILE = "result.json";
const ERROR_FILE = "error.json";
const EXIT_EXCEPTION = 1;
const EXIT_TERMINAL = 2;
const EXIT_IMPORT_AHEAD = 3;
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
// Reading main's parameters.
//
// The parsing is Bun's and the engine's, not the shim's:
//
//   - The parameter list is main's own text, main.toString(): Bun compiles the
//     script before it runs, so that is Bun's printing of exactly the function
//     that will be called, whatever its form (declaration, arrow, method,
//     CommonJS export, a re-export under another name), with TypeScript types
//     and comments gone.
//   - The engine splits it: `new Function(params, "")` parses a parameter list
//     without running any of it, and a slice of the text is a whole parameter
//     list exactly when it parses. Cutting at the first `)` (or `,`) where it
//     does gives the list (or one parameter), so parentheses and commas inside
//     defaults, strings, templates and regular expressions cannot mislead it.
//     The engine also says which parameter has a default (Function.length).
//   - TypeScript's `name?: T` is the one thing compilation erases: `name?:
//     string` prints as a plain `name`. Bun's transpiler prints the source once
//     more with every `name?:` renamed `name<MARK>:` (in JS, `?` directly
//     before `:` occurs only inside strings, comments and regular expressions,
//     which the renaming leaves valid), and main's header is found in that
//     printing: its parameters that carry the mark are the optional ones.
//
// Reading the source text instead (as earlier versions did by hand) has to
// find which `main` is meant and to skip types, generics and comments; main's
// own text has none of that.

const MARK = "__shim_optional__";
// Taken before the script is imported, which could replace them.
const NewFunction = Function;
const fnToString = Function.prototype.toString;
// Longer is not a parameter list: stop trying before compiling a whole body.
const MAX_PARAMS_TEXT = 20000;
// Identifiers as Bun prints them at run time: non-ASCII letters escaped.
const ESCAPE = String.raw`\\u\{[0-9a-fA-F]+\}|\\u[0-9a-fA-F]{4}`;
const ID = String.raw`(?:[\p{ID_Start}$_]|${ESCAPE})(?:[\p{ID_Continue}$\u200c\u200d]|${ESCAPE})*`;
const IDENT = new RegExp(`^${ID}`, "u");
const SINGLE = new RegExp(String.raw`^(?:async\s+)?(${ID})\s*=>`, "u");
const unescapeIdent = (s) => s.replace(new RegExp(ESCAPE, "g"), (e) => String.fromCodePoint(parseInt(e.replace(/[\\u{}]/g, ""), 16)));
const OPTIONAL = /([\p{ID_Continue}$\u200c\u200d])(\s*)\?(\s*):/gu;

function parses(params) {
  try {
    new NewFunction(params, "");
    return true;
  } catch {
    return false;
  }
}

// paramList finds the parameter list in a function's text: {list, end}, the
// text inside the parentheses (or the single arrow parameter) and where the
// header ends; null when there is none.
function paramList(text) {
  const single = SINGLE.exec(text);
  if (single) return { list: single[1], end: single[0].length };
  const open = text.indexOf("(");
  if (open < 0) return null;
  for (let close = text.indexOf(")", open); close >= 0 && close - open < MAX_PARAMS_TEXT; close = text.indexOf(")", close + 1)) {
    const list = text.slice(open + 1, close);
    const after = text.slice(close + 1).trimStart();
    if ((after.startsWith("{") || after.startsWith("=>")) && parses(list)) return { list, end: close + 1 };
  }
  return null;
}

// splitParams cuts a parameter list into its parameters' texts.
function splitParams(list) {
  const out = [];
  let start = 0;
  for (let comma = list.indexOf(","); comma >= 0; comma = list.indexOf(",", comma + 1)) {
    const piece = list.slice(start, comma);
    if (piece.trim() && parses(piece)) {
      out.push(piece.trim());
      start = comma + 1;
    }
  }
  const last = list.slice(start).trim();
  if (last) out.push(last); // empty after a trailing comma
  return out;
}

const squash = (s) => s.replace(/\s+/g, " ").trim();

// describeParam describes one parameter: {name, optional, rest, pattern, display}.
function describeParam(text) {
  if (text.startsWith("...")) {
    const name = unescapeIdent(IDENT.exec(text.slice(3).trimStart())?.[0] ?? "");
    return { name, rest: true, display: "..." + (name || "args") };
  }
  // One parameter: length 0 means it has a default.
  const optional = new NewFunction(text, "").length === 0;
  if (text[0] === "{" || text[0] === "[") {
    // A destructuring pattern: it ends at the first `=` before which it parses.
    let pattern = text;
    let def = null;
    for (let eq = text.indexOf("="); optional && eq >= 0; eq = text.indexOf("=", eq + 1)) {
      if (parses(text.slice(0, eq))) {
        pattern = text.slice(0, eq);
        def = text.slice(eq + 1);
        break;
      }
    }
    pattern = squash(pattern);
    return { name: "", pattern: true, optional, display: def === null ? pattern : `${pattern}=${squash(def)}` };
  }
  const raw = IDENT.exec(text)?.[0] ?? "";
  const name = unescapeIdent(raw);
  const display = optional ? `${name}=${squash(text.slice(text.indexOf("=", raw.length) + 1))}` : name;
  return { name, optional, display };
}

// parseFunction returns the parameters of a function given its text, with
// where its header ends, or null when the text has no parameter list.
export function parseFunction(text) {
  const found = paramList(text);
  if (!found) return null;
  return { params: splitParams(found.list).map(describeParam), end: found.end };
}

// loaderOf is the Bun loader the runtime uses for a script.
function loaderOf(script) {
  const ext = script.slice(script.lastIndexOf(".")).toLowerCase();
  if ([".ts", ".mts", ".cts"].includes(ext)) return "ts";
  if (ext === ".tsx") return "tsx";
  if ([".js", ".jsx"].includes(ext)) return "jsx";
  return "js";
}

// optionalNames returns, for each of the header's parameters, whether the
// source marks it optional with `?:`; null when the source says nothing.
function optionalNames(source, loader, header, count) {
  if (source == null || !new RegExp(OPTIONAL.source, "u").test(source)) return null;
  const marked = source.replace(OPTIONAL, (_, c, a, b) => c + MARK + a + b + ":");
  const printed = new Bun.Transpiler({ loader }).transformSync(marked);
  // Find the header in the printing without marks, then read it with them.
  const parts = printed.split(MARK);
  const plain = parts.join("");
  // The transpiler prints identifiers as written, the runtime escapes them.
  const at = plain.indexOf(unescapeIdent(header));
  if (at < 0) {
    // The header prints differently here than at run time: every name marked
    // anywhere in the file counts as optional, the mistake that never
    // refuses a call the function accepts.
    const names = new Set([...printed.matchAll(new RegExp(`([\\p{ID_Continue}$]+)${MARK}`, "gu"))].map((m) => m[1]));
    return { byName: names };
  }
  let before = 0; // marks ahead of the header
  for (let k = 0, pos = 0; k < parts.length - 1 && pos <= at; k++) {
    pos += parts[k].length; // where mark k sits in the plain text
    if (pos <= at) before++;
  }
  const found = paramList(printed.slice(at + before));
  if (!found) return null;
  const params = splitParams(found.list);
  if (params.length !== count) return null;
  return { byIndex: params.map((p) => (IDENT.exec(p)?.[0] ?? "").endsWith(MARK)) };
}

// signature returns main's parameters, or null when they cannot be read
// (a native or bound function).
export function signature(main, source, loader) {
  const text = fnToString.call(main);
  if (/\{\s*\[native code\]\s*\}\s*$/.test(text)) return null;
  const fn = parseFunction(text);
  if (!fn) return null;
  let marks = null;
  try {
    marks = optionalNames(source, loader, text.slice(0, fn.end), fn.params.length);
  } catch {} // a source Bun cannot print again: defaults still count
  return fn.params.map((p, k) => {
    const optional = marks?.byIndex ? marks.byIndex[k] : marks?.byName?.has(p.name);
    return optional && !p.rest && !p.optional ? { ...p, optional: true, display: p.display + "?" } : p;
  });
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

async function importScript(script) {
  phase = "import";
  try {
    return await import(pathToFileURL(script).href);
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
}

// NoHandover: the host closed a warm jail's stdin without a job; it is torn down.
class NoHandover extends Error {}

async function readHandover() {
  const raw = await Bun.stdin.text();
  if (!raw.trim()) throw new NoHandover();
  let message;
  try {
    message = JSON.parse(raw);
  } catch (err) {
    throw new Failure("argument", `the hand-over is not valid JSON: ${oneLine(err.message)}`);
  }
  const args = message?.args;
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new Failure("argument", "the payload must be a JSON object");
  }
  for (const [name, value] of Object.entries(message.env ?? {})) process.env[name] = value;
  return args;
}

// mainOf finds the script's main and reads its parameters (null when they cannot be read).
function mainOf(mod, script, source) {
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
  return { main, params: signature(main, source, loaderOf(script)) };
}

function readSource(script) {
  try {
    return readFileSync(script, "utf8");
  } catch {
    return null;
  }
}

async function run(script, ioDir, warm) {
  let mod = null;
  // A warm jail that imported the script ahead also reads main's parameters ahead (Bun's
  // transpiler, milliseconds): the job then only binds its arguments. A failure to find main
  // is the job's, so it is kept for after the hand-over.
  let ahead = null;
  if (warm === "--warm") {
    try {
      mod = await importScript(script);
    } catch {
      // The top-level code may need what only the job brings; no job has seen this jail.
      exitAhead();
    }
    try {
      ahead = mainOf(mod, script, readSource(script));
    } catch {}
  }
  // The ready line (see runtimes.ReadyMarker), queued after whatever the top-level code printed.
  if (warm) process.stdout.write("\x1ehost-ready\n");
  const args = warm ? await readHandover() : loadArgs(ioDir);

  phase = "main";
  let main, params;
  if (ahead) {
    ({ main, params } = ahead);
  } else {
    const source = readSource(script);
    mod ??= await importScript(script);
    phase = "main";
    ({ main, params } = mainOf(mod, script, source));
  }
  let values;
  if (params) {
    values = bind(params, args);
  } else {
    process.stderr.write("warning: could not read main's parameters; passing the whole payload as its first argument\n");
    values = [args];
  }

  writeAtomic(resolve(ioDir, RESULT_FILE), resultText(await main(...values)));
}

function resultText(result) {
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
  return text;
}

// exitAhead ends a runtime whose import ahead of its job failed (see run).
function exitAhead() {
  finishing = true;
  process.exit(EXIT_IMPORT_AHEAD);
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
const END_MARKER = "\x1ehost-end ";
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
  // The end line (see runtimes.EndMarker), queued after everything the job printed: the
  // host answers once it has read it on both streams.
  const line = `${END_MARKER}${code}\n`;
  try {
    process.stdout.write(line);
    process.stderr.write(line);
  } catch {}
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
  const warm = process.argv[4];
  const modes = [undefined, "--warm", "--warm-late", "--reuse", "--reuse-late"];
  if (process.argv.length < 4 || process.argv.length > 5 || !modes.includes(warm)) {
    process.stderr.write("usage: bun shim.mjs <script> <io-dir> [--warm | --warm-late | --reuse | --reuse-late]\n");
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
    if (warm === "--reuse" || warm === "--reuse-late") {
      // A reused jail (reuse: <n>): many messages, one after another (reuse.mjs).
      const { serve } = await import("./reuse.mjs");
      await serve(script, ioDir, warm === "--reuse");
    } else {
      await run(script, ioDir, warm);
    }
  } catch (err) {
    if (err instanceof NoHandover) return finish(ioDir, 0);
    return fail(ioDir, err);
  }
  return finish(ioDir, 0);
}

// No top-level await here: Bun 1.4 spins at 100% CPU forever when a
// top-level await never settles, whereas a plain promise lets the event loop
// empty and "beforeExit" report it.
if (import.meta.main) entry().catch((err) => printError(err));

// For the reused jail's loop (reuse.mjs).
export { Failure, RESULT_FILE, EXIT_EXCEPTION, END_MARKER, oneLine, describe, printError, writeAtomic, readSource, importScript, mainOf, bind, resultText, exitAhead, finish };
