"""The lab checks itself after training: every planted fault must be decidable by the flagship's own interval
rules, at the flagship's own sample sizes, with a clear margin — on whatever CPU trained the models.

Two kinds of check, both deterministic (greedy decoding, fixed prompts, fixed threads), so what passes here is
what the flagship will see on this machine:

- ``draft_test``: the standalone draft test (remote_probes/evaluation/draft_test.py, run as the probe runs) on a trained draft.
  The seed-wiring draft must give ``mismatch`` with its trained wiring in the best tier; the healthy draft must give
  ``fine`` with its own wiring (SGLang's default) in the best tier.
- ``fix``: a scenario's candidate flags against its fixed flags on the lab's own decoding loop (what the lab server
  runs), over the flagship's bench prompts: the fixed accept length's lower bound must clear the candidate's upper
  bound (the flagship's "the fix recovers the accept length" rule).

A check's ``margin`` is how far it clears its rule (> 1 passes the rule; ``CLEAR`` is asked for, a safety factor
so that a difference in the last bits between two runs cannot flip a verdict). The build retrains a draft that
fails with the next seed and more steps; when that does not help, it retrains the target with another seed and
every draft on it (both bounded), and records every attempt in lab.json.

A build calibrates the trained drafts its scenario serves (``calibrate_lab(..., kinds=...)``); a draft left
unchecked is listed in lab.json's ``calibration_deferred`` until a build for one of its scenarios checks it.

Public API: ``calibrate_lab(base, state, report, steps=None, *, kinds=None)`` (the build's loop),
``CalibrationSteps``, ``FlagshipSample``, ``Check``, ``calibrate_draft(kind, root, scenarios, sample) -> list[Check]``
(the draft test in its own process beside the fix measurements), ``DraftTestRun``, ``run_draft_test``,
``CalibrationFailed``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from orchestrator.errors import OrchestratorError
from orchestrator.lab.building.build import (
    LAB_THREADS,
    TRAINED_DRAFTS,
    VARIANT_BASE,
    BuildProgress,
    Scenario,
    build_drafts,
    copy_model,
    install_target,
    is_complete,
    num_layers_of,
    scenarios,
    seed_wiring,
    sglang_wiring,
    train_draft_attempt,
    write_state,
    write_variant,
)
from orchestrator.tree_removal import remove_tree

#: a check must clear its rule by this factor (intervals 5% apart) to count as clear
CLEAR = 1.05
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class FlagshipSample:
    """The sample sizes of playbooks/eagle3.yaml's vars (tests/lab/test_calibration.py keeps them equal)."""

    bench_n: int = 12
    bench_tokens: int = 64
    dt_prompts: int = 16
    dt_tokens: int = 64
    dt_steps: int = 5
    wiring_margin: float = 0.2


class CalibrationFailed(OrchestratorError):
    """A trained draft still leaves a planted fault undecidable after every allowed retraining."""

    def __init__(self, kind: str, attempts: list[dict[str, Any]], targets: list[int] | None = None) -> None:
        failing = [c["detail"] for c in attempts[-1]["checks"] if not c["passed"]]
        tried = f" on each of {len(targets)} targets (seeds {', '.join(map(str, targets))})" if targets else ""
        super().__init__(f"lab calibration failed for draft {kind} after {len(attempts)} trainings{tried}: "
                         + "; ".join(failing), title="lab calibration failed")
        self.kind, self.attempts, self.targets = kind, attempts, targets or []


@dataclass
class Check:
    scenario: str
    kind: str                     # draft_test | fix
    passed: bool
    margin: float | None          # > 1 clears the rule; >= CLEAR is a clear pass
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- draft test
class DraftTestRun:
    """The draft_test probe started as a subprocess, the way the probe runner starts it (``result`` waits for it):
    it runs on one core while the caller measures fixes on the other."""

    def __init__(self, target: Path, draft: Path, sample: FlagshipSample) -> None:
        self.draft, self.nonce = draft, uuid.uuid4().hex
        args = {"target": str(target), "draft": str(draft), "wirings": "auto", "engine": "sglang",
                "steps": sample.dt_steps, "num_prompts": sample.dt_prompts, "max_new_tokens": sample.dt_tokens,
                "margin": sample.wiring_margin}
        env = dict(os.environ, ORCH_PROBE_NONCE=self.nonce, PYTHONDONTWRITEBYTECODE="1", TORCHDYNAMO_DISABLE="1",
                   **LAB_THREADS)  # as the lab host runs it
        # files, not pipes: nobody reads the probe's output until it ends, and a full pipe would stall it
        self.stdin, self.stdout, self.stderr = (tempfile.TemporaryFile("w+") for _ in range(3))
        self.stdin.write(json.dumps(args))
        self.stdin.seek(0)
        self.proc = subprocess.Popen([sys.executable, "-m", "remote_probes.evaluation.draft_test"],
                                     stdin=self.stdin, stdout=self.stdout, stderr=self.stderr, text=True, env=env,
                                     cwd=str(REPO))

    def result(self, timeout: float = 1800) -> dict[str, Any]:
        """The probe's result, checked against its model (``probes.PROBES``) as the probe runner checks it.
        :raises RuntimeError: it failed. :raises ProbeError: it answered a result of the wrong shape."""
        from orchestrator.probes import PROBES, check_result
        from orchestrator.probes.protocol import parse_probe_output

        try:
            self.proc.wait(timeout=timeout)
            stdout, stderr = (self._read(f) for f in (self.stdout, self.stderr))
        finally:
            self.stop()
        outcome = parse_probe_output(stdout, self.nonce, exit_status=self.proc.returncode, stderr=stderr)
        if not outcome.ok or outcome.result is None:
            err = outcome.error
            raise RuntimeError(f"draft_test on {self.draft} failed: {err.kind if err else '?'}: "
                               f"{err.message if err else ''}")
        check_result("draft_test", PROBES["draft_test"][1], outcome.result, host="the lab (calibration)")
        return outcome.result

    def stop(self) -> None:
        """Kill the probe if it still runs (a failed fix measurement, an interrupt) and close its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for handle in (self.stdin, self.stdout, self.stderr):
            handle.close()

    @staticmethod
    def _read(handle: IO[str]) -> str:
        handle.seek(0)
        return handle.read()


def run_draft_test(target: Path, draft: Path, sample: FlagshipSample) -> dict[str, Any]:
    """The draft_test probe as a subprocess, its result checked (``DraftTestRun``). :raises RuntimeError: it failed.
    :raises ProbeError: it answered a result of the wrong shape (``bad_result``)."""
    return DraftTestRun(target, draft, sample).result()


def check_draft_test(scenario: str, result: dict[str, Any], want: str, own_wiring: list[int],
                     margin: float) -> Check:
    """``want`` = mismatch (seed-wiring) or fine (healthy); ``own_wiring`` must be in the best tier."""
    rows = result["wirings"]
    own = next((r for r in rows if r["wiring"] == own_wiring), None)
    in_best = own is not None and own.get("tier") == 1
    best, server = result["best"], result.get("server") or {}
    bar = 1.0 + margin
    value: float | None = None
    gain = (best.get("vs_server") or {}).get("ratio_ci")
    if want == "mismatch" and best.get("tau_serving_ci") and server.get("tau_serving_ci") and gain:
        value = min(best["tau_serving_ci"][0] / server["tau_serving_ci"][1], gain[0] / bar)
    elif want == "fine" and gain:
        value = bar / gain[1]
    passed = result.get("decision") == want and in_best and value is not None and value >= CLEAR
    figures = {"decision": result.get("decision"), "best": best["wiring"], "best_tier": result.get("best_tier"),
               "own_wiring": own_wiring, "own_tier": own.get("tier") if own else None,
               "best_tau_ci": best.get("tau_serving_ci"), "served_tau_ci": server.get("tau_serving_ci"),
               "gain_ci": gain, "prompts": result.get("prompts")}
    detail = (f"draft test: {result.get('decision')} (want {want}), own wiring {own_wiring} in tier "
              f"{figures['own_tier']}, margin {value if value is None else round(value, 3)}")
    return Check(scenario, "draft_test", passed, None if value is None else round(value, 4), detail, figures)


# ---------------------------------------------------------------- fix verification on the lab's decoding loop
def accept_lengths(target: Path, flags: dict[str, Any], sample: FlagshipSample) -> list[float]:
    """Per-request accept lengths (completion tokens / verify cycles, SGLang's meta_info) for the bench prompts."""
    import logging

    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.servers.flags import flags_to_argv
    from orchestrator.servers.prompts import load_prompts

    argv = ["--model-path", str(target), *flags_to_argv(flags)]
    args = resolve(build_parser().parse_args(argv), target_architecture="LlamaForCausalLM")
    models = LabModelRunner(args, log=logging.getLogger("orchestrator.lab.building.calibrate").debug)
    prompts = load_prompts(None)
    out = []
    for i in range(sample.bench_n):
        gen = models.generate(models.tokenizer(prompts[i % len(prompts)])["input_ids"],
                              max_new_tokens=sample.bench_tokens, stop=[], stop_token_ids=[], ignore_eos=False)
        if gen.spec.verify_ct:
            out.append(len(gen.output_ids) / gen.spec.verify_ct)
    return out


def check_fix(sc: Scenario, target: Path, sample: FlagshipSample,
              cache: dict[str, list[float]] | None = None) -> Check:
    from remote_probes.evaluation.interval_stats import mean_interval

    cache = cache if cache is not None else {}

    def measured(flags: dict[str, Any]) -> list[float]:
        key = json.dumps(flags, sort_keys=True)
        if key not in cache:
            cache[key] = accept_lengths(target, flags, sample)
        return cache[key]

    cand, fixed = mean_interval(measured(sc.candidate)), mean_interval(measured(sc.fixed))
    if cand is None or fixed is None or not (cand.decided and fixed.decided):
        return Check(sc.name, "fix", False, None, "fix: no interval (fewer than 2 requests with verify cycles)")
    value = fixed.lo / cand.hi if cand.hi and fixed.lo is not None else None  # fixed.lo: decided above
    passed = value is not None and value >= CLEAR
    detail = (f"fix: accept length {cand.estimate:.2f} {cand.as_list(2)} -> {fixed.estimate:.2f} "
              f"{fixed.as_list(2)}, margin {value if value is None else round(value, 3)}")
    return Check(sc.name, "fix", passed, None if value is None else round(value, 4), detail,
                 {"candidate": cand.to_dict(), "fixed": fixed.to_dict()})


# ---------------------------------------------------------------- per draft
#: which checks each trained draft is answerable for (scenarios whose verdict depends on its quality)
FIX_SCENARIOS = {"seed-wiring": ("seed-wiring", "off-by-one"), "healthy": ("topk-override", "eagle-not-eagle3")}
FIX_SCENARIOS_ORDER = tuple(s for names in FIX_SCENARIOS.values() for s in names)


def calibrate_draft(kind: str, root: Path, scenarios: dict[str, Scenario],
                    sample: FlagshipSample = FlagshipSample()) -> list[Check]:
    """Every check that depends on the trained draft ``kind`` (seed-wiring or healthy) of the lab at ``root``, on
    two cores: the draft test runs in its own process while this one measures the fixes on the lab's decoding loop
    (independent experiments, each at one thread, deterministic: the figures are those of one after the other)."""
    target = root / "target"
    n = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    draft_test = DraftTestRun(target, root / "drafts" / kind, sample)
    try:
        cache: dict[str, list[float]] = {}
        fixes = [check_fix(scenarios[name], target, sample, cache) for name in FIX_SCENARIOS[kind]
                 # a fault copy not built yet is checked later
                 if (root / "drafts" / scenarios[name].draft / ".complete").is_file()]
        result = draft_test.result()
    finally:
        draft_test.stop()
    if kind == "seed-wiring":
        first = check_draft_test("seed-wiring", result, "mismatch", seed_wiring(n), sample.wiring_margin)
    else:
        first = check_draft_test("healthy", result, "fine", sglang_wiring(n), sample.wiring_margin)
    return [first, *fixes]


# ---------------------------------------------------------------- the build's calibration loop
#: draft trainings per target: the first, then the next draft seed with 50% more steps
DRAFT_ATTEMPTS = 2
#: targets tried: the build's seed, then the next seeds. A target can leave a planted fault unclear whatever the
#: draft (seed 1's target serves the seed wiring nearly as well as the trained one), so retraining the draft
#: alone cannot mend every machine.
TARGET_ATTEMPTS = 3
#: the next target's seed is this far on: far enough that a lab built with seed s never lands on the lab another
#: build seed (s + 1, s + 2, ...) gives, so labs built with different seeds stay different labs
TARGET_SEED_STRIDE = 1000


@dataclass(frozen=True)
class CalibrationSteps:
    """The two expensive steps of the loop (tests put cheap ones in to exercise the escalation)."""

    #: check draft ``kind`` of the lab at ``base``, retraining it up to DRAFT_ATTEMPTS times; the record
    calibrate_draft: Callable[[Path, str, BuildProgress], dict[str, Any]]
    #: replace the target with the one trained for ``seed`` and rebuild every draft the lab had on it
    retrain_target: Callable[[Path, int, BuildProgress], None]


def calibrate_lab(base: Path, state: dict[str, Any], report: BuildProgress,
                  steps: CalibrationSteps | None = None, *, kinds: tuple[str, ...] | None = None) -> None:
    """Check every trained draft of the lab (``kinds``: only those, the drafts the run the lab is built for
    serves); retrain what leaves a planted fault unclear, bounded.

    First the draft is retrained (``DRAFT_ATTEMPTS``); when its faults stay unclear the target is retrained with the
    next seed, every draft with it, and all checks run again (``TARGET_ATTEMPTS`` targets). Records go to
    ``state["calibration"][kind]``, the target seed to ``state["target_seed"]`` and each target given up on to
    ``state["targets_rejected"]`` (all written to lab.json as they happen). A draft already calibrated with the
    same weights and sample is not checked again; when a fault copy of it appeared since, only that copy's fix is.
    A trained draft present but left unchecked (not among ``kinds``) is listed in ``state["calibration_deferred"]``:
    the scenarios it serves are not ready (``build.lab_is_built``) until a build for one of them checks it.
    :raises CalibrationFailed: still unclear on the last target.
    """
    steps = steps or CalibrationSteps(_calibrate_draft_until_clear, _retrain_target)
    rejected: list[dict[str, Any]] = state.setdefault("targets_rejected", [])
    while True:
        failed = _calibrate_built_drafts(base, state, report, steps, kinds)
        if failed is None:
            _record_deferred(base, state)
            return
        seed = int(state.get("target_seed", 0))
        record = state["calibration"][failed]
        rejected.append({"seed": seed, "draft": failed, "attempts": record["attempts"]})
        write_state(base, state)
        if len(rejected) >= TARGET_ATTEMPTS:
            raise CalibrationFailed(failed, record["attempts"], targets=[r["seed"] for r in rejected])
        following = seed + TARGET_SEED_STRIDE
        report("calibrate", f"the target of seed {seed} leaves draft {failed} unclear after "
               f"{len(record['attempts'])} training(s): retraining the target with seed {following}", 1.0)
        steps.retrain_target(base, following, report)
        state.update(target_seed=following, calibration={}, drafts={})
        write_state(base, state)


def _calibrate_built_drafts(base: Path, state: dict[str, Any], report: BuildProgress,
                            steps: CalibrationSteps, kinds: tuple[str, ...] | None) -> str | None:
    """Calibrate each trained draft present (seed-wiring first: it carries most faults), of ``kinds`` when given;
    the first that fails."""
    n = num_layers_of(base)
    sc_all = scenarios(base, n)
    records: dict[str, Any] = state.setdefault("calibration", {})
    sample = FlagshipSample()
    for kind in TRAINED_DRAFTS:
        if not is_complete(base / "drafts" / kind) or (kinds is not None and kind not in kinds):
            continue
        built = [s for s in FIX_SCENARIOS[kind] if is_complete(base / "drafts" / sc_all[s].draft)]
        old = records.get(kind) or {}
        if (old.get("passed") and old.get("identity") == draft_identity(base, kind)
                and old.get("sample") == asdict(sample) and _recheck_added(base, old, built, sc_all, report)):
            write_state(base, state)
            continue
        records[kind] = steps.calibrate_draft(base, kind, report)
        records[kind]["scenarios"] = built
        write_state(base, state)
        if not records[kind]["passed"]:
            return kind
    return None


def _record_deferred(base: Path, state: dict[str, Any]) -> None:
    """lab.json ``calibration_deferred``: the trained drafts present without a clear record (left unchecked)."""
    records = state.get("calibration") or {}
    deferred = [k for k in TRAINED_DRAFTS
                if is_complete(base / "drafts" / k) and not (records.get(k) or {}).get("passed")]
    if deferred or state.get("calibration_deferred"):
        state["calibration_deferred"] = deferred
        write_state(base, state)


def draft_identity(base: Path, kind: str) -> str:
    """The draft's training recipe and the target's: a record holds only for the same weights on the same target."""
    parts = [base / "drafts" / kind / "lab_recipe.json", base / "target" / "lab_recipe.json"]
    return "\n".join(p.read_text() if p.is_file() else "" for p in parts)


def _say(report: BuildProgress, checks: list[Check]) -> None:
    for c in checks:
        report("calibrate", f"{'ok  ' if c.passed else 'FAIL'} {c.scenario}: {c.detail}", 1.0)


def _recheck_added(base: Path, record: dict[str, Any], built: list[str], sc_all: dict[str, Scenario],
                   report: BuildProgress) -> bool:
    """Check the fixes of scenarios built since ``record`` was made; True when the record still holds."""
    added = [s for s in built if s not in record.get("scenarios", [])]
    checks = [check_fix(sc_all[s], base / "target", FlagshipSample()) for s in added]
    _say(report, checks)
    if not all(c.passed for c in checks):
        return False
    record["attempts"][-1]["checks"] += [c.to_dict() for c in checks]
    # the scenarios checked so far, not only those built now: a record that covers a fault copy not yet written here
    # (the shipped records cover every scenario) must not check it again once it is
    record["scenarios"] = [s for s in FIX_SCENARIOS_ORDER if s in {*record.get("scenarios", []), *built}]
    return True


def _retrain_target(base: Path, seed: int, report: BuildProgress) -> None:
    """The target for ``seed`` in place of the old one; every draft the lab had is rebuilt on it (they were
    trained on the old target's hidden states, so none of them carries over)."""
    drafts = base / "drafts"
    kinds = sorted(p.name for p in drafts.iterdir() if is_complete(p)) if drafts.is_dir() else []
    remove_tree(drafts)
    timings: dict[str, float] = {}
    install_target(base, seed, report, timings)
    build_drafts(base, sorted(kinds, key=lambda k: k not in TRAINED_DRAFTS), num_layers_of(base), seed, report,
                 timings)


def _calibrate_draft_until_clear(base: Path, kind: str, report: BuildProgress) -> dict[str, Any]:
    drafts = base / "drafts"
    n = num_layers_of(base)
    sc_all = scenarios(base, n)
    recipe = json.loads((base / "target" / "lab_recipe.json").read_text())
    target_seed = int(recipe.get("seed", 0))
    attempts: list[dict[str, Any]] = []
    for attempt in range(DRAFT_ATTEMPTS):
        report("calibrate", f"calibrating draft {kind} (attempt {attempt + 1}/{DRAFT_ATTEMPTS}, target seed "
               f"{target_seed})", attempt / DRAFT_ATTEMPTS)
        if attempt:  # retrain with the next seed and more steps; the fault copies of this draft follow it
            trained = train_draft_attempt(kind, n, target_seed, attempt,
                                          lambda m, f: report(f"draft {kind}", m, f))
            copy_model(trained, drafts / kind)
            for copy in (c for c, source in VARIANT_BASE.items() if source == kind):
                if is_complete(drafts / copy):
                    write_variant(drafts / kind, drafts / copy, copy, n)
        checks = calibrate_draft(kind, base, sc_all)
        _say(report, checks)
        draft_recipe = json.loads((drafts / kind / "lab_recipe.json").read_text())
        attempts.append({"seed": draft_recipe.get("seed"), "steps": draft_recipe.get("steps"),
                         "target_seed": target_seed, "passed": all(c.passed for c in checks),
                         "checks": [c.to_dict() for c in checks]})
        if attempts[-1]["passed"]:
            break
    return {"passed": attempts[-1]["passed"], "attempts": attempts, "identity": draft_identity(base, kind),
            "sample": asdict(FlagshipSample())}
