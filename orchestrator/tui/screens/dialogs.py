"""Small modals: error, quit-confirm, note, verdict. Each dismisses with its answer (None = cancelled)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, TextArea

from orchestrator.events import HYPOTHESIS_STATES


class Dialog(ModalScreen[Any]):
    """Common frame: a titled box, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]
    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > Vertical { width: 70; max-width: 95%; height: auto; max-height: 95%; border: thick $primary;
                        background: $surface; padding: 0 1; }
    Dialog Horizontal.buttons { height: auto; align-horizontal: right; }
    Dialog Label.error { color: $error; }
    Dialog Input, Dialog Select { margin-bottom: 0; }
    """
    TITLE_TEXT = ""

    def on_mount(self) -> None:
        if self.app.is_headless:  # a blinking cursor keeps a headless app from ever being idle (tests, bench)
            for widget in self.query("Input, TextArea"):
                if isinstance(widget, (Input, TextArea)):
                    widget.cursor_blink = False

    def action_cancel(self) -> None:
        self.dismiss(None)

    def buttons(self, ok: str = "OK") -> Horizontal:
        return Horizontal(Button(ok, variant="primary", id="ok"), Button("Cancel", id="cancel"), classes="buttons")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.submit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def submit(self) -> None:
        self.dismiss(True)

    def complain(self, text: str) -> None:
        self.query_one("#problem", Label).update(text)


class ErrorDialog(Dialog):
    """The one place failures are shown (session commands, workers)."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__()
        self.title_text, self.message = title, message

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self.title_text
            yield Static(self.message, id="error-message", markup=False)
            yield Horizontal(Button("Close", variant="error", id="ok"), classes="buttons")

    def submit(self) -> None:
        self.dismiss(None)


class QuitDialog(Dialog):
    """Quitting while servers run: stop them (the session's finalizers do) or stay."""

    def __init__(self, servers: list[str]) -> None:
        super().__init__()
        self.servers = servers

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Servers are running"
            yield Static(f"{len(self.servers)} server(s) still running: {', '.join(self.servers)}.\n"
                         "Quitting ends the session and stops them.", markup=False)
            yield Horizontal(Button("Stop servers and quit", variant="error", id="ok"),
                             Button("Stay", id="cancel"), classes="buttons")

    def submit(self) -> None:
        self.dismiss(True)


class NoteDialog(Dialog):
    def __init__(self, hypotheses: list[str], step_id: str | None) -> None:
        super().__init__()
        self.hypotheses, self.step_id = hypotheses, step_id

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Add a note"
            yield Input(placeholder="what you saw or think", id="text")
            yield Select([(h, h) for h in self.hypotheses], prompt="about a hypothesis (optional)", id="hypothesis")
            yield Label(f"attached to step {self.step_id}" if self.step_id else "", id="where")
            yield Label("", id="problem", classes="error")
            yield self.buttons("Add")

    def submit(self) -> None:
        text = self.query_one("#text", Input).value.strip()
        if not text:
            self.complain("a note needs some text")
            return
        hyp = self.query_one("#hypothesis", Select).value
        self.dismiss({"text": text, "hypothesis_id": hyp if isinstance(hyp, str) else None, "step_id": self.step_id})


class VerdictDialog(Dialog):
    def __init__(self, hypotheses: list[str], selected: str | None) -> None:
        super().__init__()
        self.hypotheses, self.selected = hypotheses, selected

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Set a hypothesis verdict"
            options = [(h, h) for h in self.hypotheses]
            select: Select[str] = Select(options, prompt="hypothesis", id="hypothesis")
            if self.selected in self.hypotheses:
                select.value = self.selected
            yield select
            yield Select([(s, s) for s in HYPOTHESIS_STATES], prompt="state", id="state")
            yield Input(placeholder="because: the observation that decides it", id="because")
            yield Label("", id="problem", classes="error")
            yield self.buttons("Record")

    def submit(self) -> None:
        hyp = self.query_one("#hypothesis", Select).value
        state = self.query_one("#state", Select).value
        because = self.query_one("#because", Input).value.strip()
        if not isinstance(hyp, str) or not isinstance(state, str):
            self.complain("choose a hypothesis and a state")
            return
        if not because:
            self.complain("say why: the observation that decides it")
            return
        self.dismiss({"hypothesis_id": hyp, "state": state, "because": because})
