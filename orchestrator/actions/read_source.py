"""`read_source`: sed-style reads of an installed package's source on the host, many in one round trip.

```yaml
- read_source: {package: sglang, file: srt/speculative/eagle_worker.py, lines: "155,200"}
- read_source:
    package: sglang
    reads:
      - {id: worker_head, pattern: "get_embed_and_head\\(", context: 12}
      - {id: fc_skip, symbol: LlamaModel.forward, file: srt/models/llama_eagle3.py,
         expect: {regex: "hidden_states.shape\\[-1\\] != embeds.shape\\[-1\\]"}}
  register: src      # src.reads[i], src.by_id.fc_skip.expect.passed, src.passed, src.version
```
The package is located on the host WITHOUT importing it; symbol and pattern reads survive the file
moves between SGLang versions (eagle_worker.py is gone from 0.5.13 on), line numbers do not.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.actions.probe import run_probe_step

READ_KEYS = ("id", "file", "lines", "symbol", "pattern", "context", "max_matches", "max_lines", "expect")


class ReadSourceArgs(ActionArgs):
    package: str = "sglang"
    # one read inline ...
    id: str | None = None
    file: str | None = None
    lines: str | None = None
    symbol: str | None = None
    pattern: str | None = None
    context: int | None = Field(default=None, ge=0, le=200)
    max_matches: int | None = None
    max_lines: int | None = None
    expect: dict[str, str] | None = None
    # ... or many
    reads: list[dict[str, Any]] = Field(default_factory=list)
    sys_path: list[str] = Field(default_factory=list, description="extra import roots on the host")
    python: str | None = None
    fail_on_error: bool = Field(default=True, description="fail the step when a read errors (missing file...)")

    @model_validator(mode="after")
    def _reads(self) -> ReadSourceArgs:
        inline = any(getattr(self, k) is not None for k in ("file", "lines", "symbol", "pattern"))
        if inline and self.reads:
            raise ValueError("give one read inline (file/lines/symbol/pattern) or a list under 'reads', not both")
        if not inline and not self.reads:
            raise ValueError("nothing to read: give lines, symbol or pattern (or a 'reads' list)")
        return self

    def all_reads(self) -> list[dict[str, Any]]:
        if self.reads:
            return self.reads
        return [{k: getattr(self, k) for k in READ_KEYS if getattr(self, k) is not None}]


def render_read(read: dict[str, Any], version: str | None) -> str:
    """Human form: a header with file, range and version, then numbered lines (like `sed -n` + `cat -n`)."""
    if read.get("error"):
        err = read["error"]
        extra = ""
        if err.get("successors"):
            extra = f" — likely successors: {', '.join(err['successors'])}"
        elif err.get("similar"):
            extra = f" — similar: {', '.join(err['similar'][:5])}"
        return f"✗ {read.get('file') or read.get('symbol') or read.get('pattern')}: {err.get('message')}{extra}\n"
    spans = read.get("matches") or [read]
    out = []
    for span in spans:
        label = span.get("symbol") or read.get("symbol") or read.get("pattern") or read.get("lines_spec") or ""
        out.append(f"── {span.get('file')}:{span.get('start')}-{span.get('end')}  [{label}]  (version {version})\n")
        marks = set(span.get("match_lines") or [])
        for number, text in span.get("lines", []):
            out.append(f"{'>' if number in marks else ' '}{number:>6}  {text}\n")
    if read.get("expect") is not None:
        out.append(f"   expect: {'passed' if read['expect'].get('passed') else 'FAILED'}\n")
    if not spans:
        out.append(f"   (no match for {read.get('pattern')!r})\n")
    return "".join(out)


class ReadSourceAction(Action[ReadSourceArgs]):
    kind = "read_source"
    Args = ReadSourceArgs
    summary = "Read source ranges of an installed package (line range, /regex/ range, symbol or grep) on the host."

    async def run(self, args: ReadSourceArgs, ctx: ActionContext) -> dict[str, Any]:
        probe_args = {"package": args.package, "reads": args.all_reads(), "sys_path": args.sys_path}
        result = await run_probe_step(ctx, "sglang_source", probe_args, python=args.python)
        reads = result.get("reads", [])
        for read in reads:
            ctx.output(render_read(read, result.get("version")), "stdout")
        errors = [r for r in reads if r.get("error")]
        expects = [r["expect"].get("passed") for r in reads if r.get("expect") is not None]
        result["by_id"] = {r["id"]: r for r in reads if r.get("id")}
        result["passed"] = all(expects) if expects else not errors
        result["found"] = not errors and all(r.get("lines") or r.get("matches") for r in reads)
        result["text"] = "".join(render_read(r, result.get("version")) for r in reads)
        if len(reads) == 1:
            result["read"] = reads[0]
        if errors and args.fail_on_error:
            first = errors[0]["error"]
            hint = f" (likely successors: {', '.join(first['successors'])})" if first.get("successors") else ""
            raise StepFailed(f"{len(errors)} read(s) failed: {first.get('message')}{hint}", result)
        return result
