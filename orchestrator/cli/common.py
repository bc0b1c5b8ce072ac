"""Shared CLI plumbing: error panels, inventory resolution, extra vars, running the session with signals."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer

P = ParamSpec("P")
R = TypeVar("R")


def report_error(exc: Any) -> None:
    """A user-facing error: a Rich panel on stderr (plain lines for each located playbook error)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    console = Console(stderr=True, highlight=False)
    located = [e.message for e in getattr(exc, "errors", [])] or ([exc.message] if getattr(exc, "location", None) else [])
    if located:
        # One unwrapped `file:line:col: message` line each, so editors and CI can jump to it.
        console.print(f"[bold red]{escape(getattr(exc, 'title', 'Error'))}[/]")
        for line in located:
            console.print(escape(line), style="red", soft_wrap=True)
        return
    console.print(Panel(escape(exc.message), title=getattr(exc, "title", "Error"), border_style="red", expand=False))


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn OrchestratorError into a panel + its exit code; never a traceback for a user mistake."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from orchestrator.errors import OrchestratorError

        try:
            return func(*args, **kwargs)
        except OrchestratorError as exc:
            report_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


def parse_extra_vars(items: list[str] | None) -> dict[str, Any]:
    """``-e key=value`` (value parsed as a YAML scalar) or ``-e @vars.yaml``."""
    from orchestrator.errors import UserInputError
    from orchestrator.playbook.yamlio import load_yaml, load_yaml_text

    result: dict[str, Any] = {}
    for item in items or []:
        if item.startswith("@"):
            data, _ = load_yaml(Path(item[1:]))
            if not isinstance(data, dict):
                raise UserInputError(f"{item[1:]}: extra vars file must be a mapping")
            result.update(data)
            continue
        if "=" not in item:
            raise UserInputError(f"-e {item!r}: expected KEY=VALUE or @FILE")
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key.isidentifier():
            raise UserInputError(f"-e {item!r}: {key!r} is not a valid variable name")
        value, _ = load_yaml_text(raw, "-e") if raw.strip() else ("", None)
        result[key] = value if value is not None else raw
    return result


def parse_host_ref(ref: str) -> dict[str, Any]:
    """``[user@]address[:port]`` -> HostSpec fields."""
    user = None
    if "@" in ref:
        user, _, ref = ref.partition("@")
    port = None
    if ref.count(":") == 1:
        ref, _, port_text = ref.partition(":")
        if not port_text.isdigit():
            from orchestrator.errors import UserInputError

            raise UserInputError(f"--host: port {port_text!r} is not a number")
        port = int(port_text)
    return {"address": ref, "user": user, "port": port}


def inventory_var_names(inv: object, extra: dict[str, Any]) -> set[str]:
    """Every variable name the inventory and ``-e`` define, so the playbook check knows them."""
    names = set(extra)
    names.update(getattr(inv, "vars", {}) or {})
    for group in getattr(inv, "groups", {}).values():
        names.update(group.vars)
    for spec in getattr(inv, "hosts", {}).values():
        names.update(spec.vars)
    for entry in getattr(inv, "slurm", {}).values():  # its nodes' vars, once the session is granted them
        names.update(entry.vars)
        names.update(("slurm_job", "slurm_node", "slurm_node_index", "slurm_nodes", "slurm_node_addr"))
    return names


def resolve_inventory(inventory: Path | None, host: str | None) -> Any:
    """The inventory for a run: the file given, else the embedded lab's; ``--host`` adds/targets one host."""
    from orchestrator.inventory import LOCAL_NAMES, Inventory, load_inventory

    if inventory is not None:
        inv = load_inventory(inventory)
    else:
        inv = default_inventory()
    if host:
        name = host
        base = host.partition("[")[0]  # `cluster[0]`: one host of a group or Slurm entry
        known = base in inv.hosts or base in inv.groups or base in getattr(inv, "slurm", {})
        if not known and host not in LOCAL_NAMES:
            inv = inv.with_host(host, **{k: v for k, v in parse_host_ref(host).items() if v is not None})
        inv = inv.model_copy(update={"default_hosts": name})
    return inv if inv is not None else Inventory()


def default_inventory() -> Any:
    """With no ``-i``: the embedded lab (a first-party package: if it cannot be imported, that is a bug to
    see, not a reason to fall back to localhost)."""
    from orchestrator.lab.building.inventory import lab_inventory

    return lab_inventory()


def is_embedded_lab(inv: Any) -> bool:
    """The inventory is the embedded lab's (``lab_inventory``: no ``-i``), not a file the user wrote."""
    return str(getattr(inv, "source", "")) == "<lab>"


def ensure_lab_for(inv: Any, hosts: list[str] | str | None) -> Any:
    """The inventory to run with: ``inv`` itself, or, when a run targets the embedded lab and it is missing, the
    lab's inventory made anew once the lab is built (with a progress display). The lab built is the one the
    inventory's lab host records (its engine and scenario), whatever the environment says now."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.lab.building.inventory import LabChoice, ensure_lab, lab_is_built, with_built_lab

    try:
        names = inv.resolve(hosts)
    except OrchestratorError:  # a bad host pattern: the runner reports it, located, when the run starts
        return inv
    if "lab" not in names or "lab" not in getattr(inv, "hosts", {}):
        return inv
    if not is_embedded_lab(inv):  # an inventory file's host named lab is the user's (a real vLLM host, say)
        return inv
    choice = LabChoice.of_host_vars(inv.hosts["lab"].vars)
    if lab_is_built(choice.scenario, engine=choice.engine):
        return inv
    from rich.console import Console

    from orchestrator.cli.progress import build_progress
    from orchestrator.lab.building.build import deferred_calibration, is_complete, lab_dir

    if choice.engine == "sglang" and is_complete(lab_dir() / "target") and deferred_calibration(choice.scenario):
        headline = (f"The lab calibrates what scenario {choice.scenario} needs on this CPU (once, 10 to 20 s; "
                    "`orchestrator lab status` says which scenarios are calibrated here).")
    else:
        headline = ("The lab is not set up yet: installing its shipped models and confirming them on this CPU "
                    "(seconds, once; a CPU that computes them otherwise calibrates what this run needs, 10 to 20 s "
                    "more; `orchestrator lab status` says where they came from).")
    Console(stderr=True).print(f"[bold]{headline}[/]")
    progress, report = build_progress()  # Rich bars on a terminal, else a plain line per stage and 10 %
    with progress:
        ensure_lab(choice.scenario, progress=report, engine=choice.engine)
    return with_built_lab(inv)
