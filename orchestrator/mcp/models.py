"""What the MCP tools return: pydantic models, so each tool publishes an output schema. A step's own
result (what the step kind registers, see ``orchestrator.actions``) travels whole in ``result``; the fields
beside it are the ones an assistant reads first."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class StepOutcome(BaseModel):
    """One recorded ad-hoc step (ids x1, x2, ... in the session log)."""

    step_id: str = Field(description="the step's id in the session log")
    status: str = Field(description="ok | failed | timeout | unreachable | cancelled | skipped")
    duration: float = Field(description="seconds")
    error: str | None = None
    host: str | None = None
    result: dict[str, Any] = Field(default_factory=dict, description="what the step registered (first host)")


class ReadSourceResult(StepOutcome):
    package: str
    version: str | None = Field(default=None, description="the installed version the lines come from")
    text: str = Field(default="", description="the lines read, numbered, as the report shows them")


class ExecResult(StepOutcome):
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""


class ServerResult(StepOutcome):
    name: str
    url: str | None = None
    flags: dict[str, Any] = Field(default_factory=dict, description="the flags requested")
    effective: dict[str, Any] = Field(default_factory=dict, description="the flags the server actually uses")
    overrides: list[dict[str, Any]] = Field(default_factory=list,
                                            description="requested flags the server changed: flag, requested, effective, source")
    states_from: dict[str, Any] | None = Field(default=None, description="a capture server's (capture: layers): "
                                               "give it to draft_test as states_from")


class DraftTestResult(StepOutcome):
    decision: str | None = Field(default=None, description="mismatch | fine | inconclusive | no_signal")
    verdict: str | None = None
    hidden_states: str | None = Field(default=None, description="where the target's hidden states came from "
                                      "(transformers in the test's process, or the serving engine)")
    ceiling: str | None = Field(default=None, description="the acceptance ceiling: the share of the target's greedy "
                                "tokens the served vocabulary can name, and the accept length a draft perfect within "
                                "it reaches")


class Hypothesis(BaseModel):
    id: str
    title: str
    state: str
    manual: bool = False
    why: str | None = None
    test: str | None = None
    last_evidence: str | None = None
    evidence_count: int = 0


class Hypotheses(BaseModel):
    hypotheses: list[Hypothesis]
    answer: str | None = Field(default=None, description="the investigation's answer in one line: the symptom in "
                               "numbers, the cause, the fix and whether it was verified (the console's last line)")


class Verdict(BaseModel):
    hypothesis_id: str
    state: str
    previous: str | None = None
    conflicts_with: str | None = None


class Note(BaseModel):
    text: str
    hypothesis_id: str | None = None
    step_id: str | None = None


class PlaybookStep(BaseModel):
    step_id: str
    name: str
    status: str
    error: str | None = None


class PlaybookRun(BaseModel):
    status: str = Field(description="ok | failed | cancelled: how the playbook's steps went")
    steps: list[PlaybookStep]
    hypotheses: list[Hypothesis]
    answer: str | None = Field(default=None, description="the answer in one line (as the console's last line)")
    verdict_status: str | None = Field(default=None, description="verified | partly_verified | found_not_servable | "
                                       "found_not_verified | nothing_wrong | not_explained (verdict.json's status)")


class Report(BaseModel):
    session_dir: str
    written: list[str] = Field(description="report files written")
    markdown: str
    failures: list[str] = Field(default_factory=list)
