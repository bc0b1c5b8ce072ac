"""`shell`: run a command on each target host.

```yaml
- name: Where is sglang?
  shell: {command: "pip show sglang | head -2", env: {PYTHONUNBUFFERED: 1}, cwd: /tmp, expect_exit: [0, 1]}
- shell: "nvidia-smi"               # shorthand
- shell: {argv: [ls, -l, "{{ path }}"]}   # no shell at all
```
Every ``{{ }}`` inside ``command`` is shell-quoted when rendered, so variables arrive as literal text.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.redact import is_secret_name


class ShellArgs(ActionArgs):
    command: str | None = Field(default=None, description="shell script, run by bash -c")
    argv: list[str] | None = Field(default=None, description="program and arguments, run without a shell")
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    cwd: str | None = None
    stdin: str | None = None
    expect_exit: list[int] = Field(default_factory=lambda: [0], description="exit codes that count as success")

    @model_validator(mode="after")
    def _one_form(self) -> ShellArgs:
        if (self.command is None) == (self.argv is None):
            raise ValueError("give exactly one of 'command' or 'argv'")
        if self.argv is not None and not self.argv:
            raise ValueError("'argv' must not be empty")
        for name in self.env:
            if not name.isidentifier():
                raise ValueError(f"invalid environment variable name {name!r}")
        return self


class ShellAction(Action[ShellArgs]):
    kind = "shell"
    Args = ShellArgs
    shorthand = "command"
    shell_fields = ("command",)
    summary = "Run a shell command (or an argv) on each host; registers rc, stdout, stderr."

    async def run(self, args: ShellArgs, ctx: ActionContext) -> dict[str, Any]:
        transport = ctx.require_transport()
        env = {k: (("true" if v else "false") if isinstance(v, bool) else str(v)) for k, v in args.env.items()}
        command = args.command if args.command is not None else args.argv
        assert command is not None
        result = await transport.run(command, env=env, cwd=args.cwd, stdin=args.stdin, on_output=ctx.emit_output)
        registered = {
            "rc": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "stdout_lines": result.stdout.splitlines(),
            "duration": round(result.duration, 4),
            "truncated": result.truncated,
            "secret_env": sorted(n for n in env if is_secret_name(n)),
        }
        if result.exit_code not in args.expect_exit:
            tail = (result.stderr.strip() or result.stdout.strip())[-500:]
            expected = ", ".join(map(str, args.expect_exit))
            raise StepFailed(f"exit code {result.exit_code} (expected {expected}){': ' + tail if tail else ''}", registered)
        return registered
