"""One step on one host: render and validate the arguments, run the action (with its timeout), and apply
``until``/``retries``/``delay``. Every failure becomes a HostOutcome; only an outside cancel propagates."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator.actions import ActionContext, StepFailed
from orchestrator.errors import HostUnreachable, OrchestratorError, TemplateError
from orchestrator.events import HostOutcome, StepStatus
from orchestrator.playbook.models import Step
from orchestrator.templating import evaluate

if TYPE_CHECKING:
    from orchestrator.runner.playbook_runner import PlaybookRunner

CONTROLLER = "controller"  # the host name for steps that run once here (`set`, notes)


async def run_on_host(runner: PlaybookRunner, step: Step, action_cls: Any, host: str,
                      step_hosts: list[str] | None = None) -> tuple[HostOutcome, int]:
    max_attempts = 1 + (step.retries if step.retries is not None else (3 if step.until else 0))
    attempt = 0
    outcome = HostOutcome(host=host, status="failed")
    while attempt < max_attempts:
        attempt += 1
        outcome = await attempt_once(runner, step, action_cls, host, step_hosts)
        runner.flush_output(step.step_id, host)
        if outcome.status in ("cancelled", "unreachable"):
            break
        if step.until:
            variables = runner.vars.for_host(host if host != CONTROLLER else None)
            bound = {**outcome.result, "status": outcome.status, "failed": outcome.status != "ok"}
            variables["result"] = bound
            if step.register_as:
                variables[step.register_as] = bound
            try:
                done = bool(evaluate(step.until, variables))
            except TemplateError as exc:
                outcome = HostOutcome(host=host, status="failed", result=outcome.result,
                                      error=f"until: {exc.message}", duration=outcome.duration)
                break
            if done:
                break
            if attempt >= max_attempts:
                outcome = HostOutcome(host=host, status="failed", result=outcome.result, duration=outcome.duration,
                                      error=f"until condition still false after {attempt} attempts")
                break
        elif outcome.status == "ok":
            break
        if attempt < max_attempts:
            runner.emit_output(step.step_id, host, "info", f"retrying ({attempt}/{max_attempts - 1}) in {step.delay:g}s\n")
            await asyncio.sleep(step.delay)
    return outcome, attempt


async def _peer(runner: PlaybookRunner, name: str) -> tuple[Any, Any]:
    """Another host of the session, connected (a multi-node server's worker ranks). Raises HostUnreachable."""
    if name in runner.unreachable:
        raise HostUnreachable(f"{name}: {runner.unreachable[name]}")
    return runner.inventory.host(name), await runner.transport(name)


async def attempt_once(runner: PlaybookRunner, step: Step, action_cls: Any, host: str,
                       step_hosts: list[str] | None = None) -> HostOutcome:
    started = time.monotonic()
    on_controller = host == CONTROLLER
    variables = runner.vars.for_host(None if on_controller else host)

    def result(status: StepStatus, res: dict[str, Any] | None = None, error: str | None = None) -> HostOutcome:
        return HostOutcome(host=host, status=status, result=res or {}, error=error,
                           duration=round(time.monotonic() - started, 4))

    try:
        rendered = action_cls.render_step_args(step.args, variables)
        runner.learn_secret_env(rendered, step.action)
        args = action_cls.Args.model_validate(rendered)
    except TemplateError as exc:
        return result("failed", error=f"{step.location}: {exc.message}")
    except ValidationError as exc:
        from orchestrator.playbook.yamlio import describe_pydantic_error

        problems = "; ".join(describe_pydantic_error(e) for e in exc.errors())
        return result("failed", error=f"{step.location}: invalid arguments after templating: {problems}")

    transport = None
    if not on_controller:
        try:
            transport = await runner.transport(host)
        except HostUnreachable as exc:
            runner.unreachable[host] = exc.message
            return result("unreachable", error=exc.message)
    ctx = ActionContext(
        step_id=step.step_id, step_name=step.display_name, host=host,
        host_spec=None if on_controller else runner.inventory.host(host), transport=transport,
        variables=variables if not on_controller else runner.vars.shared, session_id=runner.options.session_id,
        session_dir=runner.options.session_dir,
        emit_output=lambda stream, text: runner.emit_output(step.step_id, host, stream, text),
        services=runner.services, emit=runner.emit, timeout=step.timeout,
        step_hosts=list(step_hosts or [host]), peer=lambda name: _peer(runner, name),
    )
    action = action_cls()
    try:
        if step.timeout:
            res = await asyncio.wait_for(action.run(args, ctx), step.timeout)
        else:
            res = await action.run(args, ctx)
        return result("ok", res)
    except StepFailed as exc:
        return result(exc.status, exc.result, exc.message)
    except asyncio.TimeoutError:
        return result("timeout", error=f"timed out after {step.timeout:g}s")
    except asyncio.CancelledError:
        if runner.cancelled:
            return result("cancelled", error="cancelled")
        raise
    except HostUnreachable as exc:
        runner.unreachable[host] = exc.message
        return result("unreachable", error=exc.message)
    except OrchestratorError as exc:
        return result("failed", error=exc.message)
    except Exception as exc:  # an action bug: record it, keep the session going to `always:`
        return result("failed", error=f"internal error in {step.action}: {type(exc).__name__}: {exc}")
