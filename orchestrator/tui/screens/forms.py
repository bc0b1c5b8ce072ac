"""Modals that build ad-hoc steps: edit a server step's flags, read a source range, run a command."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Label, TextArea

from orchestrator.tui.screens.dialogs import Dialog


def parse_flags(text: str) -> dict[str, Any]:
    """``flag: value`` lines (YAML) -> a mapping; raises ValueError with the line at fault."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if not text.strip():
        return {}
    try:
        data = YAML(typ="safe").load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ValueError(f"{where}{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ValueError("write one `flag: value` per line")
    return {str(k).lstrip("-"): v for k, v in data.items()}


def format_flags(flags: dict[str, Any]) -> str:
    from io import StringIO

    from ruamel.yaml import YAML

    if not flags:
        return ""
    out = StringIO()
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.dump(dict(flags), out)
    return out.getvalue()


class FlagEditor(Dialog):
    """The candidate flags of a server step; OK reruns it with them (as an ad-hoc step)."""

    def __init__(self, step_id: str, step_name: str, flags: dict[str, Any]) -> None:
        super().__init__()
        self.step_id, self.step_name, self.flags = step_id, step_name, flags

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Flags for {self.step_id}: {self.step_name}"[:60]
            yield Label("one `flag: value` per line; OK reruns the step with these flags")
            yield TextArea(format_flags(self.flags), id="flags", language=None)
            yield Label("", id="problem", classes="error")
            yield self.buttons("Rerun")

    def submit(self) -> None:
        try:
            flags = parse_flags(self.query_one("#flags", TextArea).text)
        except ValueError as exc:
            self.complain(str(exc))
            return
        self.dismiss({"step_id": self.step_id, "flags": flags})


class ReadSourceForm(Dialog):
    def __init__(self, hosts: list[str]) -> None:
        super().__init__()
        self.hosts = hosts

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Read installed source"
            yield Input(value=self.hosts[0] if self.hosts else "", placeholder="host", id="host")
            yield Input(value="sglang", placeholder="package", id="package")
            yield Input(placeholder="file, e.g. srt/speculative/eagle_worker.py (optional)", id="file")
            yield Input(placeholder="lines 155,200 or /pattern/  — or leave empty and give a symbol", id="address")
            yield Input(placeholder="symbol, e.g. EAGLEWorker.__init__ (optional)", id="symbol")
            yield Label("", id="problem", classes="error")
            yield self.buttons("Read")

    def submit(self) -> None:
        values = {name: self.query_one(f"#{name}", Input).value.strip()
                  for name in ("host", "package", "file", "address", "symbol")}
        if not values["package"]:
            self.complain("give a package (e.g. sglang)")
            return
        if not (values["address"] or values["symbol"]):
            self.complain("give a line range, a /pattern/ or a symbol")
            return
        self.dismiss({k: v or None for k, v in values.items()})


class CommandForm(Dialog):
    def __init__(self, hosts: list[str]) -> None:
        super().__init__()
        self.hosts = hosts

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Run a command on a host"
            yield Input(value=self.hosts[0] if self.hosts else "", placeholder="host", id="host")
            yield Input(placeholder="command, e.g. nvidia-smi", id="command")
            yield Label("", id="problem", classes="error")
            yield self.buttons("Run")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#command", Input).focus()

    def submit(self) -> None:
        command = self.query_one("#command", Input).value.strip()
        if not command:
            self.complain("the command is empty")
            return
        self.dismiss({"host": self.query_one("#host", Input).value.strip() or None, "command": command})
