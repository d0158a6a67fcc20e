"""Job shim for Python scripts: shim.py <script> <io-dir> [--warm | --warm-late | --template].

This is the shim proper; shim.py, the script python3 runs, only imports it, so
that the bytecode the host compiled for it is used (see shim.py). Its name is
none a function would give a module of its own: it stays in sys.modules.

Loads the user's script as a plain module, calls its ``main`` with the
payload from <io-dir>/args.json bound by parameter name, and writes the
JSON-serialised return value to <io-dir>/result.json. Failures go to
<io-dir>/error.json as {"kind": ..., "message": ...} so the host can tell
a bad payload or a broken script (never retried) from an exception in
main (retried).

Exit codes: 0 success, 1 exception (in main or while importing the
script), 2 argument / definition / result error. The host reads the files
first; the exit code is only a fallback.

With --warm the shim is a warm jail's runtime: it imports the script ahead of
any job (its top-level code runs now, as in a Lambda init phase; --warm-late
waits with that until the hand-over, for scripts whose top-level code may need
the job's secrets), then blocks reading the hand-over from stdin until EOF:
{"args": {...}, "env": {"NAME": "value", ...}}. Only then does the job exist:
the environment is completed, and main runs as in a cold start. An import
that fails ahead exits at once with EXIT_IMPORT_AHEAD, before any job: the
host then starts the function's warm jails with --warm-late, and the
failure, if it is one with the job's environment too, is reported as a cold
start reports it.

Everything here runs before the user's code, so it sticks to the standard
library and keeps imports few (startup time is paid by every job).
"""

import sys

# Line-buffer stdout so each print reaches the host's log stream as it
# happens instead of when an 8 KiB block fills (stdout is a pipe here).
# backslashreplace keeps a stray undecodable string from killing the job.
for _stream in (sys.stdout, sys.stderr):
    try:
        _stream.reconfigure(line_buffering=True, errors="backslashreplace")
    except (AttributeError, ValueError):
        pass

# asyncio and traceback are imported where needed: asyncio alone costs ~30 ms
# of startup, which a sync main should not pay. Neither json nor importlib.util
# is imported up front either (see json_loads and below): with what they import
# (re, enum, functools, collections, contextlib) they cost more than the
# interpreter's own start, in every job, for a handful of calls.
import importlib.machinery  # noqa: E402
import os  # noqa: E402

try:
    # What importlib.util re-exports, from the modules the interpreter has
    # loaded already (importlib.util itself imports contextlib and more).
    from importlib._bootstrap import module_from_spec  # noqa: E402
    from importlib._bootstrap_external import spec_from_file_location  # noqa: E402
except ImportError:  # an interpreter that moved them
    from importlib.util import module_from_spec, spec_from_file_location  # noqa: E402

try:
    import _json  # noqa: E402 - json's C accelerators, without the json package
except ImportError:
    _json = None

ARGS_FILE = "args.json"
RESULT_FILE = "result.json"
ERROR_FILE = "error.json"

# Not "__main__", so the script's `if __name__ == "__main__":` block (often a
# local test harness) does not run; registered in sys.modules under this name
# so dataclasses, pickle and typing.get_type_hints can find the module.
MODULE_NAME = "__script__"

EXIT_EXCEPTION = 1
EXIT_TERMINAL = 2
EXIT_IMPORT_AHEAD = 3

# Cap on error messages: one line for a UI, not a dump of the payload.
MAX_MESSAGE = 2000

_SHIM_FILE = os.path.abspath(__file__)


class Failure(Exception):
    """A failure with a kind the host understands, ending the run."""

    def __init__(self, kind, message, code=EXIT_TERMINAL):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.code = code


class _ScanContext:
    """The settings json.loads gives its C scanner by default."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_scan = _json.make_scanner(_ScanContext()) if _json is not None else None
_JSON_SPACE = " \t\n\r"


def json_loads(raw):
    """json.loads(raw), through json's C scanner. Anything it does not take as json.loads
    would (another encoding than UTF-8, a byte order mark, an error) is handed to json.loads
    itself: the result, or the error and its message, are always json's."""
    if _scan is not None:
        try:
            if isinstance(raw, bytes):
                # json.loads detects UTF-16 and UTF-32 by their zero bytes, and a BOM.
                if b"\x00" in raw[:4] or raw[:2] in (b"\xff\xfe", b"\xfe\xff") or raw[:3] == b"\xef\xbb\xbf":
                    raise ValueError
                raw_text = raw.decode("utf-8", "surrogatepass")
            else:
                raw_text = raw
            start = len(raw_text) - len(raw_text.lstrip(_JSON_SPACE))
            value, end = _scan(raw_text, start)
            if not raw_text[end:].strip(_JSON_SPACE):
                return value
        except Exception:  # noqa: BLE001 - json.loads says what is wrong
            pass
    import json

    return json.loads(raw)


def _not_serialisable(value):
    raise TypeError  # json.dumps, called then, says which type


def json_dumps(value, compact=False, allow_nan=True):
    """json.dumps(value, ensure_ascii=False, allow_nan=allow_nan), with separators (",", ":")
    when compact, through json's C encoder as json.dumps itself uses it. A value it refuses is
    handed to json.dumps, whose error (and message) it is."""
    item, key = (",", ":") if compact else (", ", ": ")
    if _json is not None:
        try:
            encode = _json.make_encoder({}, _not_serialisable, _json.encode_basestring, None, key, item, False, False, allow_nan)
            return "".join(encode(value, 0))
        except Exception:  # noqa: BLE001 - json.dumps says what is wrong
            pass
    import json

    return json.dumps(value, ensure_ascii=False, allow_nan=allow_nan, separators=(item, key))


def write_atomic(path, text):
    # Write then rename, so the host never reads a half-written result even
    # if the process is killed mid-write.
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def one_line(text):
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line[:MAX_MESSAGE]
    return ""


def describe_exception(exc):
    name = type(exc).__name__
    detail = one_line(exc)
    return f"{name}: {detail}" if detail else name


def print_user_traceback(exc):
    # Drop the leading frames that belong to this shim or to importlib, so the
    # log shows the user's code first.
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename == _SHIM_FILE or filename.startswith("<frozen importlib"):
            tb = tb.tb_next
            continue
        break
    import traceback

    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
    sys.stderr.flush()


def load_args(io_dir):
    path = os.path.join(io_dir, ARGS_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        # No payload file is the same as an empty payload.
        return {}
    # The arguments may hold resolved secrets: read once, they leave the disk.
    try:
        os.remove(path)
    except OSError:
        pass
    try:
        args = json_loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise Failure("argument", f"the payload is not valid JSON: {exc}")
    if not isinstance(args, dict):
        raise Failure(
            "argument",
            f"the payload must be a JSON object, got {type(args).__name__}",
        )
    return args


def load_module(script):
    script_dir = os.path.dirname(script)
    # Python put this shim's directory first; the script should see its own
    # directory instead, exactly as if it had been run as `python3 script.py`.
    shim_dir = os.path.realpath(os.path.dirname(_SHIM_FILE))
    if sys.path and os.path.realpath(sys.path[0] or ".") == shim_dir:
        del sys.path[0]
    sys.path.insert(0, script_dir)
    sys.argv = [script]

    # An explicit loader, so the entry file loads whatever its extension.
    loader = importlib.machinery.SourceFileLoader(MODULE_NAME, script)
    spec = spec_from_file_location(MODULE_NAME, script, loader=loader)
    if spec is None or spec.loader is None:
        raise Failure("definition", f"cannot load {script} as a Python module")
    module = module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        if exc.filename and os.path.abspath(exc.filename) == script:
            # The script itself does not compile: retrying cannot help.
            print_user_traceback(exc)
            raise Failure("definition", describe_exception(exc))
        raise
    return module


def render_default(value):
    try:
        return json_dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def render_signature(sig):
    """main(name, greeting="Hello"): short, JSON-ish, without annotations."""
    parts = []
    star_done = False
    for param in sig.parameters.values():
        kind = param.kind
        if kind is param.VAR_POSITIONAL:
            parts.append("*" + param.name)
            star_done = True
            continue
        if kind is param.VAR_KEYWORD:
            parts.append("**" + param.name)
            continue
        if kind is param.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        text = param.name
        if param.default is not param.empty:
            text += "=" + render_default(param.default)
        parts.append(text)
    return "main(" + ", ".join(parts) + ")"


_NO_DEFAULT = object()
_CO_VARKEYWORDS = 0x08


def plain_parameters(main):
    """(name, positional_only, default) for each named parameter, and whether main takes
    **kwargs, read from a plain function's code object. Importing inspect costs about 5 ms,
    a tenth of a short job's run, so it is only loaded for what this cannot read."""
    code = getattr(main, "__code__", None)
    if code is None or type(main).__name__ != "function" or hasattr(main, "__wrapped__"):
        return None
    npos, nkw = code.co_argcount, code.co_kwonlyargcount
    names = code.co_varnames[: npos + nkw]
    defaults = main.__defaults__ or ()
    kwdefaults = main.__kwdefaults__ or {}
    first_default = npos - len(defaults)
    params = []
    for i, name in enumerate(names[:npos]):
        default = defaults[i - first_default] if i >= first_default else _NO_DEFAULT
        params.append((name, i < code.co_posonlyargcount, default))
    for name in names[npos:]:
        params.append((name, False, kwdefaults.get(name, _NO_DEFAULT)))
    return params, bool(code.co_flags & _CO_VARKEYWORDS)


def signature_parameters(main):
    """The same as plain_parameters, through inspect, for anything else that is callable."""
    import inspect

    try:
        sig = inspect.signature(main)
    except (TypeError, ValueError):
        return None
    params, var_keyword = [], False
    for param in sig.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_keyword = True
        elif param.kind is not param.VAR_POSITIONAL:
            default = _NO_DEFAULT if param.default is param.empty else param.default
            params.append((param.name, param.kind is param.POSITIONAL_ONLY, default))
    return params, var_keyword


def bind(main, args):
    """Map the payload onto main's parameters by name, Windmill style."""
    found = plain_parameters(main) or signature_parameters(main)
    if found is None:
        # Some builtins and C callables have no signature: pass every key.
        return (), dict(args)
    params, var_keyword = found

    positional = []
    keywords = {}
    missing = []
    consumed = set()
    for name, positional_only, default in params:
        present = name in args
        if positional_only:
            # Cannot be passed by name, so fill them in order; a default has
            # to be passed explicitly when a later one is given.
            consumed.add(name)
            if present:
                positional.append(args[name])
            elif default is not _NO_DEFAULT:
                positional.append(default)
            else:
                missing.append(name)
            continue
        if present:
            keywords[name] = args[name]
            consumed.add(name)
        elif default is _NO_DEFAULT:
            missing.append(name)

    if missing:
        import inspect

        quoted = ", ".join(f'"{name}"' for name in missing)
        noun = "argument" if len(missing) == 1 else "arguments"
        raise Failure(
            "argument",
            f"missing required {noun} {quoted} for {render_signature(inspect.signature(main))}",
        )

    if var_keyword:
        # **kwargs asks for everything, so nothing is ignored.
        for key, value in args.items():
            if key not in consumed:
                keywords[key] = value
    # Otherwise keys that match no parameter are dropped: a step may take part
    # of the previous step's result.
    return tuple(positional), keywords


def call_main(module, args):
    main = getattr(module, "main", None)
    if main is None:
        raise Failure(
            "definition",
            "the script does not define a main function (def main(...): ...)",
        )
    if not callable(main):
        raise Failure(
            "definition",
            f"main is not callable (it is a {type(main).__name__})",
        )
    positional, keywords = bind(main, args)
    result = main(*positional, **keywords)
    if hasattr(result, "__await__"):  # a coroutine or another awaitable
        import asyncio

        result = asyncio.run(_await(result))
    return result


async def _await(awaitable):
    return await awaitable


def serialise(result):
    try:
        # allow_nan=False: NaN and Infinity are not JSON and would make the
        # host choke on result.json later.
        # Compact, as the host publishes it: the host reads result.json up to the result
        # limit, and spaces after separators must not count against it.
        return json_dumps(result, compact=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise Failure(
            "result",
            f"main returned a value that is not JSON-serialisable "
            f"({type(result).__name__}): {one_line(exc)}",
        )


def run(script, io_dir):
    args = load_args(io_dir)
    module = load_module(script)
    result = call_main(module, args)
    write_atomic(os.path.join(io_dir, RESULT_FILE), serialise(result))


class NoHandover(Exception):
    """The host closed a warm jail's stdin without handing a job over: it is torn down."""


def read_handover():
    raw = sys.stdin.buffer.read()
    if not raw.strip():
        raise NoHandover()
    try:
        message = json_loads(raw)
    except ValueError as exc:
        raise Failure("argument", f"the hand-over is not valid JSON: {exc}")
    args = message.get("args") if isinstance(message, dict) else None
    if not isinstance(args, dict):
        raise Failure("argument", "the payload must be a JSON object")
    os.environ.update(message.get("env") or {})
    return args


def run_warm(script, io_dir, import_ahead):
    module = None
    if import_ahead:
        try:
            module = load_module(script)
        except BaseException:  # noqa: BLE001 - the top-level code may need the job
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_IMPORT_AHEAD)
    announce_ready()
    args = read_handover()
    if module is None:
        module = load_module(script)
    result = call_main(module, args)
    write_atomic(os.path.join(io_dir, RESULT_FILE), serialise(result))


REHEARSAL_SOURCE = "def main(a=None, *, b=None):\n    return {'a': a}\n"


def rehearse():
    """A forked job's path, walked once with a dummy job of our own by a spare, sealed, before
    its job exists (forkserver.py): the pages of the template's objects that every job writes
    (reference counts, caches) are copied now, off the job's path, instead of faulting one by
    one during it. Nothing of the function runs, and nothing of this is left for the job: the
    environment is put back, the files and the module removed."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(json_loads(json_dumps(saved)))
    name = "/tmp/.rehearsal"
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        for leftover in (name + ".json", name + ".err"):
            try:
                os.remove(leftover)
            except FileNotFoundError:
                pass
        write_atomic(name + ".json", '{"a": 1, "c": [2, "x"]}')
        with open(name + ".json", "rb") as f:
            args = json_loads(f.read())
        os.remove(name + ".json")
        with open(name + ".py", "w", encoding="utf-8") as f:
            f.write(REHEARSAL_SOURCE)
        loader = importlib.machinery.SourceFileLoader("__rehearsal__", name + ".py")
        spec = spec_from_file_location("__rehearsal__", name + ".py", loader=loader)
        module = module_from_spec(spec)
        sys.modules["__rehearsal__"] = module
        spec.loader.exec_module(module)
        write_atomic(name + ".json", serialise(call_main(module, args)))
    finally:
        sys.modules.pop("__rehearsal__", None)
        sys.dont_write_bytecode = dont_write
        for leftover in (name + ".py", name + ".json", name + ".json.tmp"):
            try:
                os.remove(leftover)
            except OSError:
                pass


def main():
    warm = sys.argv[3] if len(sys.argv) == 4 else None
    if len(sys.argv) not in (3, 4) or warm not in (None, "--warm", "--warm-late", "--template", "--reuse", "--reuse-late"):
        print("usage: shim.py <script> <io-dir> [--warm | --warm-late | --template | --reuse | --reuse-late]", file=sys.stderr)
        return EXIT_TERMINAL
    script = os.path.abspath(sys.argv[1])
    io_dir = os.path.abspath(sys.argv[2])
    if warm in ("--reuse", "--reuse-late"):
        # A reused jail (reuse: <n>): many messages, one after another (_agenthost_reuse.py).
        import _agenthost_reuse

        return _agenthost_reuse.serve(script, io_dir, warm == "--reuse")
    if warm == "--template":
        # A template jail (forkserver.py): nothing of the function runs here. serve returns
        # in a job's fork only, sealed in namespaces of its own, which then runs as cold.
        import forkserver

        forkserver.serve(announce_ready, rehearse)
        warm = None
        forked = True
    else:
        forked = False

    # Outputs from an earlier attempt in the same directory must not be
    # mistaken for this run's.
    for name in (RESULT_FILE, ERROR_FILE):
        try:
            os.remove(os.path.join(io_dir, name))
        except FileNotFoundError:
            pass

    try:
        if warm:
            run_warm(script, io_dir, warm == "--warm")
        else:
            run(script, io_dir)
        code = 0
    except NoHandover:
        return 0
    except Failure as failure:
        # Say it in the log too: the host shows logs before it shows errors.
        print(f"error: {failure.message}", file=sys.stderr)
        kind, message, code = failure.kind, failure.message, failure.code
    except SystemExit as exc:
        # sys.exit() inside the script: 0/None is a normal end with no result.
        if exc.code is None or exc.code == 0:
            write_atomic(os.path.join(io_dir, RESULT_FILE), "null")
            code = 0
        else:
            kind, message, code = (
                "exception",
                f"SystemExit: {one_line(exc.code)}",
                EXIT_EXCEPTION,
            )
    except BaseException as exc:  # noqa: BLE001 - report everything
        print_user_traceback(exc)
        kind, message, code = "exception", describe_exception(exc), EXIT_EXCEPTION

    if code != 0:
        error = {"kind": kind, "message": message}
        write_atomic(
            os.path.join(io_dir, ERROR_FILE), json_dumps(error)
        )
    finish_job()
    announce_end(code)
    if forked:
        # A fork ends without the interpreter's teardown, which costs a fork more than its job
        # (it tears down every module the template loaded); what of it concerns the job, its
        # writes, is done here.
        flush_open_files()
        os._exit(code)
    return code


def flush_open_files():
    """Flush the files the job left open, as the interpreter's exit would when it finalizes
    them, so that what it wrote reaches /job and its volumes."""
    import gc
    import io

    # By exact type: an isinstance check against the io ABCs costs more than the teardown saved.
    # get_objects leaves out the template's objects, frozen before the fork (forkserver.py):
    # what it lists is the job's own.
    buffered = {io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair}
    for obj in gc.get_objects():
        if type(obj) in buffered:
            try:
                if not obj.closed:
                    obj.flush()
            except BaseException:  # noqa: BLE001 - the exit would ignore it too
                pass


def finish_job():
    """What the interpreter's exit would do for the job before the host may answer: wait for
    the job's non-daemon threads, run its atexit handlers, flush its streams. The host answers
    on announce_end and then ends the jail, so nothing of the job may be left for later."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # noqa: BLE001 - the exit would ignore it too
            pass
    import atexit

    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


END_MARKER = "\x1ehost-end "
READY_LINE = b"\x1ehost-ready\n"


def announce_ready():
    # After whatever the top-level code printed: the host counts the jail as waiting once it
    # reads this line (see runtimes.ReadyMarker), and drops it from the job's output.
    try:
        sys.stdout.flush()
        os.write(1, READY_LINE)
    except (OSError, ValueError):
        pass


def announce_end(code):
    # Straight to the descriptors, after everything else the job printed on them: the host
    # answers once it has read this line on both (see runtimes.EndMarker).
    line = f"{END_MARKER}{code}\n".encode()
    for fd in (1, 2):
        try:
            os.write(fd, line)
        except OSError:
            pass
