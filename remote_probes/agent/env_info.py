"""Probe: describe the host — python, OS, CPU, memory, disk, GPUs, CUDA, torch, inference packages, listening ports.

Standard library only, Python >= 3.9. Nothing inspected is imported into this process: package versions come from
distribution metadata, and torch is tried in a child python with a timeout so a broken CUDA stack cannot hang or
crash the probe.

Args (all optional): ``{"disk_paths": [paths], "packages": [extra distribution names], "sys_path": [dirs],
"torch": true, "torch_timeout_s": 60, "nvidia_smi_timeout_s": 20}``.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

from remote_probes.agent.protocol import ProbeFailure, progress, run_probe

DEFAULT_PACKAGES = ["sglang", "vllm", "flashinfer-python", "flashinfer", "transformers", "sgl-kernel", "torch",
                    "safetensors", "triton"]
_GPU_FIELDS = ["index", "name", "memory.total", "memory.used", "driver_version"]

_TORCH_SNIPPET = """
import json, torch
info = {"version": torch.__version__, "cuda_available": bool(torch.cuda.is_available()),
        "cuda_version": torch.version.cuda, "device_count": 0, "devices": []}
if info["cuda_available"]:
    info["device_count"] = torch.cuda.device_count()
    info["devices"] = [torch.cuda.get_device_name(i) for i in range(info["device_count"])]
print("@@TORCH@@" + json.dumps(info))
"""


def _run(cmd: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(exit status or None on timeout/not runnable, stdout, stderr)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout,
                              text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {timeout:g}s"
    except OSError as exc:
        return None, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def os_release() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    key, sep, value = line.strip().partition("=")
                    if sep and key:
                        out[key] = value.strip().strip('"')
            return out
        except OSError:
            continue
    return out


def memory() -> dict[str, int] | None:
    wanted = {"MemTotal": "total_bytes", "MemAvailable": "available_bytes", "SwapTotal": "swap_total_bytes"}
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in wanted and rest.split():
                    out[wanted[key]] = int(rest.split()[0]) * 1024  # /proc/meminfo counts kB
    except OSError:
        return None
    return out


def disk(paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        entry: dict[str, Any] = {"path": path}
        try:
            usage = shutil.disk_usage(os.path.expanduser(path))
            entry.update(total_bytes=usage.total, free_bytes=usage.free)
        except OSError as exc:
            entry["error"] = str(exc)
        out.append(entry)
    return out


def _number(text: str) -> float | int | None:
    match = re.match(r"\s*([\d.]+)", text)
    if not match:
        return None
    value = float(match.group(1))
    return int(value) if value.is_integer() else value


def gpus(timeout: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """GPUs from nvidia-smi; a host without it has no GPUs, which is a fact, not an error."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return [], {"present": False}
    code, out, err = _run([exe, "--query-gpu=" + ",".join(_GPU_FIELDS), "--format=csv,noheader,nounits"], timeout)
    info: dict[str, Any] = {"present": True, "path": exe}
    if code != 0:
        info["error"] = (err or out).strip()[-500:] or f"exit status {code}"
        return [], info
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(_GPU_FIELDS):
            continue
        rows.append({"index": int(cells[0]) if cells[0].isdigit() else cells[0], "name": cells[1],
                     "memory_total_mib": _number(cells[2]), "memory_used_mib": _number(cells[3]),
                     "driver_version": cells[4]})
    code, out, _ = _run([exe], timeout)
    match = re.search(r"CUDA Version:\s*([\d.]+)", out or "")
    info["cuda_version"] = match.group(1) if match else None
    return rows, info


def nvcc_version(timeout: float) -> str | None:
    exe = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not exe:
        return None
    code, out, _ = _run([exe, "--version"], timeout)
    match = re.search(r"release\s+([\d.]+)", out or "")
    return match.group(1) if code == 0 and match else None


def torch_info(timeout: float) -> dict[str, Any]:
    code, out, err = _run([sys.executable, "-c", _TORCH_SNIPPET], timeout)
    for line in out.splitlines():
        if line.startswith("@@TORCH@@"):
            return dict(json.loads(line[len("@@TORCH@@"):]), importable=True)
    tail = (err or "").strip().splitlines()
    return {"importable": False, "error": tail[-1][:500] if tail else f"exit status {code}"}


def package_versions(names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _ipv4(hex_addr: str) -> str:
    return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_addr)[::-1])  # stored little-endian


def _ipv6(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))  # four little-endian 32-bit words
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_ports() -> list[dict[str, Any]]:
    """TCP sockets in LISTEN state (st 0A) from /proc/net/tcp{,6}; Linux only, empty elsewhere."""
    seen = set()
    out = []
    for path, family, decode in (("/proc/net/tcp", "ipv4", _ipv4), ("/proc/net/tcp6", "ipv6", _ipv6)):
        try:
            with open(path, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 4 or cols[3] != "0A":
                continue
            addr_hex, _, port_hex = cols[1].partition(":")
            try:
                entry = (family, decode(addr_hex), int(port_hex, 16))
            except (ValueError, OSError):
                continue
            if entry not in seen:
                seen.add(entry)
                out.append({"family": entry[0], "address": entry[1], "port": entry[2]})
    return sorted(out, key=lambda e: (e["port"], e["family"]))


def _str_list(args: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = args.get(key, default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProbeFailure("bad_args", f"{key!r} must be a list of strings")
    return value


def main(args: dict[str, Any]) -> dict[str, Any]:
    disk_paths = _str_list(args, "disk_paths", ["/", "~", os.getcwd(), "/tmp"])
    packages = DEFAULT_PACKAGES + [p for p in _str_list(args, "packages", []) if p not in DEFAULT_PACKAGES]
    sys.path[:0] = [os.path.abspath(os.path.expanduser(p)) for p in _str_list(args, "sys_path", [])]
    timeouts = {}
    for key, default in (("torch_timeout_s", 60.0), ("nvidia_smi_timeout_s", 20.0)):
        value = args.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ProbeFailure("bad_args", f"{key!r} must be a positive number of seconds")
        timeouts[key] = float(value)
    gpu_rows, smi = gpus(timeouts["nvidia_smi_timeout_s"])
    versions = package_versions(packages)
    torch: dict[str, Any] | None = None
    if args.get("torch", True) and versions.get("torch"):
        progress("importing torch in a child process", timeout_s=timeouts["torch_timeout_s"])
        torch = torch_info(timeouts["torch_timeout_s"])
    elif args.get("torch", True):
        torch = {"importable": False, "error": "torch is not installed"}
    return {
        "hostname": socket.gethostname(),
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "implementation": platform.python_implementation(), "prefix": sys.prefix},
        "os": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
               "platform": platform.platform(), "os_release": os_release()},
        "cpu_count": os.cpu_count(),
        "memory": memory(),
        "disk": disk(disk_paths),
        "gpus": gpu_rows,
        "nvidia_smi": smi,
        "cuda": {"driver_cuda_version": smi.get("cuda_version"), "nvcc_version": nvcc_version(10.0),
                 "torch_cuda_version": (torch or {}).get("cuda_version")},
        "torch": torch,
        "packages": versions,
        "listening_ports": listening_ports(),
    }


if __name__ == "__main__":
    run_probe(main)
