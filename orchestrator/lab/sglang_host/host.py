"""A real SGLang host on this machine's CPU: a venv with PyPI's ``sglang`` 0.5.15.post1 and torch's CPU build that
serves the lab's trained target without speculation (research/sglang-cpu.md). EAGLE / EAGLE-3 do not run on it:
SGLang's CPU kernels (``sgl-kernel``) have no wheel for a CPU torch, and the speculative path needs them.

``orchestrator lab sglang-host`` builds it. What the build does, and why each step:

- ``python3 -m venv``: the host's own Python, as a real server has, never the orchestrator's (SGLang pins its
  transformers and friends);
- torch ``2.13.0+cpu`` first, pinned by a constraints file for every later step (the vLLM host's pin, the build this
  machine image serves; SGLang declares torch 2.11.0, a CUDA build on PyPI, and runs on 2.13.0+cpu). PyPI has no
  ``+cpu`` wheels; pip finds it where the machine's pip configuration points, else on PyTorch's CPU index;
- ``sglang==0.5.15.post1`` with ``--no-deps``: its declared requirements include CUDA-only wheels
  (``sglang-kernel``, flashinfer, ``nvidia-*``...) and torch builds that would replace the CPU torch;
- its Requires-Dist as the installed dist-info states it (markers evaluated by the host's own pip), less ``SKIPPED``
  (CUDA-only wheels, and the torch builds and torch companions: torch, torchvision, torchaudio, torchcodec, torchao,
  torch_memory_saver, and timm, which only pulls torchvision), with the same constraints, plus what SGLang imports
  without declaring it (``UNDECLARED``: dill, soundfile, triton; triton is 1 GB and must stay importable, since
  ``sglang.srt.utils.common`` imports it at server start);
- torchvision: ``sglang/srt/utils/common.py`` imports ``torchvision.io.decode_jpeg`` at server start, and PyPI's
  torchvision for x86_64 is a CUDA build that fails on a CPU torch ("operator torchvision::nms does not exist"). Any
  torchvision/torchaudio/torchcodec a requirement pulled in is removed, then torchvision's CPU build
  (``TORCHVISION_CPU``, torch 2.13's) is installed from pip's own sources, else PyTorch's CPU index. Where neither
  has it (this machine's pip reaches a PyPI mirror but not download.pytorch.org), the build applies the one SHIM it
  has:

  SHIM ``torchvision`` import guard: PyPI's torchvision 0.28.0 (``TORCHVISION``, the CUDA build for torch 2.13) is
  installed with ``--no-deps`` and its ``torchvision/_meta_registrations.py`` is edited so that its two
  ``torch.library.register_fake`` decorators (``torchvision::nms``, ``torchvision::qnms``) only register when its C++
  ops loaded (``torchvision.extension._has_ops()``), as its ``_autograd_registrations.py`` already does. Without the
  edit ``import torchvision`` fails, since its ``_C.so`` links CUDA torch libraries a CPU torch lacks. With it,
  torchvision's Python code imports (transformers sees a real torchvision 0.28.0); its C++ ops (nms, roi_align,
  image decoding) raise "Couldn't load custom C++ ops" if called, and a text model's server path calls none.
  Recorded in ``complete.json`` (``"torchvision"``); no kernel, attention or sampling code is stood in for.

A ``complete.json`` marker is written last, so a build cut short is redone; the whole build holds a file lock, so
two processes build it once and the other waits. The last step imports what a server start imports (the HTTP
entry point, the scheduler, the model runner, the Llama model class) with the host's environment.

``host_env(run_dir)`` is the environment an SGLang server needs on this CPU (also shown by the command);
``server_argv(python, target, port)`` the research's command line for a server without speculation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserInputError
from orchestrator.lab.building.build import cache_dir
from orchestrator.lab.training.filelock import file_lock
from orchestrator.lab.vllm_host.host import (
    COMPILE_VENV,
    TORCH_CPU,
    TORCH_CPU_INDEX,
    make_socket_tmpdir,
    marker_of,
    python_of,
    run_logged,
)

SGLANG_VERSION = "0.5.15.post1"
#: torch 2.13's torchvision: the CPU build (PyTorch's CPU index only), else PyPI's CUDA build with the SHIM
TORCHVISION_CPU, TORCHVISION = "torchvision==0.28.0+cpu", "torchvision==0.28.0"
#: declared by sglang but CUDA-only, or a torch build / torch companion that would replace or break the CPU torch
SKIPPED = frozenset({
    # CUDA-only wheels (plus every ``nvidia-*`` and ``cuda-*`` name: SKIPPED_PREFIXES)
    "apache-tvm-ffi", "flash-attn-4", "flashinfer-cubin", "flashinfer-python", "quack-kernels", "sgl-deep-gemm",
    "sgl-kernel", "sglang-kernel", "tilelang", "tokenspeed-mla", "torch-memory-saver",
    # torch builds and companions: the CPU torch stays (constraints), torchvision is handled on its own
    "torch", "torchvision", "torchaudio", "torchcodec", "torchao", "timm",
})
SKIPPED_PREFIXES = ("nvidia-", "cuda-")
#: imported by SGLang at server start without being declared (research/sglang-cpu.md)
UNDECLARED = ("dill", "soundfile", "triton")
#: what a requirement may have pulled in that fails on a CPU torch (PyPI's CUDA builds)
CUDA_BUILDS = ("torchvision", "torchaudio", "torchcodec")
MARKER = "complete.json"
#: the research's server on 2 cores: fp32 (the lab's models are trained in it), a small KV pool and context, and no
#: overlap scheduler (research/sglang-cpu.md)
CPU_FLAGS: tuple[str, ...] = ("--device", "cpu", "--dtype", "float32", "--disable-overlap-schedule",
                              "--max-total-tokens", "4096", "--context-length", "1024")

Progress = Callable[[str], None]

#: run by the host's python: its sglang's Requires-Dist, markers evaluated for this interpreter (no extras), split
#: into what is installed and what is skipped
READ_REQUIREMENTS = """
import json, sys
from importlib.metadata import distribution
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
skipped, prefixes = set(json.loads(sys.argv[2])), tuple(json.loads(sys.argv[3]))
out = {"kept": [], "skipped": []}
for text in distribution(sys.argv[1]).requires or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = canonicalize_name(req.name)
    if name in skipped or name.startswith(prefixes):
        out["skipped"].append(name)
    else:
        out["kept"].append(str(req))
print(json.dumps(out))
"""

#: the SHIM's edit of PyPI's torchvision (module docstring): its fake registrations, guarded as its autograd ones are
FAKES_FILE = "torchvision/_meta_registrations.py"
FAKES_ANCHOR = "import torchvision.extension  # noqa: F401\n"
FAKES_DECORATOR = "@torch.library.register_fake("
FAKES_GUARD = ("\n# orchestrator's SGLang host (orchestrator/lab/sglang_host/host.py): no fake registration without the C++ "
               "ops,\n# whose CUDA build cannot load on a CPU torch\n_register_fake = torch.library.register_fake if "
               "torchvision.extension._has_ops() else (lambda *a, **k: lambda fn: fn)\n")

#: what a server start imports first (``python -m sglang.launch_server``'s HTTP path, the scheduler process and the
#: lab target's model class), and the pins the host relies on
CHECK = ("import sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, "
         "sglang.srt.model_executor.model_runner, sglang.srt.models.llama, dill, soundfile, triton, torch, "
         "transformers.utils as tu; "
         "assert torch.__version__ == '2.13.0+cpu', torch.__version__; "
         "import torchvision, torchvision.io, torchvision.extension as tx; assert tu.is_torchvision_available(); "
         "print('torchvision', torchvision.__version__, 'C++ ops:', tx._has_ops())")


@dataclass(frozen=True)
class SglangHost:
    root: Path
    python: Path
    version: str
    built_s: float | None  # seconds this call spent building; None when it was already complete
    build_s: float | None  # what the marker recorded for the build that made it
    marker: dict[str, object] = field(default_factory=dict)

    def env(self, run_dir: Path | None = None) -> dict[str, str]:
        return host_env(run_dir or self.root / "run")

    @property
    def torchvision(self) -> str:
        """What torchvision the host has: ``TORCHVISION_CPU``'s version, or PyPI's with the SHIM (module docstring)."""
        return str(self.marker.get("torchvision", "unknown"))


def host_dir(directory: Path | str | None = None) -> Path:
    """``--dir``, else ``$ORCHESTRATOR_CACHE_DIR/sglang-host/0.5.15.post1``."""
    return Path(directory).expanduser().resolve() if directory else cache_dir() / "sglang-host" / SGLANG_VERSION


def host_env(run_dir: Path) -> dict[str, str]:
    """What ``python -m sglang.launch_server`` needs on this CPU. ``run_dir`` gets TMPDIR (SGLang's ZMQ IPC sockets
    are temporary files there; a short directory instead when ``run_dir`` is too deep for a socket path, as for the
    vLLM host) and TRITON_CACHE_DIR; both are created here."""
    tmp, triton = make_socket_tmpdir(run_dir / "tmp"), run_dir / "triton-cache"
    triton.mkdir(parents=True, exist_ok=True, mode=0o700)
    return {"SGLANG_USE_CPU_ENGINE": "1",  # the CPU platform (srt/platforms/__init__.py), not "no accelerator"
            "HF_HUB_OFFLINE": "1",  # the lab's models are local directories; never reach for the Hub
            "TMPDIR": str(tmp), "TRITON_CACHE_DIR": str(triton)}


def server_argv(python: Path | str, target: Path | str, port: int, *extra: str) -> list[str]:
    """The research's server command line (no speculation unless ``extra`` asks for it)."""
    return [str(python), "-m", "sglang.launch_server", "--model-path", str(target), *CPU_FLAGS,
            "--port", str(port), "--host", "127.0.0.1", *extra]


def read_marker(root: Path) -> dict[str, object] | None:
    return marker_of(root, SGLANG_VERSION)


def is_built(directory: Path | str | None = None) -> bool:
    root = host_dir(directory)
    return read_marker(root) is not None and python_of(root).is_file()


def _run(argv: list[str], what: str, log: Path, env: dict[str, str] | None = None) -> str:
    return run_logged(argv, what, log, env, host="SGLang host")


def _site_packages(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def ensure_sglang_host(directory: Path | str | None = None, progress: Progress | None = None, *,
                       base_python: str | None = None) -> SglangHost:
    """Build the SGLang host venv unless it is complete; returns where its python is. :raises UserInputError:"""
    root = host_dir(directory)
    say = progress or (lambda _msg: None)
    with file_lock(root.parent / f"{root.name}.lock"):
        marker = read_marker(root)
        if marker is not None and python_of(root).is_file():
            recorded = marker.get("build_s")
            return SglangHost(root, python_of(root), SGLANG_VERSION, None,
                              float(recorded) if isinstance(recorded, (int, float)) else None, marker)
        started = time.monotonic()
        if root.exists():
            shutil.rmtree(root)  # a build cut short: start over rather than trust half a venv
        root.mkdir(parents=True)
        log = root / "build.log"
        constraints = root / "constraints.txt"
        constraints.write_text(f"# torch's CPU build, for every step of the SGLang {SGLANG_VERSION} host\n"
                               f"{TORCH_CPU}\n")
        python = python_of(root)
        say(f"venv at {root / 'venv'}")
        _run([base_python or _base_python(), "-m", "venv", str(root / "venv")], "creating the venv", log)
        # --no-compile, then compileall on every core below: pip byte-compiles on one core
        pip = [str(python), "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check",
               "-c", str(constraints)]
        say(f"{TORCH_CPU} (pip's own sources, else {TORCH_CPU_INDEX})")
        try:
            _run([*pip, TORCH_CPU], "installing torch's CPU build", log)
        except UserInputError:
            _run([*pip, "--extra-index-url", TORCH_CPU_INDEX, TORCH_CPU], "installing torch's CPU build", log)
        say(f"sglang=={SGLANG_VERSION} (--no-deps)")
        _run([*pip, "--no-deps", f"sglang=={SGLANG_VERSION}"], f"installing sglang {SGLANG_VERSION}", log)
        read = json.loads(_run([str(python), "-c", READ_REQUIREMENTS, "sglang", json.dumps(sorted(SKIPPED)),
                                json.dumps(SKIPPED_PREFIXES)], "reading sglang's requirements", log))
        kept, skipped = list(read["kept"]), list(read["skipped"])
        say(f"{len(kept)} of sglang's requirements and {', '.join(UNDECLARED)} (skipped: {', '.join(skipped)})")
        _run([*pip, *kept, *UNDECLARED], "installing sglang's requirements", log)
        say(f"removing {', '.join(CUDA_BUILDS)} if a requirement pulled them in (CUDA builds)")
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *CUDA_BUILDS], "removing the CUDA builds", log)
        say(f"{TORCHVISION_CPU} (pip's own sources, else {TORCH_CPU_INDEX}, else PyPI's {TORCHVISION} with the shim)")
        torchvision = _install_torchvision(pip, python, log)
        if torchvision != TORCHVISION_CPU.split("==", 1)[1]:
            say(f"no torchvision CPU build reachable: {torchvision}")
        _run([str(python), "-c", COMPILE_VENV, str(root / "venv" / "lib")], "byte-compiling the venv", log)
        _run([str(python), "-c", CHECK], "checking the install (what a server start imports)", log,
             env=host_env(root / "run"))
        freeze = _run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check"], "listing the venv", log)
        (root / "freeze.txt").write_text(freeze)
        build_s = round(time.monotonic() - started, 1)
        data: dict[str, object] = {"version": SGLANG_VERSION, "torch": TORCH_CPU, "torchvision": torchvision,
                                   "skipped": skipped, "undeclared": list(UNDECLARED), "build_s": build_s,
                                   "built_at": time.time()}
        (root / MARKER).write_text(json.dumps(data))
        return SglangHost(root, python, SGLANG_VERSION, build_s, build_s, data)


def _install_torchvision(pip: list[str], python: Path, log: Path) -> str:
    """Install ``TORCHVISION_CPU``, else ``TORCHVISION`` with the SHIM (module docstring); returns what for the marker.
    :raises UserInputError: when neither installs, or the file the SHIM edits is not as expected"""
    for extra in ([], ["--extra-index-url", TORCH_CPU_INDEX]):
        try:
            _run([*pip, "--no-deps", *extra, TORCHVISION_CPU], "installing torchvision's CPU build", log)
        except UserInputError:
            continue
        return TORCHVISION_CPU.split("==", 1)[1]
    _run([*pip, "--no-deps", TORCHVISION], f"installing PyPI's {TORCHVISION}", log)
    fakes = _site_packages(python) / FAKES_FILE
    text = fakes.read_text()
    if text.count(FAKES_ANCHOR) != 1 or FAKES_DECORATOR not in text:
        raise UserInputError(f"SGLang host: {fakes} is not the file the torchvision shim knows (no "
                             f"{FAKES_ANCHOR.strip()!r} line or no {FAKES_DECORATOR!r} decorator); see {log}")
    guarded = text.count(FAKES_DECORATOR)
    fakes.write_text(text.replace(FAKES_DECORATOR, "@_register_fake(").replace(FAKES_ANCHOR, FAKES_ANCHOR + FAKES_GUARD))
    with open(log, "a") as out:
        out.write(f"# shim: {guarded} fake registrations in {fakes} guarded by torchvision.extension._has_ops()\n")
    return f"{TORCHVISION.split('==', 1)[1]} (PyPI's CUDA build; shim: {guarded} fake registrations guarded)"


def _base_python() -> str:
    """A Python to make the venv with: the one running us, unless it is itself a venv's (then its base). sglang's
    wheel is built per CPython version (cp310-cp313 on PyPI)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base if os.path.exists(base) else sys.executable
