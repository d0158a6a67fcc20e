"""A reused jail's loop: shim.py <script> <io-dir> --reuse | --reuse-late.

One frame per message on stdin, one line each: {"args": {...}, "env": {...}}
(runtimes.ReuseFrame). The script is imported once (ahead of the first message
with --reuse, with it with --reuse-late); its module state carries over from
one message to the next, as in an AWS Lambda execution environment. What is
the message's is not: its environment replaces the previous message's (the
jail's own, then the frame's), the working directory is the jail's again, and
after main every process it left is killed and /tmp and /dev/shm are emptied
before the end line. A message that fails, calls sys.exit, or leaves something
that cannot be cleaned ends the process after its end line: the host replaces
the jail. Otherwise the ready line follows the end line: the jail is clean and
waits for its next message.
"""

import json
import os
import signal
import sys

import _agenthost_shim as shim

SWEEP_ROUNDS = 60  # about 2 s in all


def _pids():
    return {int(n) for n in os.listdir("/proc") if n.isdigit()}


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # gone
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def sweep(keep):
    """Kills every process that is not one of keep (the jail's own), in rounds: a process
    may fork while its siblings are killed. False when some are left after every round."""
    import time

    for i in range(SWEEP_ROUNDS):
        _reap()
        left = [p for p in _pids() - keep if not _zombie(p)]
        if not left:
            return True
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        # A killed process takes a moment to be gone (its memory is torn down).
        time.sleep(min(0.001 * (i + 1), 0.05))
    _reap()
    return not [p for p in _pids() - keep if not _zombie(p)]


def _wipe_entries(top):
    for entry in os.scandir(top):
        path = entry.path
        if entry.is_dir(follow_symlinks=False):
            try:
                os.chmod(path, 0o700)
            except OSError:
                pass
            _wipe_entries(path)
            os.rmdir(path)
        else:
            os.unlink(path)


def wipe(dirs):
    """Empties dirs; False when something is left."""
    ok = True
    for d in dirs:
        try:
            _wipe_entries(d)
        except FileNotFoundError:
            pass
        except OSError:
            ok = False
        try:
            if os.listdir(d):
                ok = False
        except FileNotFoundError:
            pass
    return ok


def _join_threads(before):
    """Waits for the non-daemon threads the message started, as an exit would."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for t in threading.enumerate():
        if t not in before and not t.daemon and t is not threading.current_thread():
            try:
                t.join()
            except BaseException:  # noqa: BLE001
                pass


def _threads():
    threading = sys.modules.get("threading")
    return set(threading.enumerate()) if threading is not None else set()


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def run_one(line, state):
    """Runs one message; returns (exit code, whether the jail may serve another)."""
    io_dir = state["io"]
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise shim.Failure("argument", f"the message is not valid JSON: {exc}")
    args = message.get("args") if isinstance(message, dict) else None
    if not isinstance(args, dict):
        raise shim.Failure("argument", "the payload must be a JSON object")
    os.environ.clear()
    os.environ.update(state["env"])
    os.environ.update(message.get("env") or {})
    os.chdir(state["cwd"])
    if state["module"] is None:
        state["module"] = shim.load_module(state["script"])
    result = shim.call_main(state["module"], args)
    shim.write_atomic(os.path.join(io_dir, shim.RESULT_FILE), shim.serialise(result))
    return 0


def serve(script, io_dir, import_ahead):
    state = {"script": script, "io": io_dir, "env": dict(os.environ), "cwd": os.getcwd(), "module": None}
    keep = _pids()
    if import_ahead:
        try:
            state["module"] = shim.load_module(script)
        except BaseException:  # noqa: BLE001 - the top-level code may need a message
            _flush()
            os._exit(shim.EXIT_IMPORT_AHEAD)
    # The frames come on a descriptor of the loop's own; the script's stdin reads nothing, as
    # a cold run's would once its payload is read: main must not read (or wait for) the next
    # message's frame.
    frames = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    shim.announce_ready()
    stdin = frames
    while True:
        line = stdin.readline()
        if not line.strip():
            return 0  # the host closed the jail's stdin: it is torn down
        before = _threads()
        stay = True
        try:
            code = run_one(line, state)
        except shim.Failure as failure:
            print(f"error: {failure.message}", file=sys.stderr)
            kind, message, code = failure.kind, failure.message, failure.code
        except SystemExit as exc:
            # sys.exit() in main: its message ends as in a cold run, and so does the process.
            stay = False
            if exc.code is None or exc.code == 0:
                shim.write_atomic(os.path.join(io_dir, shim.RESULT_FILE), "null")
                code = 0
            else:
                kind, message, code = "exception", f"SystemExit: {shim.one_line(exc.code)}", shim.EXIT_EXCEPTION
        except BaseException as exc:  # noqa: BLE001 - report everything
            shim.print_user_traceback(exc)
            kind, message, code = "exception", shim.describe_exception(exc), shim.EXIT_EXCEPTION
        if code != 0:
            error = {"kind": kind, "message": message}
            shim.write_atomic(os.path.join(io_dir, shim.ERROR_FILE), json.dumps(error, ensure_ascii=False))
            stay = False
        _join_threads(before)
        clean = sweep(keep)
        clean = wipe(("/tmp", "/dev/shm")) and clean
        _flush()
        shim.announce_end(code)
        if not (stay and clean):
            os._exit(code)
        # Ready for the next message: the host returns the jail to its pool only on this line.
        shim.announce_ready()
