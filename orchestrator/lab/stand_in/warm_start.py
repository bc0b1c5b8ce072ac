"""A warm interpreter for the lab's servers: it imports torch and transformers' model code once a session, then
starts each lab server by fork, so a start costs the model load, not the ~3.5 s import.

The lab server's start is almost all import: a cold ``python -m orchestrator.lab.stand_in.server`` spends ~1.5 s importing
torch and ~2 s importing transformers' Llama code (its lazy module tables) before it reads a weight, and the
flagship starts three of them. A real engine's start (minutes of weight loading and graph capture on a GPU) has
nothing like it to save, so this is the lab's alone (servers/lab.py asks for it, servers/manager.py runs it).

Two halves, one module (standard library at the top: the client half runs before any heavy import):

- ``python -m orchestrator.lab.stand_in.warm_start NAME MODULE...`` (``serve``): a detached process of the session
  (started by the manager like a server: its own process group, a pidfile, stopped at the session's end and by
  ``orchestrator cleanup``) that imports MODULE... (a trailing ``?``: optional), then listens on the Unix socket
  NAME in the abstract namespace (only once the imports are done, so a connection means ready; only its own user
  is served) and forks one child per request.
- The lab server's own ``__main__`` (``start_warm_or_cold``): when ``ORCHESTRATOR_LAB_WARM_START`` names a warm
  interpreter, the process the manager spawned (its pid, its group, its log) hands its argv, environment and
  stdio to it and stays as the child's stand-in: it forwards the signals it gets to the child and exits with the
  child's status. Whatever cannot be warm (the interpreter failed or ended, a different environment, no socket)
  starts cold, and the server's log says why in its first line.

No orphans, whoever dies first: the stand-in's end (even SIGKILL) closes its connection and the warm interpreter
TERMs, then KILLs, that child's group; the warm interpreter's end TERMs every child first, and a child dies with it
anyway (``PR_SET_PDEATHSIG``). The child runs with exactly the stand-in's environment, which must equal the warm
interpreter's (variables such as OMP_NUM_THREADS were read when torch loaded; the few a shell sets per process
aside), and the same ``sys.path``; torch's default generator is reset to a fresh process's state.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time
from typing import Any

from orchestrator.servers.warm import ENV_VAR, LOG_PREFIX

#: set per process by the shell or by us: not part of the environment a warm start must match
VOLATILE_ENV = frozenset({"_", "SHLVL", "PWD", "OLDPWD", ENV_VAR})
READY_WAIT = 120.0  # seconds a server waits for its warm interpreter's imports before it starts cold
KILL_GRACE = 5.0
_PR_SET_PDEATHSIG = 1
_MAX_FRAME = 4 * 1024 * 1024


def environment_key(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in VOLATILE_ENV}


# -- the client half: the lab server's __main__ ---------------------------------------------------------------
def start_warm_or_cold(module: str) -> None:
    """Run as ``module`` forked from the warm interpreter and exit with its status; return (after saying why in
    the log's first line) when the start must be cold. No-op without ``ORCHESTRATOR_LAB_WARM_START``."""
    value = os.environ.get(ENV_VAR)
    if not value:
        return
    name, _, pid_text = value.rpartition(":")
    try:
        warm_pid = int(pid_text)
    except ValueError:
        _say(f"{ENV_VAR}={value!r} is not SOCKET:PID; starting cold")
        return
    why = _hand_over(name, warm_pid, module)
    _say(f"the warm interpreter cannot start this server ({why}); starting cold, importing torch here")


def _say(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {LOG_PREFIX} {text}", file=sys.stderr, flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _connect(name: str, warm_pid: int) -> socket.socket | str:
    """The connection once the warm interpreter is ready (it listens once its imports are done), or why not."""
    deadline = time.monotonic() + READY_WAIT
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect("\0" + name)
            return sock
        except (ConnectionRefusedError, FileNotFoundError):
            sock.close()  # not listening yet: still importing, or gone
        except OSError as exc:
            sock.close()
            return f"connecting to its socket: {exc.strerror or exc}"
        if not _alive(warm_pid):
            return f"it (pid {warm_pid}) ended before it was ready"
        if time.monotonic() > deadline:
            return f"it (pid {warm_pid}) was not ready after {READY_WAIT:.0f} s"
        time.sleep(0.02)  # polling the state itself (does it listen yet?), not a time


def _hand_over(name: str, warm_pid: int, module: str) -> str:
    """Never returns once a child is forked (exits with its status); else why not."""
    started = time.monotonic()
    sock = _connect(name, warm_pid)
    if isinstance(sock, str):
        return sock
    request = {"module": module, "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
               "path": list(sys.path)}
    data = json.dumps(request).encode("utf-8")
    try:
        socket.send_fds(sock, [struct.pack("!I", len(data)) + data], [0, 1, 2])
        reader = sock.makefile("rb")
        first = _read_message(reader)
    except OSError as exc:
        sock.close()
        return f"its socket failed: {exc.strerror or exc}"
    if first is None or "forked" not in first:
        sock.close()
        return str((first or {}).get("refused") or "it closed the connection without an answer")
    child = int(first["forked"])
    _say(f"forked from the warm interpreter (pid {warm_pid}) as pid {child} in "
         f"{time.monotonic() - started:.2f} s; this process (pid {os.getpid()}) stands in for it")

    def forward(signum: int, _frame: object) -> None:
        try:
            sock.sendall((json.dumps({"signal": signum}) + "\n").encode("utf-8"))
        except OSError:
            pass  # the warm interpreter is gone: so is the child (it dies with it)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            message = _read_message(reader)
        except OSError:
            message = None
        if message is None:
            _say(f"the warm interpreter (pid {warm_pid}) ended before the server (pid {child}); the server ended "
                 "with it")
            os._exit(137)
        if "exit" in message:
            _exit_like(int(message["exit"]))


def _read_message(reader: Any) -> dict[str, Any] | None:
    while True:
        line = reader.readline()
        if not line:
            return None
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict):
            return message


def _exit_like(status: int) -> None:
    """Exit as the child did: its code, or killed by its signal (so the wrapper records the same status)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if status < 0:
        if -status != signal.SIGKILL:  # SIGKILL's disposition cannot be set, nor needs to be
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        os._exit(128 - status)
    os._exit(status)


# -- the warm interpreter -------------------------------------------------------------------------------------
def serve(name: str, modules: list[str]) -> int:
    started = time.monotonic()
    # the environment it started with: imports add to os.environ (torch sets TORCHINDUCTOR_CACHE_DIR)
    reference = (environment_key(dict(os.environ)), list(sys.path))
    for wanted in modules:
        optional, module = wanted.endswith("?"), wanted.rstrip("?")
        try:
            __import__(module)
        except ImportError as exc:
            if optional:
                continue
            print(f"importing {module} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    unsafe = _unsafe_to_fork()
    if unsafe:
        print(f"not safe to fork: {unsafe}", file=sys.stderr)
        return 1
    import gc

    gc.freeze()  # the children's collections never touch (so never copy) the imported modules' pages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError as exc:  # the name is per session and host: taken means another of ours runs
        print(f"cannot listen on {name}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    listener.listen(16)  # from here a client's connect succeeds: ready
    print(f"warm interpreter ready in {time.monotonic() - started:.2f} s (pid {os.getpid()}): "
          f"{' '.join(modules)}", file=sys.stderr, flush=True)
    return _Forker(listener, reference).loop()


class _Forker:
    def __init__(self, listener: socket.socket, reference: tuple[dict[str, str], list[str]]) -> None:
        import selectors

        self.listener, self.reference = listener, reference
        self.selector = selectors.DefaultSelector()
        self.read_event = selectors.EVENT_READ
        self.children: dict[int, socket.socket] = {}  # child pid -> its stand-in's connection
        self.conns: dict[socket.socket, int | None] = {}  # connection -> its child (None: not forked yet)
        self.killing: dict[int, float] = {}  # child pid -> when it gets SIGKILL (its stand-in is gone)
        self.stopping = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._stop)
        self.selector.register(listener, self.read_event, "listen")
        self.selector.register(self.wake_r, self.read_event, "wake")

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def loop(self) -> int:
        while not self.stopping:
            timeout = max(0.0, min(self.killing.values()) - time.monotonic()) if self.killing else None
            for key, _mask in self.selector.select(timeout):
                if key.data == "wake":
                    self._drain_wake()
                elif key.data == "listen":
                    self._accept()
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]
            self._reap()
            now = time.monotonic()
            for pid, when in list(self.killing.items()):
                if when <= now:
                    _killpg(pid, signal.SIGKILL)
                    del self.killing[pid]
        # told to go (the session ends, cleanup): no child outlives us
        for pid in list(self.children):
            _killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while self.children and time.monotonic() < deadline:
            self.selector.select(0.05)
            self._reap()
        for pid in list(self.children):
            _killpg(pid, signal.SIGKILL)
        return 0

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():  # an abstract socket has no file mode: only our own user is served
            conn.close()
            return
        request, fds = _receive(conn)
        try:
            why = self._refusal(request, fds)
            if why:
                _send(conn, {"refused": why})
                conn.close()
                return
            assert request is not None
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:
                self._become(request, fds, parent)
            self.children[pid] = conn
            self.conns[conn] = pid
            self.selector.register(conn, self.read_event, "conn")
            _send(conn, {"forked": pid})
        finally:
            for fd in fds:
                os.close(fd)

    def _refusal(self, request: dict[str, Any] | None, fds: list[int]) -> str:
        if request is None or len(fds) != 3:
            return "a malformed request"
        env, path = self.reference
        theirs = environment_key({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})
        if theirs != env:
            names = sorted(k for k in set(theirs) | set(env) if theirs.get(k) != env.get(k))
            return f"its environment differs from the warm interpreter's in {', '.join(names[:8])}"
        if list(request.get("path") or []) != path:
            return "its sys.path differs from the warm interpreter's"
        if not str(request.get("module") or "").startswith("orchestrator.lab."):
            return f"it asks for {request.get('module')!r}, not a lab server"
        return ""

    def _become(self, request: dict[str, Any], fds: list[int], parent: int) -> None:
        """The child: the lab server itself, with the stand-in's stdio, environment, directory and argv."""
        code = 1
        try:
            os.setsid()  # a session and group of its own, as a cold server has
            _die_with(parent)
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            self.selector.close()
            for conn in list(self.conns):
                conn.close()
            self.listener.close()
            os.close(self.wake_r)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items() if k != ENV_VAR})
            os.chdir(str(request["cwd"]))
            _fresh_random_state()
            import runpy

            sys.argv = [f"{request['module']}", *[str(a) for a in request["argv"]]]
            try:
                runpy.run_module(str(request["module"]), run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
        except BaseException:  # the server's own crash: its traceback in its log, as a cold start prints it
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def _read(self, conn: socket.socket) -> None:
        pid = self.conns.get(conn)
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:  # the stand-in is gone (stopped, or killed with its group): its server goes too
            self.selector.unregister(conn)
            conn.close()
            self.conns.pop(conn, None)
            if pid is not None and pid in self.children:
                _killpg(pid, signal.SIGTERM)
                self.killing[pid] = time.monotonic() + KILL_GRACE
            return
        for line in data.splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and pid in self.children and isinstance(message.get("signal"), int):
                if message["signal"] in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    _killpg(pid, int(message["signal"]))

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            self.killing.pop(pid, None)
            conn = self.children.pop(pid, None)
            if conn is not None and conn in self.conns:
                _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                self.selector.unregister(conn)
                self.conns.pop(conn, None)
                conn.close()


def _unsafe_to_fork() -> str:
    """The agent's rule for its warm interpreters (remote_probes/agent/agent.py ``_unsafe_to_fork``): no Python thread
    started (a fork keeps only the forking one, and a lock another held stays held), no CUDA initialised or its
    driver loaded; torch's CPU thread pools are reset in a forked child by its own at-fork handlers."""
    import threading

    if threading.active_count() > 1:
        return f"the imports started {threading.active_count() - 1} Python threads"
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "the imports initialised CUDA"
    try:
        with open("/proc/self/maps") as handle:
            if any("libcuda.so" in line for line in handle):
                return "the imports loaded the CUDA driver (libcuda), which a fork cannot share"
    except OSError:
        pass
    return ""


def _receive(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    try:
        conn.settimeout(10.0)  # a client connects only to send its request at once
        head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
        if len(head) < 4:
            return None, fds
        size = struct.unpack("!I", head)[0]
        if size > _MAX_FRAME:
            return None, fds
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                return None, fds
            data += chunk
        conn.settimeout(None)
        request = json.loads(data)
    except (OSError, ValueError):
        return None, []
    return (request if isinstance(request, dict) else None), fds


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        conn.sendall((json.dumps(message) + "\n").encode("utf-8"))
    except OSError:
        pass  # its stand-in is gone: the EOF on its connection ends the child


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with(parent: int) -> None:
    """SIGKILL when the warm interpreter ends, however it ends (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: its stand-in's EOF still ends it
    if os.getppid() != parent:  # the warm interpreter ended before the prctl took hold
        os._exit(137)


def _fresh_random_state() -> None:
    """A fork shares its parent's random state; a cold process starts with its own (Python's from the OS, torch's
    from its fixed default seed)."""
    import random

    random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(torch.initial_seed())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m orchestrator.lab.stand_in.warm_start NAME [MODULE...]", file=sys.stderr)
        return 2
    return serve(args[0], args[1:])


if __name__ == "__main__":
    status = main()
    sys.stderr.flush()
    os._exit(status)  # no interpreter teardown: with torch imported it takes a second, and nothing needs it
