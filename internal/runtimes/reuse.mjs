// A reused jail's loop for Bun: bun shim.mjs <script> <io-dir> --reuse | --reuse-late
// (see runtimes.BuildReuse, and _agenthost_reuse.py, its Python twin).
//
// One frame per message on stdin, one line each: {"args": {...}, "env": {...}}. The script
// is imported once; its module state carries over from one message to the next, as in an AWS
// Lambda execution environment. What is the message's is not: its environment replaces the
// previous message's, the working directory is the jail's again, and after main every
// process it left is killed and /tmp and /dev/shm are emptied before the end line. A message
// that fails, or leaves something that cannot be cleaned, ends the process after its end
// line (the shim's finish); process.exit() in main ends it as in a cold run.

import { readdirSync, readFileSync, rmSync, chmodSync } from "node:fs";
import { resolve } from "node:path";
import * as shim from "./shim.mjs";

const SWEEP_ROUNDS = 60; // about 2 s in all

function pids() {
  return readdirSync("/proc").filter((n) => /^\d+$/.test(n)).map(Number);
}

function zombie(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    return stat[stat.lastIndexOf(")") + 2] === "Z";
  } catch {
    return true; // gone
  }
}

// sweep kills every process but keep (the jail's own), in rounds: a process may fork while its
// siblings are killed. False when some are left after every round.
function sweep(keep) {
  for (let round = 0; round < SWEEP_ROUNDS; round++) {
    const left = pids().filter((p) => !keep.has(p) && !zombie(p));
    if (!left.length) return true;
    for (const pid of left) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {}
    }
    // A killed process takes a moment to be gone (its memory is torn down).
    Bun.sleepSync(Math.min(round + 1, 50));
  }
  return !pids().some((p) => !keep.has(p) && !zombie(p));
}

// wipe empties dirs; false when something is left.
function wipe(dirs) {
  let ok = true;
  for (const dir of dirs) {
    let names;
    try {
      names = readdirSync(dir);
    } catch {
      continue;
    }
    for (const name of names) {
      const path = resolve(dir, name);
      try {
        chmodSync(path, 0o700);
      } catch {}
      try {
        rmSync(path, { recursive: true, force: true });
      } catch {}
    }
    try {
      if (readdirSync(dir).length) ok = false;
    } catch {}
  }
  return ok;
}

async function runOne(line, state) {
  let message;
  try {
    message = JSON.parse(line);
  } catch (err) {
    throw new shim.Failure("argument", `the message is not valid JSON: ${shim.oneLine(err.message)}`);
  }
  const args = message?.args;
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new shim.Failure("argument", "the payload must be a JSON object");
  }
  for (const name of Object.keys(process.env)) {
    if (!Object.hasOwn(state.env, name)) delete process.env[name];
  }
  Object.assign(process.env, state.env, message.env ?? {});
  process.chdir(state.cwd);
  if (!state.main) {
    const source = shim.readSource(state.script);
    state.mod ??= await shim.importScript(state.script);
    state.main = shim.mainOf(state.mod, state.script, source);
  }
  const { main, params } = state.main;
  const values = params ? shim.bind(params, args) : [args];
  const text = shim.resultText(await main(...values));
  shim.writeAtomic(resolve(state.ioDir, shim.RESULT_FILE), text);
}

export async function serve(script, ioDir, importAhead) {
  const state = { script, ioDir, env: { ...process.env }, cwd: process.cwd(), mod: null, main: null };
  const keep = new Set(pids());
  if (importAhead) {
    try {
      state.mod = await shim.importScript(script);
    } catch {
      shim.exitAhead();
    }
    try {
      state.main = shim.mainOf(state.mod, script, shim.readSource(script));
    } catch {}
  }
  process.stdout.write("\x1ehost-ready\n");
  for await (const line of console) {
    if (!line.trim()) continue;
    let code = 0;
    let kind, message;
    try {
      await runOne(line, state);
    } catch (err) {
      if (err instanceof shim.Failure) {
        process.stderr.write(`error: ${err.message}\n`);
        ({ code, kind, message } = { code: err.code, kind: err.kind, message: err.message });
      } else {
        shim.printError(err);
        ({ code, kind, message } = { code: shim.EXIT_EXCEPTION, kind: "exception", message: shim.describe(err) });
      }
    }
    const clean = sweep(keep) & wipe(["/tmp", "/dev/shm"]);
    if (code !== 0 || !clean) return shim.finish(ioDir, code, kind, message); // its end line, then exit
    const end = `${shim.END_MARKER}0\n`;
    process.stdout.write(end);
    process.stderr.write(end);
    // Ready for the next message: the host returns the jail to its pool only on this line.
    process.stdout.write("\x1ehost-ready\n");
  }
}
