"""Pydantic models of a playbook. The loader (``loader.py``) builds them and locates every mistake."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from orchestrator.errors import Location
from orchestrator.events import StepSection

ID_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
VerdictKey = Literal["confirm_if", "support_if", "refute_if", "inconclusive_if"]  # an EvidenceRule's fields
VERDICT_KEYS: tuple[VerdictKey, ...] = get_args(VerdictKey)


class Hypothesis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    why: str | None = Field(default=None, description="why it would explain the symptom")
    test: str | None = Field(default=None, description="how to test it (the check that decides it)")
    prediction: str | None = Field(default=None, description="what we expect to observe if it is true")
    manual: bool = Field(default=False, description="no automatic check can decide it; needs a person")
    case_of: str | None = Field(default=None, description="the id of a broader hypothesis this one is a specific "
                                "case of (rope_mismatch of served_part): confirmed together, the verdict tells them "
                                "as one root cause, the specific one first")
    tags: list[str] = []

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID_PATTERN.match(value):
            raise ValueError(f"hypothesis id {value!r} must be an identifier (letters, digits, _)")
        return value


class EvidenceRule(BaseModel):
    """`evidence: {hyp_id: {rule: NAME}}` on a step: a verdict rule registered in code (orchestrator/verdicts/), or
    a rule written here as expressions, `{hyp_id: {confirm_if: EXPR, refute_if: EXPR, ..., because: TEMPLATE}}`."""

    model_config = ConfigDict(extra="forbid")

    rule: str | None = Field(default=None, description="a registered verdict rule (`orchestrator rules` lists "
                             "them); instead of the *_if expressions")
    confirm_if: str | None = None
    support_if: str | None = None
    refute_if: str | None = None
    inconclusive_if: str | None = None
    because: str | None = Field(default=None, description="template: the observation, in one sentence")


class StepOptions(BaseModel):
    """The keys every step may have besides its one action key."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str | None = None
    # `register` is Ansible's word, but it would shadow ABCMeta.register on the model class.
    register_as: str | None = Field(default=None, alias="register")
    when: str | bool | None = None
    until: str | None = None
    retries: int | None = Field(default=None, ge=0, le=1000)
    delay: float = Field(default=5.0, ge=0)
    timeout: float | None = Field(default=None, gt=0, description="seconds; the step is killed after it")
    ignore_errors: bool = False
    hosts: str | list[str] | None = None
    evidence: dict[str, EvidenceRule] = {}

    @field_validator("register_as")
    @classmethod
    def _register(cls, value: str | None) -> str | None:
        if value is not None and not ID_PATTERN.match(value):
            raise ValueError(f"register name {value!r} must be an identifier")
        return value


class Step(StepOptions):
    """A parsed step: options plus exactly one action (``action`` kind, ``args`` as written)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, populate_by_name=True)

    action: str
    args: Any = None
    step_id: str = ""
    section: StepSection = "steps"
    location: Location | None = Field(default=None, exclude=True)

    @property
    def display_name(self) -> str:
        return self.name or f"{self.action} ({self.step_id})"


class SecretVar(BaseModel):
    """`vars: {hf_token: {secret: true, from_env: HF_TOKEN}}` — never written or shown."""

    model_config = ConfigDict(extra="forbid")

    secret: Literal[True]
    value: Any = None
    from_env: str | None = None


def _var_name(name: str) -> str:
    if not ID_PATTERN.match(name):
        raise ValueError(f"variable name {name!r} must be an identifier")
    return name


class PlaybookHeader(BaseModel):
    """The top level of a playbook, steps still raw (each is parsed by the loader)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str | None = None
    hosts: str | list[str] | None = None
    # Names are checked per key so the error points at the bad name, not at `vars:`.
    vars: dict[Annotated[str, AfterValidator(_var_name)], Any] = {}
    hypotheses: list[Hypothesis] = []
    # Any, not dict: the loader reports a non-mapping step itself, with a clearer message.
    steps: list[Any] = Field(default_factory=list)
    always: list[Any] = Field(default_factory=list)


class Playbook(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    description: str | None = None
    hosts: str | list[str] | None = None
    vars: dict[str, Any] = {}
    secret_vars: dict[str, SecretVar] = {}
    hypotheses: list[Hypothesis] = []
    steps: list[Step] = []
    always: list[Step] = []
    path: str | None = None

    def all_steps(self) -> list[Step]:
        return [*self.steps, *self.always]

    def hypothesis(self, hid: str) -> Hypothesis | None:
        return next((h for h in self.hypotheses if h.id == hid), None)
