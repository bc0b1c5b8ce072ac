"""Probe scripts as data: argument/result models, the output parser, and where the scripts live.

Importing this package needs only pydantic (no torch, no transport): the parser is unit-tested on recorded output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import ProbeError
from orchestrator.probes.models import (
    DraftFixArgs,
    DraftFixResult,
    DraftInspectArgs,
    DraftInspectResult,
    DraftReconcileResult,
    DraftTestResult,
    EnvInfoArgs,
    EnvInfoResult,
    PassThroughArgs,
    SglangFlagsArgs,
    SglangFlagsResult,
    SglangSourceArgs,
    SglangSourceResult,
    StatesPlanArgs,
    StatesPlanResult,
    TargetCaptureArgs,
    TargetCaptureResult,
)
from orchestrator.probes.protocol import (
    PROTOCOL_KINDS,
    ProbeErrorInfo,
    ProbeOutcome,
    new_nonce,
    outcome_from_document,
    parse_probe_output,
    parse_progress_line,
)

# probe name -> (args model, result model)
PROBES: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "sglang_source": (SglangSourceArgs, SglangSourceResult),
    "env_info": (EnvInfoArgs, EnvInfoResult),
    "draft_inspect": (DraftInspectArgs, DraftInspectResult),
    "sglang_flags": (SglangFlagsArgs, SglangFlagsResult),
    "draft_fix": (DraftFixArgs, DraftFixResult),
    "target_capture": (TargetCaptureArgs, TargetCaptureResult),
    "draft_test": (PassThroughArgs, DraftTestResult),
    "draft_reconcile": (PassThroughArgs, DraftReconcileResult),
    "states_plan": (StatesPlanArgs, StatesPlanResult),
}
#: the files pushed to a host as one tree (remote_probes/ and its role packages: modules and data)
PUSH_PATTERN = "*.[pj][ys]*"
# server_client answers one result model per command (orchestrator/servers/client.py passes it as result_model).
TYPED_PER_CALL = ("server_client",)


def probes_dir() -> Path:
    """The ``remote_probes`` package directory (pushed as a whole: it runs there as the package it is here)."""
    import remote_probes

    return Path(remote_probes.__file__).resolve().parent


def probe_module(name: str) -> str | None:
    """The module that runs the probe ``name`` (``remote_probes.ROLE.NAME``, as ``python -m`` takes it); None when
    there is no such probe."""
    from remote_probes.agent.probes import probe_path

    path = probe_path(name)
    if path is None:
        return None
    return ".".join(("remote_probes", *Path(path).resolve().relative_to(probes_dir()).with_suffix("").parts))


def validate_args(probe: str, args: dict[str, Any]) -> dict[str, Any]:
    """Check ``args`` against the probe's model; returns the JSON to send. :raises ProbeError: unknown probe or
    invalid args (message lists each field at fault)."""
    if probe not in PROBES:
        raise ProbeError(f"unknown probe {probe!r}; known: {', '.join(sorted(PROBES))}")
    try:
        model = PROBES[probe][0].model_validate(args)
    except ValidationError as exc:
        raise ProbeError(f"invalid arguments for probe {probe}: " + "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())) from None
    return model.model_dump(exclude_none=True)


def check_result(probe: str, model: type[BaseModel], result: dict[str, Any], *, host: str | None = None) -> BaseModel:
    """``result`` as ``model``. :raises ProbeError: (kind ``bad_result``) naming each field at fault, so a probe and
    an orchestrator that disagree fail as one clear error instead of a KeyError somewhere later."""
    try:
        return model.model_validate(result)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        where = f" on {host}" if host else ""
        raise ProbeError(f"probe {probe}{where} failed (bad_result): it returned a result of the wrong shape for "
                         f"{model.__name__}: {problems}{more}") from None


def parse_result(probe: str, outcome: ProbeOutcome) -> BaseModel:
    """The typed result of a successful run. :raises ProbeError: the run failed or the result does not match."""
    result = outcome.unwrap(probe)
    if probe not in PROBES:
        raise ProbeError(f"unknown probe {probe!r}")
    return check_result(probe, PROBES[probe][1], result)


__all__ = [
    "PROBES", "PROTOCOL_KINDS", "PUSH_PATTERN", "probe_module", "TYPED_PER_CALL", "ProbeErrorInfo", "ProbeOutcome", "check_result", "new_nonce", "outcome_from_document", "parse_probe_output",
    "parse_progress_line", "parse_result", "probes_dir", "validate_args",
]
