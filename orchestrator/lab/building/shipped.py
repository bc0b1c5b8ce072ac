"""The lab's trained models as shipped with the package, so that a first run does not train for minutes.

``orchestrator/data/lab/`` holds what ``orchestrator lab build --from-scratch`` produces and calibrates — the target
(weights, tokenizer, prompts) and the two trained drafts (seed-wiring, healthy; the fault scenarios are cheap copies
written at install) — and ``manifest.json``: the recipe hash (``orchestrator.lab.building.recipe.recipe_hash``), where and when
they were built (Python, torch, CPU, the numerics pins), every file's sha256, the build's full calibration records,
and the calibrating machine's fingerprint: sha256 digests of the bits the shipped models compute on the paths the
calibration measured (``fingerprint()``: about a second).

On first use the lab copies the shipped models (every file checked against its sha256) and **confirms** them on
this CPU: the same fingerprint, bit for bit, means this CPU computes every figure of the calibration as the
calibrating machine did (the calibration is deterministic: greedy decoding, fixed prompts), so its margins are this
lab's. A calibration re-run would only repeat them; the bits are the cheapest proof. Any other bit (another kernel
ISA, another library build) sends the lab through the calibration on this CPU (and, should a draft not be clear
here, the build's retraining: a build from scratch), and says so: of the trained drafts the run's scenario serves
only (the flagship's: seed-wiring, 10 to 20 s on two cores), each other draft when a run first needs it (lab.json
``calibration_deferred``; ``orchestrator lab build --scenario all`` calibrates every one).

**Other CPUs.** The bits depend on the CPU's kernels: an AVX-512 Intel Xeon computes the shipped models otherwise than
the AVX2 AMD EPYC that calibrated them (every digest differs), and so paid the full calibration (about 40 s) on every
first use. The manifest's ``other_cpus`` holds, per such CPU, its fingerprint and its own full calibration of the
same shipped models (``add_this_cpu``: ``orchestrator lab build --scenario all`` there, then ``orchestrator lab
build --ship-cpu``); a CPU whose bits equal one of them adopts that one's records. Nothing is tuned: the records are
the calibration that CPU ran, and equal bits are again the proof that it would run the same here.

Public API: ``SHIPPED_DIR``, ``Manifest``, ``read_manifest(root=SHIPPED_DIR) -> Manifest | None``,
``install_shipped(base, manifest, report) -> dict`` (the lab's origin record), ``fingerprint(base) -> dict``,
``confirm(base, manifest, report) -> dict``, ``calibration_confirmed(manifest, record) -> dict | None``,
``write_shipped(base, dest, state) -> Manifest``, ``add_this_cpu(base, state, dest) -> OtherCpu``,
``same_training(base, root, part) -> bool``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import platform
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building.build import (
    TRAINED_DRAFTS,
    BuildProgress,
    copy_model,
    num_layers_of,
    scenarios,
)

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "data" / "lab"
MANIFEST_FORMAT = 1
#: files of a trained model that are not shipped: the tokenised corpus (only draft training reads it) and markers
NOT_SHIPPED = ("lab_tokens.pt", ".complete")


class OtherCpu(BaseModel):
    """A CPU that computes the shipped models otherwise than the calibrating machine, with its own calibration."""

    model_config = ConfigDict(extra="forbid")
    cpu: str                               # /proc/cpuinfo's model name
    at: str                                # when its calibration was recorded
    built: dict[str, Any]                  # python, torch, platform, capability of that machine
    fingerprint: dict[str, Any]            # its bits (see fingerprint())
    calibration: dict[str, Any]            # kind -> its full calibration record of the shipped models


class Manifest(BaseModel):
    """``orchestrator/data/lab/manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: int
    recipe_hash: str
    built: dict[str, Any]                  # at, python, torch, platform, cpu, numerics, seconds
    target_seed: int
    drafts: dict[str, dict[str, Any]]      # kind -> {seed, steps} of the shipped (calibrated) training
    files: dict[str, str]                  # path under SHIPPED_DIR -> sha256
    calibration: dict[str, Any]            # kind -> the build's calibration record (lab.json's)
    fingerprint: dict[str, Any]            # the calibrating machine's bits (see fingerprint())
    other_cpus: list[OtherCpu] = Field(default_factory=list)  # CPUs of other bits, each calibrated on itself


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(root: Path = SHIPPED_DIR) -> Manifest | None:
    """The shipped manifest, or None when this install ships no models (a trimmed package)."""
    path = root / "manifest.json"
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate_json(path.read_text())
    except ValueError as exc:
        raise OrchestratorError(f"{path}: not a valid shipped-lab manifest: {exc}",
                                title="shipped lab models damaged") from None


def check_files(manifest: Manifest, root: Path = SHIPPED_DIR) -> list[str]:
    """The shipped files that are missing or differ from their recorded sha256 (empty: all intact)."""
    bad = []
    for rel, want in sorted(manifest.files.items()):
        path = root / rel
        if not path.is_file() or sha256_of(path) != want:
            bad.append(rel)
    return bad


def install_shipped(base: Path, manifest: Manifest, report: BuildProgress, root: Path = SHIPPED_DIR) -> dict[str, Any]:
    """Copy the shipped target and trained drafts into the lab at ``base``; returns the lab's origin record.

    :raises OrchestratorError: a shipped file is missing or damaged (its sha256 differs).
    """
    t0 = time.monotonic()
    bad = check_files(manifest, root)
    if bad:
        raise OrchestratorError(f"shipped lab models under {root} are damaged ({', '.join(bad[:5])}); reinstall the "
                                "package or build the lab with `orchestrator lab build --from-scratch`",
                                title="shipped lab models damaged")
    copy_model(root / "target", base / "target", skip=NOT_SHIPPED)
    for kind in TRAINED_DRAFTS:
        copy_model(root / "drafts" / kind, base / "drafts" / kind, skip=NOT_SHIPPED)
    report("shipped", f"shipped models installed (recipe {manifest.recipe_hash}, built {manifest.built['at']})", 1.0)
    return {"kind": "shipped", "recipe_hash": manifest.recipe_hash, "built": manifest.built,
            "from": str(root), "installed_at": _now(), "seconds": round(time.monotonic() - t0, 2)}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---------------------------------------------------------------- the fingerprint of the calibrating machine's numerics
#: the lab prompts the fingerprint runs on, the draft steps of its test-time-training pass, the tokens it decodes
FINGERPRINT_PROMPTS = 4
FINGERPRINT_STEPS = 5
FINGERPRINT_TOKENS = 32


def _digest(tensor: Any) -> str:
    return hashlib.sha256(tensor.detach().contiguous().float().numpy().tobytes()).hexdigest()[:24]


def fingerprint(base: Path) -> dict[str, Any]:
    """This CPU's bits for the shipped models, on the paths the calibration measured, at one thread (so the
    figure depends on the CPU's kernels, not on its core count): per trained draft, the target's logits and the
    hidden states it feeds (the draft test's capture), the draft's logits over a test-time-training pass (the draft
    test's scoring) and the lab server's speculative decoding of one prompt (its decoding loop: tokens, verify
    cycles, accepted drafts). Equal bits mean every figure the calibration measured comes out the same here."""
    import logging

    import torch

    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.servers.flags import flags_to_argv

    sc_all = scenarios(base, num_layers_of(base))
    prompts = json.loads((base / "target" / "prompts.json").read_text())[:FINGERPRINT_PROMPTS]
    threads = torch.get_num_threads()
    out: dict[str, Any] = {"threads": 1, "capability": torch.backends.cpu.get_cpu_capability()}
    try:
        for kind in TRAINED_DRAFTS:
            argv = ["--model-path", str(base / "target"), *flags_to_argv(sc_all[kind].fixed)]
            models = LabModelRunner(resolve(build_parser().parse_args(argv), target_architecture="LlamaForCausalLM"),
                               log=logging.getLogger("orchestrator.lab.building.shipped").debug)
            torch.set_num_threads(1)  # after LabModelRunner, which sets the server's own count
            assert models.draft is not None
            parts: dict[str, Any] = {}
            with torch.inference_mode():
                for i, prompt in enumerate(prompts):
                    ids = torch.tensor([models.tokenizer(prompt)["input_ids"]])
                    res = models.target(input_ids=ids, output_hidden_states=True)
                    aux = torch.cat([res.hidden_states[j] for j in models.capture], dim=-1)
                    nxt = torch.cat([ids[:, 1:], ids.new_zeros(1, FINGERPRINT_STEPS)], dim=1)
                    outs = models.draft.ttt_forward(aux[:, :-1], nxt, steps=FINGERPRINT_STEPS)
                    parts[f"prompt {i}"] = {"target": _digest(res.logits), "aux": _digest(aux),
                                            "draft": _digest(torch.stack([o.logits for o in outs]))}
            gen = models.generate(models.tokenizer(prompts[0])["input_ids"], max_new_tokens=FINGERPRINT_TOKENS,
                                  stop=[], stop_token_ids=[], ignore_eos=True)
            parts["decode"] = {"tokens": gen.output_ids, "verify_ct": gen.spec.verify_ct,
                               "accepted": gen.spec.correct_drafts}
            out[kind] = parts
    finally:
        torch.set_num_threads(threads)
    return out


def _differences(want: Any, here: Any, where: str = "") -> list[str]:
    if not isinstance(want, dict) or not isinstance(here, dict):
        return [] if want == here else [where]
    return [d for k in sorted(set(want) | set(here))
            for d in _differences(want.get(k), here.get(k), f"{where} {k}".strip())]


def confirm(base: Path, manifest: Manifest, report: BuildProgress) -> dict[str, Any]:
    """Compute the fingerprint on this CPU and compare it with the calibrating machine's, then with each other CPU's
    of the manifest; the confirmation record (``passed``: the same bits as one of them, ``matched``: which one,
    0 the calibrating machine, i the manifest's ``other_cpus[i - 1]``; else ``differs`` names what came out
    otherwise than on the calibrating machine)."""
    report("confirm", "checking that this CPU computes the shipped models as a calibrated machine did", 0.0)
    t0 = time.monotonic()
    here = fingerprint(base)
    differs = _differences(manifest.fingerprint, here)
    matched = 0 if not differs else next(
        (i for i, other in enumerate(manifest.other_cpus, 1) if not _differences(other.fingerprint, here)), None)
    record: dict[str, Any] = {"passed": matched is not None, "differs": differs[:8], "at": _now(), "cpu": cpu_name(),
                              "seconds": round(time.monotonic() - t0, 1)}
    if matched is not None:
        record["matched"] = matched
        record["matched_cpu"] = manifest.built.get("cpu") if matched == 0 else manifest.other_cpus[matched - 1].cpu
    report("confirm", f"the same bits as {_which(manifest, matched)}: its margins hold on this CPU"
           if matched is not None else
           f"this CPU computes differently ({', '.join(differs[:3])}): calibrating here what each run needs, "
           "once", 1.0)
    return record


def _which(manifest: Manifest, matched: int | None) -> str:
    if not matched:
        return "the calibrating machine"
    other = manifest.other_cpus[matched - 1]
    return f"the {other.cpu} calibrated {other.at}"


def calibration_confirmed(manifest: Manifest, record: dict[str, Any]) -> dict[str, Any] | None:
    """The calibration records a passed confirmation adopts (the matched machine's); None when it did not pass."""
    if not record.get("passed"):
        return None
    matched = int(record.get("matched") or 0)
    return manifest.calibration if matched == 0 else manifest.other_cpus[matched - 1].calibration


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------- making the shipped set (a developer's step)
def write_shipped(base: Path, dest: Path, state: dict[str, Any]) -> Manifest:
    """Write the lab at ``base`` (built from scratch and calibrated: ``state`` is its lab.json) as the shipped set
    under ``dest``. :raises OrchestratorError: the lab is not calibrated for both trained drafts."""
    import torch

    from orchestrator.lab.building.calibrate import FlagshipSample
    from orchestrator.lab.building.recipe import recipe_hash
    from orchestrator.lab.training.train_job import pinned_env

    calibration = state.get("calibration", {})
    if any(not (calibration.get(k) or {}).get("passed") for k in TRAINED_DRAFTS):
        raise OrchestratorError(f"the lab at {base} is not calibrated for {', '.join(TRAINED_DRAFTS)}; build it "
                                "with `orchestrator lab build --from-scratch --scenario all` first",
                                title="lab not calibrated")
    if any(rec.get("sample") != asdict(FlagshipSample()) for rec in calibration.values()):
        raise OrchestratorError("the lab's calibration used another sample than the flagship's", title="stale lab")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    copy_model(base / "target", tmp / "target", skip=NOT_SHIPPED)
    drafts: dict[str, dict[str, Any]] = {}
    for kind in TRAINED_DRAFTS:
        copy_model(base / "drafts" / kind, tmp / "drafts" / kind, skip=NOT_SHIPPED)
        recipe = json.loads((base / "drafts" / kind / "lab_recipe.json").read_text())
        drafts[kind] = {"seed": recipe.get("seed"), "steps": recipe.get("steps")}
    for marker in tmp.rglob(".complete"):
        marker.unlink()
    files = {p.relative_to(tmp).as_posix(): sha256_of(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    manifest = Manifest(
        format=MANIFEST_FORMAT, recipe_hash=recipe_hash(),
        built={"at": state.get("built_at") or _now(), "python": sys.version.split()[0],
               "torch": torch.__version__, "platform": platform.platform(), "cpu": cpu_name(),
               "numerics": {k: v for k, v in pinned_env(1).items() if "THREADS" not in k},
               "seconds": state.get("timings", {})},
        target_seed=int(state.get("target_seed", 0)), drafts=drafts, files=files,
        calibration={k: calibration[k] for k in TRAINED_DRAFTS}, fingerprint=fingerprint(base))
    (tmp / "manifest.json").write_text(manifest.model_dump_json(indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return manifest


def add_this_cpu(base: Path, state: dict[str, Any], dest: Path = SHIPPED_DIR) -> OtherCpu:
    """Record this CPU in the shipped manifest under ``dest``: its fingerprint and the full calibration the lab at
    ``base`` ran here on the shipped models, so that the next machine computing these bits confirms in seconds.

    :raises OrchestratorError: the lab is not the shipped models calibrated in full here (it confirmed, it
        retrained, or a check was not clear), or this CPU's bits are recorded already."""
    manifest = read_manifest(dest)
    if manifest is None:
        raise OrchestratorError(f"no shipped lab models under {dest}", title="cannot record this CPU")
    why = _not_recordable(base, state, manifest, dest)
    if why is not None:
        raise OrchestratorError(why, title="cannot record this CPU")
    import torch

    here = fingerprint(base)
    if not _differences(manifest.fingerprint, here) or any(
            not _differences(o.fingerprint, here) for o in manifest.other_cpus):
        raise OrchestratorError("this CPU's bits are recorded already", title="cannot record this CPU")
    entry = OtherCpu(cpu=cpu_name(), at=_now(), fingerprint=here, calibration=copy.deepcopy(state["calibration"]),
                     built={"python": sys.version.split()[0], "torch": torch.__version__,
                            "platform": platform.platform(), "capability": here.get("capability")})
    updated = manifest.model_copy(update={"other_cpus": [*manifest.other_cpus, entry]})
    tmp = dest / "manifest.json.tmp"
    tmp.write_text(updated.model_dump_json(indent=1) + "\n")
    tmp.replace(dest / "manifest.json")
    return entry


def _not_recordable(base: Path, state: dict[str, Any], manifest: Manifest, dest: Path) -> str | None:
    """Why the lab at ``base`` cannot stand for this CPU in the manifest (None: it can)."""
    from orchestrator.lab.building.calibrate import FlagshipSample

    origin = state.get("origin") or {}
    calibration = state.get("calibration") or {}
    if origin.get("kind") != "shipped" or origin.get("recipe_hash") != manifest.recipe_hash:
        return f"the lab at {base} is not the shipped models (origin: {origin.get('kind')})"
    if (origin.get("confirmed") or {}).get("passed"):
        return f"the lab at {base} confirmed recorded bits: this CPU is recorded already"
    for kind in TRAINED_DRAFTS:
        if not all(same_training(base, dest, part) for part in ("target", f"drafts/{kind}")):
            return f"the lab at {base} retrained the {kind} draft here: its models are no longer the shipped ones"
        record = calibration.get(kind) or {}
        if not record.get("passed") or set(record.get("scenarios") or []) != set(
                manifest.calibration[kind].get("scenarios") or []):
            return (f"the lab at {base} has no clear calibration of the {kind} draft over every scenario here: build "
                    "it with `orchestrator lab build --scenario all` first")
        if record.get("sample") != asdict(FlagshipSample()):
            return "the lab's calibration used another sample than the flagship's"
    return None


def same_training(base: Path, root: Path, part: str) -> bool:
    """True when the model ``part`` (``target``, ``drafts/<kind>``) of the lab at ``base`` has the training record of
    the one under ``root`` (the shipped set): the same recipe, seed and steps, so the same weights."""
    try:
        return (base / part / "lab_recipe.json").read_text() == (root / part / "lab_recipe.json").read_text()
    except OSError:
        return False
