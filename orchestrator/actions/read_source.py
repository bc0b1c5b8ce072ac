"""`read_source`: sed-style reads of an installed package's source on the host, many in one round trip.

```yaml
- read_source: {package: sglang, file: srt/speculative/eagle_worker.py, lines: "155,200"}
- read_source:
    package: sglang
    reads:
      - {id: worker_head, under: srt/speculative, symbol: EagleDraftWorker.init_lm_head}
      - {id: fc_skip, symbol: LlamaModel.forward, file: srt/models/llama_eagle3.py,
         expect: {regex: "hidden_states.shape\\[-1\\] != embeds.shape\\[-1\\]"}}
      - id: topk_rule                      # ordered alternatives: the first that finds something wins
        pattern: "adjusted to speculative_num_steps \\+ 1"
        any_of: [{under: srt/arg_groups}, {file: srt/server_args.py}]
  register: src   # src.reads[i], src.by_id.fc_skip.expect.passed, src.by_id.topk_rule.alternative, src.passed,
                  # src.found, src.not_found, src.version
```
The package is located on the host WITHOUT importing it; symbol and pattern reads survive the file
moves between SGLang versions (eagle_worker.py is gone from 0.5.13 on), line numbers do not. A read that finds
nothing in the host's version is recorded (``found: false``, ``not_found.message`` "not found in sglang 0.5.23:
...") and the step goes on: that is evidence about the version. Only a broken read (bad regex, bad address) fails it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.actions.probe import run_probe_step
from orchestrator.probes.models import Expect, SourceAlternative, SourceRead

READ_KEYS = ("id", "file", "under", "lines", "symbol", "pattern", "context", "max_matches", "max_lines", "expect",
             "any_of")


class ReadSourceArgs(ActionArgs):
    package: str = "sglang"
    # one read inline ...
    id: str | None = None
    file: str | None = Field(default=None, description="file relative to the package root")
    under: str | None = Field(default=None, description="directory (relative to the package root) to search in")
    lines: str | None = Field(default=None, description="sed-style range: 155,200 | 155,+45 | /re/,/re/ | $")
    symbol: str | None = Field(default=None, description="class or function, e.g. EagleDraftWorker.init_lm_head")
    pattern: str | None = Field(default=None, description="regex, grep-style")
    context: int | None = Field(default=None, ge=0, le=200)
    max_matches: int | None = Field(default=None, ge=1, le=10000)
    max_lines: int | None = Field(default=None, ge=1, le=200000)
    expect: Expect | None = None
    any_of: list[SourceAlternative] | None = Field(
        default=None, min_length=1,
        description="ordered alternatives (newest layout first): the first that finds something is the result")
    # ... or many
    reads: list[SourceRead] = Field(default_factory=list)
    sys_path: list[str] = Field(default_factory=list, description="extra import roots on the host")
    python: str | None = None
    fail_on_error: bool = Field(default=True, description="fail the step when a read is broken (bad regex, bad "
                                "address); a read that finds nothing never fails it")

    @model_validator(mode="after")
    def _reads(self) -> ReadSourceArgs:
        inline = {k: getattr(self, k) for k in READ_KEYS if getattr(self, k) is not None}
        if inline and self.reads:
            raise ValueError("give one read inline (file/lines/symbol/pattern/any_of) or a list under 'reads', not both")
        if not inline and not self.reads:
            raise ValueError("nothing to read: give lines, symbol or pattern (or a 'reads' list)")
        if inline:
            self._inline_read()  # the same checks as a listed read (exactly one mode, 'lines' needs a file, ...)
        return self

    def _inline_read(self) -> SourceRead:
        return SourceRead.model_validate(self.model_dump(include=set(READ_KEYS), exclude_none=True))

    def all_reads(self) -> list[dict[str, Any]]:
        if self.reads:
            return [r.to_probe() for r in self.reads]
        return [self._inline_read().to_probe()]


def _label(read: dict[str, Any]) -> str:
    return str(read.get("id") or read.get("file") or read.get("symbol") or read.get("pattern") or read.get("index"))


def render_read(read: dict[str, Any], version: str | None) -> str:
    """Human form: a header with file, range and version, then numbered lines (like `sed -n` + `cat -n`)."""
    if read.get("error"):
        err = read["error"]
        return f"✗ {_label(read)}: {err.get('message')}\n"
    if read.get("not_found"):
        miss = read["not_found"]
        extra = ""
        if miss.get("successors"):
            extra = f" — likely successors: {', '.join(miss['successors'])}"
        elif miss.get("similar"):
            extra = f" — similar: {', '.join(miss['similar'][:5])}"
        return f"✗ {_label(read)}: {miss.get('message')}{extra}\n"
    spans = read.get("matches") or [read]
    out = []
    if read.get("alternative") is not None:
        out.append(f"   ({_label(read)}: alternative {read['alternative'] + 1} found it; "
                   f"{len(read.get('tried') or [])} before it found nothing)\n")
    for span in spans:
        label = span.get("symbol") or read.get("symbol") or read.get("pattern") or read.get("lines_spec") or ""
        out.append(f"── {span.get('file')}:{span.get('start')}-{span.get('end')}  [{label}]  (version {version})\n")
        marks = set(span.get("match_lines") or [])
        for number, text in span.get("lines", []):
            out.append(f"{'>' if number in marks else ' '}{number:>6}  {text}\n")
    if read.get("expect") is not None:
        out.append(f"   expect: {'passed' if read['expect'].get('passed') else 'FAILED'}\n")
    return "".join(out)


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """The probe's result plus what playbook rules read: ``by_id``, ``passed``, ``found``, ``not_found``, ``text``
    (and ``read`` when there is one read)."""
    reads = result.setdefault("reads", [])
    errors = [r for r in reads if r.get("error")]
    expects = [r["expect"].get("passed") for r in reads if r.get("expect") is not None]
    result["by_id"] = {r["id"]: r for r in reads if r.get("id")}
    result["passed"] = all(expects) if expects else not errors
    result["found"] = bool(reads) and all(r.get("found") for r in reads)
    # one line per read that found nothing, ready for an evidence rule's `because`
    result["not_found"] = [f"{_label(r)}: {r['not_found'].get('message')}" for r in reads if r.get("not_found")]
    result["text"] = "".join(render_read(r, result.get("version")) for r in reads)
    if len(reads) == 1:
        result["read"] = reads[0]
    return result


class ReadSourceAction(Action[ReadSourceArgs]):
    kind = "read_source"
    Args = ReadSourceArgs
    summary = "Read source ranges of an installed package (line range, /regex/ range, symbol or grep) on the host."

    async def run(self, args: ReadSourceArgs, ctx: ActionContext) -> dict[str, Any]:
        probe_args = {"package": args.package, "reads": args.all_reads(), "sys_path": args.sys_path}
        result = await run_probe_step(ctx, "sglang_source", probe_args, python=args.python)
        result = summarize(result)
        for read in result["reads"]:
            ctx.output(render_read(read, result.get("version")), "stdout")
        errors = [r for r in result["reads"] if r.get("error")]
        if errors and args.fail_on_error:
            raise StepFailed(f"{len(errors)} read(s) failed: {errors[0]['error'].get('message')}", result)
        return result
