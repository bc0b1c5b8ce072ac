"""The command palette: every control and ad-hoc action, one provider."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (label, app action, help) — live-session commands; the replay offers only what reads.
LIVE_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Run all", "run_all", "let every remaining step run"),
    ("Next step", "next_step", "run one step, then pause"),
    ("Pause", "pause", "hold before the next step"),
    ("Skip next step", "skip", "skip the step waiting at the gate"),
    ("Rerun selected step", "rerun", "run the selected step again (recorded as xN)"),
    ("Edit server flags and rerun", "edit_flags", "change the candidate flags of a server step"),
    ("Cancel running step", "cancel", "cancel the running step; always: still runs"),
    ("Read source range", "read_source", "sed-style read of installed source on a host"),
    ("Run command on host", "run_command", "an ad-hoc shell command, recorded"),
    ("Add note", "note", "a note in the session log"),
    ("Set hypothesis verdict", "verdict", "a manual verdict with its observation"),
    ("Show output", "tab('output')", "the selected step's output"),
    ("Show source", "tab('source')", "the last read_source result of the selected step"),
    ("Show hypothesis history", "tab('history')", "evidence of the selected hypothesis"),
    ("Quit", "quit_session", "end the session (asks when servers run)"),
)
REPLAY_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("Show output", "tab('output')", "the selected step's output"),
    ("Show source", "tab('source')", "the selected step's source read"),
    ("Show hypothesis history", "tab('history')", "evidence of the selected hypothesis"),
    ("Quit", "quit_session", "leave the replay"),
)


class OrchestratorCommands(Provider):
    def _commands(self) -> tuple[tuple[str, str, str], ...]:
        return REPLAY_COMMANDS if getattr(self.app, "replay", None) is not None else LIVE_COMMANDS

    async def discover(self) -> Hits:
        for label, action, help_text in self._commands():
            yield DiscoveryHit(label, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for label, action, help_text in self._commands():
            score = matcher.match(label)
            if score > 0:
                yield Hit(score, matcher.highlight(label), partial(self.app.run_action, action), help=help_text)
