"""The per-session remote agent: serves probe calls as JSON lines, so a call costs a round trip, not a Python start.

Standard library only, Python >= 3.9. Started once per host per session by the orchestrator
(orchestrator/transport/agent.py) over the connection it already holds; reads requests on stdin, answers on stdout,
one JSON object a line.

Requests: ``{"id": n, "op": ...}`` with op
  ``probe``  {"probe", "args", "nonce", "env", "isolate"?}: runs remote_probes/<probe>.py in a forked child of this process (the
             modules below are imported already, the script's code is compiled once), under the probe protocol of
             _probe.py: the child's stdout/stderr come back as they are, and the orchestrator parses the result block
             exactly as it does for a one-shot run. Forking keeps a crashing probe from taking the agent with it.
             A probe whose first lines say ``# orchestrator-agent: in-process`` (pure, read-only, stdlib only, like
             sglang_source) runs instead in a thread of the agent itself, as a module loaded once: no fork, and the
             caches it keeps (located package, file texts, symbol indexes) serve the next call. Its progress
             comes as ``out`` events on stderr, its answer as one ``{"id", "event": "document", "document"}`` (the
             document the markers would carry); an exception in it is that document's ``crash`` error, and the
             agent serves on. Fork isolation stays for every other probe (they may crash the interpreter or import
             heavy things: torch), and for any call that asks for it with ``"isolate": true``.
             A probe whose first lines say ``# orchestrator-agent: preload torch transformers ...`` (it imports
             those first, and they take seconds: torch and transformers' modeling code) is forked instead from a
             warm interpreter (a "zygote", Zygote below): a child of the agent that set the call's environment,
             imported those modules once, and then only forks, so each such call pays the import once per
             session, not once per call. Its children run the probe exactly as the plain fork does (same
             pipes, same events, their own process group). A zygote that cannot be used is said on each call it
             concerns (a ``note`` event: the orchestrator counts them, logs the reason once) and its calls take the
             plain fork path.
  ``run``    {"argv" | "script", "cwd", "env", "stdin"}: a command in its own session (process group).
  ``warm``   {"probes", "env"}: start the zygotes those probes' calls with this environment will use, now (below).
  ``stat``   {"path"}; ``put`` {"path", "data" (base64), "mode"}; ``ping``.
  ``cancel`` {"target": id}: TERM the call's process group, KILL it 2 s later.
Answers: ``{"hello": {...}}`` once at start; then per call ``{"id", "event": "started", "pgid"}``,
``{"id", "event": "out", "stream", "text"}``..., ``{"id", "event": "note", "text"}`` (something the orchestrator logs
once: a warm interpreter that could not be used), and exactly one final ``{"id", "event": "exit", "exit_code"}`` (negative:
killed by that signal), ``{"id", "event": "result", "result"}`` or ``{"id", "event": "error", "message"}``.

It dies with its connection: EOF on stdin (the channel closed, the connection dropped, the orchestrator exited), SIGTERM
or SIGHUP make it TERM then KILL every process group it started, and exit. Each child reports its PGID first so the
orchestrator can also register it with the connection's guardian and kill it should the agent itself be SIGKILLed.
"""

from __future__ import annotations

import base64
import codecs
import gc
import hashlib
import io
import json
import os
import selectors
import signal
import socket
import stat as stat_module  # `stat` is the name of this agent's op below
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import warnings

PROTOCOL = 1
HERE = os.path.dirname(os.path.abspath(__file__))  # remote_probes/agent/
ROOT = os.path.dirname(os.path.dirname(HERE))  # the pushed tree: on sys.path, so remote_probes imports as a package
CHUNK = 65536
KILL_GRACE = 2.0
# Imported before any fork, so a probe's child finds them loaded (a fresh interpreter spends most of its start here).
# Only stdlib and the probes' own stdlib-only helpers: never torch or a package under investigation.
PRELOAD = ("json", "ast", "re", "difflib", "importlib.util", "importlib.metadata", "platform", "socket", "shutil",
           "struct", "urllib.request", "http.client", "remote_probes.agent.protocol",
           "remote_probes.engine.source_address")
IN_PROCESS_MARKER = b"# orchestrator-agent: in-process"
# ``preload m1 m2...``: the probe is forked from a warm interpreter that imported these first (``m?``: optional, a
# module an older install may lack).
PRELOAD_MARKER = b"# orchestrator-agent: preload "
# A warm interpreter still importing after this long is given up (killed; its calls take the plain fork path): a
# torch import that hangs (a broken CUDA stack) must not hold the calls forever.
ZYGOTE_START_TIMEOUT = 180.0
# An in-process document's answer line may be this long (characters): what the orchestrator keeps of a forked
# probe's stdout (MAX_CAPTURE in orchestrator/transport/base.py). A longer one is answered as an error instead.
MAX_DOCUMENT = 4 * 1024 * 1024
# Answer lines come from the loop and from in-process calls' threads: one line at a time.
_SEND_LOCK = threading.Lock()


def _send(message: dict) -> None:
    """One JSON line on fd 1. Blocking on purpose: a slow reader back-pressures the agent, nothing is dropped."""
    _send_line(json.dumps(message, ensure_ascii=False, separators=(",", ":")))


def _send_line(text: str) -> None:
    data = (text + "\n").encode("utf-8")
    view = memoryview(data)
    with _SEND_LOCK:
        while view:
            written = os.write(1, view)
            view = view[written:]


class Job:
    """One call's process: its pipes, its group, and the deadline of a pending KILL."""

    def __init__(self, call_id: object, pid: "int | None", out_fd: int, err_fd: int, stdin_fd: "int | None",
                 stdin_data: bytes) -> None:
        self.call_id = call_id
        self.pid = pid
        self.open_fds = {out_fd: "stdout", err_fd: "stderr"}
        self.decoders = {name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in ("stdout", "stderr")}
        self.stdin_fd = stdin_fd
        self.stdin_data = memoryview(stdin_data)
        self.kill_at: "float | None" = None
        self.status: "int | None" = None
        # Forked by a warm interpreter (Zygote): its exit status comes from there, not from waitpid; ``pid`` is None
        # until the zygote says it forked, and a cancel before that is kept in ``cancelled``.
        self.zygote: "Zygote | None" = None
        self.cancelled = False


class Script:
    """A probe script compiled, with what its marker lines ask for."""

    def __init__(self, code: types.CodeType, in_process: bool, preload: "tuple[str, ...]") -> None:
        self.code, self.in_process, self.preload = code, in_process, preload


def read_script(path: str, source: bytes) -> Script:
    """The markers are read in the first 5 lines; a bad module name is the call's error, not a silent skip."""
    in_process = False
    preload: "tuple[str, ...]" = ()
    for line in source.splitlines()[:5]:
        line = line.strip()
        if line == IN_PROCESS_MARKER:
            in_process = True
        elif line.startswith(PRELOAD_MARKER) or line == PRELOAD_MARKER.rstrip():
            preload = tuple(line[len(PRELOAD_MARKER):].decode("ascii", "replace").split())
            bad = [n for n in preload if not n.rstrip("?").replace(".", "").replace("_", "").isalnum()]
            if bad or not preload:
                raise ValueError("%s: bad module list in its preload line: %r" % (path, bad))
    return Script(compile(source, path, "exec", dont_inherit=True), in_process, preload)


class Zygote:
    """The agent's side of one warm interpreter: a fresh ``python _agent.py --zygote`` (not a fork of the agent:
    it starts with none of the agent's threads, locks or file descriptors, and with the call's environment in place
    before the interpreter does anything: OMP_NUM_THREADS and the like are read when torch's libraries load) that
    imports the preload modules, then forks one child per call. It stays in the agent's process group, so whatever
    kills the agent's group kills it too; its children have groups of their own, as the plain path's have.

    Calls wait in ``pending`` while it imports; ``ready`` sends them; ``failed``/``dead`` send them down the plain
    fork path instead. The socket carries length-framed JSON (with the call's stdout/stderr pipe ends as SCM_RIGHTS)
    one way, JSON lines the other."""

    def __init__(self, key: object, modules: "tuple[str, ...]", env: "dict[str, str]") -> None:
        self.key, self.modules = key, modules
        self.state = "starting"  # -> ready | failed | dead
        self.reason = ""
        self.pending: "list[tuple[Job, dict, int, int]]" = []
        self.jobs: "dict[str, Job]" = {}  # token -> a call sent to it, until its exit
        self.served = 0
        self.fallbacks = 0
        self.ready_seconds: "float | None" = None
        self.inbuf = b""
        self.started = time.monotonic()
        self.errlog = tempfile.TemporaryFile()  # what it prints while importing: said if it fails
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc: "subprocess.Popen[bytes] | None" = subprocess.Popen(
                [sys.executable, "-u", os.path.abspath(__file__), "--zygote", str(theirs.fileno()), *modules],
                pass_fds=(theirs.fileno(),), env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=self.errlog)
        finally:
            theirs.close()
        self.sock = ours

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def describe(self) -> dict:
        return {"modules": list(self.modules), "state": self.state, "reason": self.reason, "pid": self.pid,
                "ready_seconds": self.ready_seconds, "served": self.served, "fallbacks": self.fallbacks}

    def send(self, job: Job, request: dict, out_w: int, err_w: int) -> str:
        """Empty once sent (the zygote holds its own copies of the pipe ends now, ours are closed), else why not:
        then the call is still whole (ours still open), for the plain fork path to take."""
        token = str(job.call_id)
        data = json.dumps(request).encode("utf-8")
        frame = struct.pack("!I", len(data)) + data
        try:
            sent = socket.send_fds(self.sock, [frame], [out_w, err_w])
        except OSError as exc:  # it died since we last heard from it
            return "its socket failed: %s: %s" % (type(exc).__name__, exc)
        os.close(out_w)
        os.close(err_w)
        self.jobs[token] = job
        self.served += 1
        if sent < len(frame):  # the fds went with the first bytes; the rest of a long request follows
            try:
                self.sock.sendall(frame[sent:])
            except OSError as exc:  # its EOF follows: the call, sent, ends as its other calls do
                return "its socket failed: %s: %s" % (type(exc).__name__, exc)
        return ""

    def error_tail(self) -> str:
        try:
            self.errlog.seek(0)
            lines = self.errlog.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""


class Agent:
    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self.jobs: "dict[object, Job]" = {}
        self.code_cache: "dict[str, tuple[tuple[int, int], Script]]" = {}
        # Warm interpreters, one per (the call's environment less its nonce, the preload list).
        self.zygotes: "dict[object, Zygote]" = {}
        self.modules: "dict[str, tuple[types.CodeType, types.ModuleType]]" = {}
        # In-process calls in flight: id -> cancelled flag (a thread cannot be killed; a cancelled call is answered
        # at once and its late document dropped).
        self.in_process: "dict[object, list[bool]]" = {}
        self.in_process_lock = threading.Lock()
        self.inbuf = b""
        self.stopping = False

    # -- requests ---------------------------------------------------------------------------------
    def handle_line(self, line: bytes) -> None:
        try:
            request = json.loads(line)
            call_id = request["id"]
            op = request["op"]
        except (ValueError, KeyError, TypeError) as exc:
            _send({"id": None, "event": "error", "message": "bad request line: %s" % exc})
            return
        try:
            if op == "probe":
                self.start_probe(call_id, request)
            elif op == "run":
                self.start_run(call_id, request)
            elif op == "cancel":
                self.cancel(request.get("target"))
            elif op == "stat":
                _send({"id": call_id, "event": "result", "result": stat(request["path"])})
            elif op == "put":
                _send({"id": call_id, "event": "result", "result": put(request)})
            elif op == "warm":
                _send({"id": call_id, "event": "result", "result": self.warm(request)})
            elif op == "ping":
                _send({"id": call_id, "event": "result", "result": {
                    "pid": os.getpid(), "jobs": len(self.jobs), "zygotes": [z.describe() for z in self.zygotes.values()]}})
            else:
                _send({"id": call_id, "event": "error", "message": "unknown op %r" % (op,)})
        except Exception as exc:  # the agent's own failure for this call, said to the caller; the agent goes on
            _send({"id": call_id, "event": "error", "message": "%s: %s" % (type(exc).__name__, exc),
                   "traceback": traceback.format_exc()[-2000:]})

    def code_for(self, path: str) -> Script:
        """The script compiled, with its marker lines (within its first 5 lines): in-process, preload."""
        info = os.stat(path)
        key = (info.st_mtime_ns, info.st_size)
        cached = self.code_cache.get(path)
        if cached is None or cached[0] != key:
            with open(path, "rb") as handle:
                source = handle.read()
            cached = (key, read_script(path, source))
            self.code_cache[path] = cached
        return cached[1]

    def warm(self, request: dict) -> dict:
        """Start, without waiting, the warm interpreters these probes will want (each probe's preload, the calls'
        environment): the session asks at its start, so the imports run while nothing is measured yet. A probe
        with no preload needs none; a zygote that fails is said on the calls it concerns, as always."""
        env = dict(request.get("env") or {})
        warming = []
        for name in request.get("probes") or []:
            script = self.code_for(_probe_file(str(name)))
            if script.preload:
                self.zygote_for(env, script.preload)
                warming.append(name)
        return {"warming": warming}

    def start_probe(self, call_id: object, request: dict) -> None:
        name = str(request["probe"])
        path = _probe_file(name)
        script = self.code_for(path)  # compiled here, before the fork, so every later child reuses it
        if script.in_process and not request.get("isolate"):
            self.start_in_process(call_id, name, path, script.code, request.get("args") or {})
            return
        args_text = json.dumps(request.get("args") or {})
        env = dict(request.get("env") or {}, ORCH_PROBE_NONCE=str(request["nonce"]))
        zygote = self.zygote_for(env, script.preload) if script.preload and not request.get("isolate") else None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if zygote is not None and zygote.state in ("starting", "ready"):
            job = Job(call_id, None, out_r, err_r, None, b"")
            job.zygote = zygote
            self.adopt(job)
            zygote.pending.append((job, {"token": str(call_id), "path": path, "args": args_text, "env": env},
                                   out_w, err_w))
            if zygote.state == "ready":
                self.flush_pending(zygote)
            return
        if zygote is not None:
            self.fell_back(call_id, zygote)
        self.fork_probe(call_id, script.code, path, args_text, env, out_r, out_w, err_r, err_w)

    def fork_probe(self, call_id: object, code: types.CodeType, path: str, args_text: str, env: dict, out_r: int,
                   out_w: int, err_r: int, err_w: int, job: "Job | None" = None) -> None:
        """The plain path: a fork of the agent itself. ``job``: one adopted already (a warm call sent back here)."""
        pid = os.fork()
        if pid == 0:  # the child: never returns into the agent's loop
            _probe_child(code, path, args_text, env, out_w, err_w)
        _setpgid(pid)
        os.close(out_w)
        os.close(err_w)
        if job is None:
            self.adopt(Job(call_id, pid, out_r, err_r, None, b""))
            return
        job.pid, job.zygote = pid, None
        _send({"id": job.call_id, "event": "started", "pgid": pid})
        if job.cancelled:
            self.cancel(job.call_id)

    def fell_back(self, call_id: object, zygote: Zygote) -> None:
        """Said on every call it concerns (the orchestrator counts them and logs the reason once)."""
        zygote.fallbacks += 1
        _send({"id": call_id, "event": "note", "kind": "warm_fallback", "text":
               "the warm interpreter for %s is not usable (%s): this call runs in a plain fork, importing them itself"
               % (" ".join(zygote.modules), zygote.reason)})

    def zygote_for(self, env: dict, modules: "tuple[str, ...]") -> Zygote:
        """The warm interpreter for this environment and preload list, started on first use. Another environment
        gets another one: its variables must be in place before torch loads, so one interpreter cannot serve two."""
        call_env = {k: v for k, v in env.items() if k != "ORCH_PROBE_NONCE"}
        key = (tuple(sorted(call_env.items())), modules)
        zygote = self.zygotes.get(key)
        if zygote is None:
            full_env = dict(os.environ)
            full_env.update({str(k): str(v) for k, v in call_env.items()})
            try:
                zygote = Zygote(key, modules, full_env)
            except OSError as exc:  # no interpreter could start: said on each call, which then forks plainly
                zygote = Zygote.__new__(Zygote)
                zygote.__dict__.update(key=key, modules=modules, state="failed", reason="cannot start: %s" % exc,
                                       pending=[], jobs={}, served=0, fallbacks=0, ready_seconds=None, proc=None,
                                       inbuf=b"", started=time.monotonic())
                self.zygotes[key] = zygote
                return zygote
            self.zygotes[key] = zygote
            self.selector.register(zygote.sock, selectors.EVENT_READ, zygote)
        return zygote

    def read_zygote(self, zygote: Zygote) -> None:
        try:
            data = zygote.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            tail = zygote.error_tail()
            self.zygote_ended(zygote, "it exited%s" % (": " + tail if tail else ""))
            return
        zygote.inbuf += data
        *lines, zygote.inbuf = zygote.inbuf.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:  # ours, so a bug: given up loudly, its calls handled as for a death
                self.zygote_ended(zygote, "it sent an unreadable line: %r" % line[:200])
                return
            if "ready" in message:
                zygote.state, zygote.ready_seconds = "ready", message["ready"]
                if message.get("skipped"):
                    zygote.reason = "optional modules missing: %s" % message["skipped"]
                if not self.flush_pending(zygote):
                    return
            elif "failed" in message:
                zygote.reason = str(message["failed"])
            elif "forked" in message:
                forked = zygote.jobs.get(message["forked"])
                if forked is not None:
                    forked.pid = int(message["pid"])
                    _send({"id": forked.call_id, "event": "started", "pgid": forked.pid})
                    if forked.cancelled:
                        self.cancel(forked.call_id)
            elif "exit" in message:
                ended = zygote.jobs.pop(message["exit"], None)
                if ended is not None:
                    ended.status = int(message["status"])
            elif "error" in message:  # it could not fork this call: the call's error, the zygote serves on
                refused = zygote.jobs.pop(message["error"], None)
                if refused is not None:
                    _send({"id": refused.call_id, "event": "out", "stream": "stderr",
                           "text": "%s\n" % message["message"]})
                    refused.status = 1

    def flush_pending(self, zygote: Zygote) -> bool:
        """Send the waiting calls; False if the zygote turned out dead (they then took the plain path)."""
        while zygote.pending:
            job, request, out_w, err_w = zygote.pending[0]
            failed = zygote.send(job, request, out_w, err_w)
            if failed and str(job.call_id) not in zygote.jobs:  # not sent: still pending, zygote_ended forks it
                self.zygote_ended(zygote, failed)
                return False
            zygote.pending.pop(0)
            if failed:
                self.zygote_ended(zygote, failed)
                return False
        return True

    def zygote_ended(self, zygote: Zygote, reason: str) -> None:
        """It is gone (or given up): calls still waiting for it fork plainly; calls it had forked lost their
        reaper, so their groups are killed (no orphan) and they end as killed."""
        if zygote.state in ("failed", "dead"):
            return
        was_ready = zygote.state == "ready"
        zygote.state = "failed" if not was_ready else "dead"
        if not zygote.reason or was_ready:
            zygote.reason = reason if not zygote.reason else "%s; %s" % (zygote.reason, reason)
        try:
            self.selector.unregister(zygote.sock)
        except (KeyError, ValueError):
            pass
        zygote.sock.close()
        if zygote.proc is not None and zygote.proc.poll() is None:
            zygote.proc.kill()  # given up while importing; reaped in reap()
        for job in zygote.jobs.values():
            if job.pid:
                _killpg(job.pid, signal.SIGKILL)
            _send({"id": job.call_id, "event": "out", "stream": "stderr",
                   "text": "the warm interpreter that forked this call ended (%s); the call was killed\n" % reason})
            job.status = -signal.SIGKILL
            job.kill_at = job.kill_at or time.monotonic() + 3600
        zygote.jobs = {}
        pending, zygote.pending = zygote.pending, []
        for job, request, out_w, err_w in pending:
            self.fell_back(job.call_id, zygote)
            if self.stopping or job.cancelled:
                os.close(out_w)
                os.close(err_w)
                job.status, job.zygote = -signal.SIGTERM, None
                continue
            self.fork_probe(job.call_id, self.code_for(request["path"]).code, request["path"], request["args"],
                            request["env"], -1, out_w, -1, err_w, job=job)

    def module_for(self, name: str, path: str, code: types.CodeType) -> types.ModuleType:
        """The probe loaded as a module (its ``__main__`` block does not run), once per compiled version."""
        cached = self.modules.get(name)
        if cached is None or cached[0] is not code:
            module = types.ModuleType("_in_process_" + name)
            module.__file__ = path
            exec(code, module.__dict__)
            cached = (code, module)
            self.modules[name] = cached
        return cached[1]

    def start_in_process(self, call_id: object, name: str, path: str, code: types.CodeType, args: object) -> None:
        import remote_probes.agent.protocol as _probe  # the probe protocol, preloaded; imported here so the agent starts without it too

        module = self.module_for(name, path, code)  # in the loop: a broken module is this call's error
        main = getattr(module, "main", None)
        if not callable(main):
            raise ValueError("probe %s has no main(args) to run in-process" % name)
        state = [False]
        with self.in_process_lock:
            self.in_process[call_id] = state

        def stderr(text: str) -> None:
            with self.in_process_lock:
                if state[0]:
                    return
            _send({"id": call_id, "event": "out", "stream": "stderr", "text": text})

        def work() -> None:
            try:
                document = _probe.run_in_process(main, args, stderr)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt...: still this call's error, not the agent's
                document = {"ok": False, "error": {"kind": "crash", "message": "%s: %s" % (type(exc).__name__, exc),
                                                   "details": {"traceback": traceback.format_exc()[-4000:]}}}
            try:  # serialised here, in the thread: a big result does not hold up the loop
                line = json.dumps({"id": call_id, "event": "document", "document": document}, ensure_ascii=False,
                                  allow_nan=False, default=str, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                line = json.dumps({"id": call_id, "event": "document", "document": {"ok": False, "error": {
                    "kind": "crash", "message": "the probe's result is not JSON: %s" % exc, "details": {}}}})
            if len(line) > MAX_DOCUMENT:
                line = json.dumps({"id": call_id, "event": "document", "document": {"ok": False, "error": {
                    "kind": "too_large", "message": "the probe's result is %d characters of JSON, over the %d one "
                    "call may return; ask for less (fewer reads, lower max_lines or max_matches)"
                    % (len(line), MAX_DOCUMENT), "details": {"size": len(line)}}}})
            with self.in_process_lock:
                cancelled = self.in_process.pop(call_id, [True])[0]
            if not cancelled:
                _send_line(line)

        threading.Thread(target=work, name="probe-%s" % (call_id,), daemon=True).start()

    def start_run(self, call_id: object, request: dict) -> None:
        argv = ["bash", "-c", request["script"]] if "script" in request else [str(a) for a in request["argv"]]
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        stdin_data = request.get("stdin")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=request.get("cwd") or None,
                                    env=env, start_new_session=True)
        except OSError as exc:  # as a shell would say it: 127 not found, 126 not executable, 1 a bad cwd
            code = 126 if isinstance(exc, PermissionError) else 1 if request.get("cwd") and not os.path.isdir(
                request["cwd"]) else 127
            _send({"id": call_id, "event": "out", "stream": "stderr", "text": "%s\n" % exc})
            _send({"id": call_id, "event": "exit", "exit_code": code})
            return
        assert proc.stdout is not None and proc.stderr is not None
        stdin_fd = None
        if proc.stdin is not None:
            stdin_fd = os.dup(proc.stdin.fileno())
            proc.stdin.close()
            os.set_blocking(stdin_fd, False)
        out_fd, err_fd = os.dup(proc.stdout.fileno()), os.dup(proc.stderr.fileno())
        proc.stdout.close()
        proc.stderr.close()
        # Popen's object is dropped: the agent reaps by pid itself (Popen would otherwise warn or reap behind us).
        proc.returncode = 0
        self.adopt(Job(call_id, proc.pid, out_fd, err_fd, stdin_fd, (stdin_data or "").encode("utf-8")))

    def adopt(self, job: Job) -> None:
        self.jobs[job.call_id] = job
        if job.pid is not None:  # a warm call says it when its zygote has forked it
            _send({"id": job.call_id, "event": "started", "pgid": job.pid})
        for fd in job.open_fds:
            self.selector.register(fd, selectors.EVENT_READ, job)
        if job.stdin_fd is not None:
            if job.stdin_data:
                self.selector.register(job.stdin_fd, selectors.EVENT_WRITE, job)
            else:
                os.close(job.stdin_fd)
                job.stdin_fd = None

    def cancel(self, target: object) -> None:
        with self.in_process_lock:
            state = self.in_process.pop(target, None)
            if state is not None:
                state[0] = True
        if state is not None:  # a thread cannot be stopped: the call ends now, its work runs out unseen
            _send({"id": target, "event": "exit", "exit_code": -signal.SIGTERM})
            return
        job = self.jobs.get(target)
        if job is None or job.kill_at is not None:
            return  # finished already, or being killed: nothing to do
        if job.pid is None:  # a warm call not forked yet: dropped if still waiting, else killed once forked
            job.cancelled = True
            zygote = job.zygote
            waiting = [p for p in zygote.pending if p[0] is job] if zygote is not None else []
            if zygote is not None and waiting:
                zygote.pending.remove(waiting[0])
                os.close(waiting[0][2])
                os.close(waiting[0][3])
                job.status, job.zygote = -signal.SIGTERM, None
            return
        _killpg(job.pid, signal.SIGTERM)
        job.kill_at = time.monotonic() + KILL_GRACE

    # -- the loop ---------------------------------------------------------------------------------
    def serve(self) -> None:
        os.set_blocking(0, False)
        self.selector.register(0, selectors.EVENT_READ, None)
        # Signals (a child's exit, TERM/HUP) write a byte here: select() would otherwise sleep on through them,
        # as Python retries an interrupted select (PEP 475).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        while not self.stopping or self.jobs:
            # A pending KILL and a warm interpreter still importing need a clock; everything else wakes select.
            killing = any(j.kill_at is not None for j in self.jobs.values())
            starting = any(z.state == "starting" for z in self.zygotes.values())
            for key, mask in self.selector.select(0.05 if killing else 1.0 if starting else None):
                if key.data is None:
                    self.read_requests()
                elif isinstance(key.data, Zygote):
                    self.read_zygote(key.data)
                elif key.data == "wake":
                    while True:
                        try:
                            if not os.read(wake_r, 512):
                                break
                        except BlockingIOError:
                            break
                elif mask & selectors.EVENT_WRITE:
                    self.feed_stdin(key.data)
                else:
                    self.read_output(key.data, key.fd)
            self.reap()
        self.stop_zygotes()

    def stop_zygotes(self) -> None:
        """EOF on each one's socket (it stops its children, then exits); a bounded wait, then KILL."""
        for zygote in self.zygotes.values():
            if zygote.state in ("starting", "ready"):
                self.selector.unregister(zygote.sock)
                zygote.sock.close()
                if zygote.state == "starting" and zygote.proc is not None:
                    zygote.proc.kill()  # still importing, with no child: nothing of it to wait for
                zygote.state = "dead"
        deadline = time.monotonic() + KILL_GRACE + 1.0
        for zygote in self.zygotes.values():
            if zygote.proc is None:
                continue
            try:
                zygote.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                zygote.proc.kill()
                zygote.proc.wait()

    def read_requests(self) -> None:
        try:
            data = os.read(0, CHUNK)
        except BlockingIOError:
            return
        if not data:  # the channel is gone: no caller is left to answer
            self.selector.unregister(0)
            self.shutdown()
            return
        self.inbuf += data
        *lines, self.inbuf = self.inbuf.split(b"\n")
        for line in lines:
            if line.strip():
                self.handle_line(line)

    def feed_stdin(self, job: Job) -> None:
        assert job.stdin_fd is not None
        try:
            written = os.write(job.stdin_fd, job.stdin_data[:CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin without reading it all, as a shell pipe allows
            written = len(job.stdin_data)
        job.stdin_data = job.stdin_data[written:]
        if not job.stdin_data:
            self.selector.unregister(job.stdin_fd)
            os.close(job.stdin_fd)
            job.stdin_fd = None

    def read_output(self, job: Job, fd: int) -> None:
        stream = job.open_fds[fd]
        data = os.read(fd, CHUNK)
        text = job.decoders[stream].decode(data, final=not data)
        if text:
            _send({"id": job.call_id, "event": "out", "stream": stream, "text": text})
        if not data:
            self.selector.unregister(fd)
            os.close(fd)
            del job.open_fds[fd]

    def reap(self) -> None:
        now = time.monotonic()
        for zygote in list(self.zygotes.values()):
            if zygote.proc is not None and zygote.state in ("failed", "dead") and zygote.proc.poll() is not None:
                zygote.proc = None  # reaped; describe() keeps its story
            elif zygote.state == "starting" and now - zygote.started > ZYGOTE_START_TIMEOUT:
                self.zygote_ended(zygote, "still importing after %gs: given up" % ZYGOTE_START_TIMEOUT)
        for job in list(self.jobs.values()):
            if job.kill_at is not None and now >= job.kill_at:
                if job.pid is not None:
                    _killpg(job.pid, signal.SIGKILL)
                job.kill_at = now + 3600  # once
            if job.status is None and job.zygote is None and job.pid is not None:
                pid, status = os.waitpid(job.pid, os.WNOHANG)
                if pid:
                    job.status = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
                        -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
            if job.status is not None and (not job.open_fds or job.kill_at is not None):
                # Output still buffered in a killed job's pipes is read first; a killed group's stray holder of
                # the pipes (it left the group) must not keep the call open, hence the kill_at test.
                if job.kill_at is not None:
                    for fd in list(job.open_fds):
                        self.drain(job, fd)
                self.jobs.pop(job.call_id)
                if job.stdin_fd is not None:
                    self.selector.unregister(job.stdin_fd)
                    os.close(job.stdin_fd)
                _send({"id": job.call_id, "event": "exit", "exit_code": job.status})

    def drain(self, job: Job, fd: int) -> None:
        os.set_blocking(fd, False)
        try:
            while fd in job.open_fds:
                self.read_output(job, fd)
        except BlockingIOError:
            self.selector.unregister(fd)
            os.close(fd)
            del job.open_fds[fd]

    def shutdown(self, *_: object) -> None:
        """Stop every group we started (TERM, KILL after the grace), then let the loop end."""
        self.stopping = True
        for job in list(self.jobs.values()):
            if job.pid is None:
                self.cancel(job.call_id)  # still waiting for its warm interpreter: dropped, or killed once forked
            if job.kill_at is None and job.pid is not None:
                _killpg(job.pid, signal.SIGTERM)
                job.kill_at = time.monotonic() + KILL_GRACE


def _setpgid(pid: int) -> None:
    """The parent's half of the child's own ``setpgid(0, 0)``: whichever runs first, a kill of the group that follows
    at once (a cancel) finds it."""
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child did it already and exec'd, or has exited: either way the group is its own
        pass


def _killpg(pgid: int, sig: int) -> None:
    if pgid > 1:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _probe_file(name: str) -> str:
    """The file of the probe ``name`` in the pushed tree. Raises ValueError for a name that is not a probe there."""
    from remote_probes.agent.probes import probe_path

    path = probe_path(name)
    if path is None:
        raise ValueError("invalid probe name %r" % name)
    return path


def _probe_child(code: types.CodeType, path: str, args_text: str, env: dict, out_w: int, err_w: int) -> None:
    """Runs in the forked child: become a process group of its own, stdio onto the call's pipes, run the probe as
    ``__main__`` (exactly as ``python probe.py`` would), exit with its status. Never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)  # else a signal here would write into whatever fd later takes that number
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the agent's stdin is the request channel: no probe (nor its children) may read it
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        os.chdir(ROOT)
        os.environ.update({str(k): str(v) for k, v in env.items()})
        sys.stdin = io.StringIO(args_text)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)
        sys.argv = [path]
        main = types.ModuleType("__main__")
        main.__file__ = path
        sys.modules["__main__"] = main
        try:
            exec(code, main.__dict__)
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                sys.stderr.write("%s\n" % exc.code)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # a probe bug outside its own protocol handler: as Python would print it
        try:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(1)
    os._exit(status)


def _unsafe_to_fork() -> str:
    """Why forking this warm interpreter's children would not be safe ("" when it is). PyTorch's rule: an
    accelerator runtime initialised before a fork is broken in the children ("poison fork", docs/notes/
    multiprocessing), and ``import torch`` initialises none (torch.accelerator: lazy initialisation); its CPU
    thread pools are made on first use and reset in a forked child by its at-fork handlers. So the imports are
    checked, never run: no Python thread started, torch's CUDA not initialised, the CUDA driver not even loaded
    (a ``torch.cuda.is_available()`` at import time would have done it)."""
    if threading.active_count() > 1:
        return "the preload started %d Python threads" % (threading.active_count() - 1)
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
        return "the preload initialised CUDA"
    try:
        with open("/proc/self/maps") as handle:
            if any("libcuda.so" in line for line in handle):
                return "the preload loaded the CUDA driver (libcuda), which a fork cannot share"
    except OSError:  # not Linux: the torch check above is what there is
        pass
    return ""


def _frame_recv(sock: socket.socket) -> "tuple[dict | None, list[int]]":
    """One request of the agent's: 4 bytes of length and the JSON, the pipe ends riding on the first bytes."""
    header = b""
    fds: "list[int]" = []
    while len(header) < 4:
        data, got, _flags, _addr = socket.recv_fds(sock, 4 - len(header), 4)
        fds.extend(got)
        if not data:
            return None, fds
        header += data
    (size,) = struct.unpack("!I", header)
    body = b""
    while len(body) < size:
        data = sock.recv(size - len(body))
        if not data:
            return None, fds
        body += data
    return json.loads(body), fds


def zygote_main(fd: int, modules: "list[str]") -> None:
    """A warm interpreter (see Zygote): import the preload, say ready (or why not), then fork one probe child per
    request and report its pid and exit status. Ends, stopping its children's groups first, on EOF from the agent
    (the agent is gone, however it went) or TERM/HUP/INT. Never returns."""
    sock = socket.socket(fileno=fd)

    def say(message: dict) -> None:
        sock.sendall((json.dumps(message) + "\n").encode("utf-8"))

    started = time.monotonic()
    failed, skipped = "", {}
    for name in modules:
        optional, module = name.endswith("?"), name.rstrip("?")
        try:
            __import__(module)
        except BaseException as exc:  # SystemExit from a broken package too: said, and the calls go plain
            if optional and isinstance(exc, ImportError):
                skipped[module] = "%s: %s" % (type(exc).__name__, exc)
                continue
            failed = "importing %s failed: %s: %s" % (module, type(exc).__name__, str(exc)[:300])
            break
    failed = failed or _unsafe_to_fork()
    if failed:
        say({"failed": failed})
        os._exit(0)
    gc.freeze()  # as the agent does: the children's collections never touch (so never copy) the preload's pages
    say({"ready": round(time.monotonic() - started, 3), "skipped": skipped})

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "agent")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    children: "dict[int, str]" = {}  # pid -> the call's token
    code_cache: "dict[str, tuple[tuple[int, int], types.CodeType]]" = {}

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            token = children.pop(pid, None)
            if token is not None:
                code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
                    -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
                try:
                    say({"exit": token, "status": code})
                except OSError:  # the agent is gone: the loop ends at its EOF
                    pass

    def fork_one(request: dict, fds: "list[int]") -> None:
        out_w, err_w = fds
        token, path = request["token"], request["path"]
        try:
            info = os.stat(path)
            key = (info.st_mtime_ns, info.st_size)
            cached = code_cache.get(path)
            if cached is None or cached[0] != key:
                with open(path, "rb") as handle:
                    cached = (key, compile(handle.read(), path, "exec", dont_inherit=True))
                code_cache[path] = cached
            pid = os.fork()
        except (OSError, SyntaxError, ValueError) as exc:
            say({"error": token, "message": "the warm interpreter could not start the probe: %s: %s"
                 % (type(exc).__name__, exc)})
            return
        if pid == 0:
            _probe_child(cached[1], path, request["args"], request["env"], out_w, err_w)
        _setpgid(pid)
        children[pid] = token
        say({"forked": token, "pid": pid})

    while not stopping:
        for key, _mask in selector.select():
            if key.data == "wake":
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                continue
            try:
                request, fds = _frame_recv(sock)
            except (OSError, ValueError):
                request, fds = None, []
            if request is None or len(fds) != 2:
                for extra in fds:
                    os.close(extra)
                if request is None:
                    stopping.append(True)
                    break
                continue
            try:
                fork_one(request, fds)
            finally:
                for passed in fds:
                    os.close(passed)
        reap()
    # The agent is gone or told us to go: no child outlives us.
    for pid in list(children):
        _killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE
    while children and time.monotonic() < deadline:
        selector.select(0.05)
        reap()
    for pid in list(children):
        _killpg(pid, signal.SIGKILL)
    os._exit(0)


def stat(path: str) -> dict:
    """A file that goes between the stat and the read (its session's workdir being tidied away) does not exist:
    the answer is what a stat a moment later would say, not an error."""
    full = os.path.expanduser(path)
    try:
        info = os.stat(full)
    except FileNotFoundError:
        return {"exists": False}
    is_dir = stat_module.S_ISDIR(info.st_mode)  # from the one stat: a second look could find it gone
    result: "dict[str, object]" = {"exists": True, "size": info.st_size, "mode": info.st_mode & 0o7777, "mtime": info.st_mtime,
              "is_dir": is_dir}
    if not is_dir and info.st_size <= 64 * 1024 * 1024:
        digest = hashlib.sha256()
        try:
            with open(full, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        except FileNotFoundError:
            return {"exists": False}
        result["sha256"] = digest.hexdigest()
    return result


def put(request: dict) -> dict:
    """Write a file atomically (temp + rename), so a reader never sees half of it."""
    full = os.path.expanduser(request["path"])
    data = base64.b64decode(request["data"])
    temp = "%s.tmp-%d" % (full, os.getpid())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(request.get("mode", 0o600)))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp, int(request.get("mode", 0o600)))
        os.replace(temp, full)
    except BaseException:
        try:  # no exists() first: the temp may go between the look and the unlink, and the error to say is ours
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    return {"size": len(data)}


def main() -> None:
    sys.dont_write_bytecode = True
    # run as a script, its own directory heads sys.path: the tree's root takes its place (one import style)
    sys.path[:] = [ROOT] + [p for p in sys.path if p not in (HERE, ROOT)]
    if sys.argv[1:2] == ["--zygote"]:
        for name in PRELOAD:
            try:
                __import__(name)
            except Exception:  # as in the agent: the probe that needs it imports it (and says why it cannot)
                pass
        zygote_main(int(sys.argv[2]), sys.argv[3:])
    preload_failed = {}
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception as exc:  # a missing optional module only makes the first probe that needs it slower
            preload_failed[name] = "%s: %s" % (type(exc).__name__, exc)
    # Preloaded objects move out of the collector's reach: a child's collections then never walk (and so never copy,
    # page by page) the heap it shares with the agent. (The collector stays on in children: a torch probe lives long.)
    gc.freeze()
    # An in-process call's thread may be running when a probe forks; the child only runs its own probe (CPython
    # holds the import lock across fork), so Python 3.12's warning about forking a threaded process is noise here.
    warnings.filterwarnings("ignore", message=r".*multi-threaded.*fork", category=DeprecationWarning)
    agent = Agent()
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd hears of each child's exit
    signal.signal(signal.SIGTERM, agent.shutdown)
    signal.signal(signal.SIGHUP, agent.shutdown)
    signal.signal(signal.SIGINT, agent.shutdown)
    _send({"hello": {"protocol": PROTOCOL, "pid": os.getpid(), "pgid": os.getpgid(0),
                     "python": "%d.%d.%d" % sys.version_info[:3], "preload_failed": preload_failed}})
    agent.serve()


if __name__ == "__main__":
    main()
