"""A failure the session survives (here: a sink that raises) is shown in the TUI as it happens, not only
written to a stderr that Textual owns while it runs."""

from __future__ import annotations

import errno
from typing import Any

from tests.tui.conftest import wait_for


class FullDiskSink:
    def handle(self, event: Any) -> None:
        if event.type == "step_finished":
            raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        pass


async def test_a_raising_sink_is_notified_in_the_app(live) -> None:
    s = live(start_mode="running")
    s.engine.sinks.append(FullDiskSink())
    shown: list[str] = []
    notify = s.app.notify

    def recording_notify(message: str, **kwargs: Any) -> None:
        shown.append(message)
        notify(message, **kwargs)

    s.app.notify = recording_notify  # type: ignore[method-assign]
    async with s.app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: s.controller.hold.holding)
        assert any("event sink FullDiskSink failed" in m and "No space left" in m for m in shown), shown
        await pilot.press("q")
        await wait_for(pilot, lambda: s.controller.finished)
    assert s.controller.outcome is not None and s.controller.outcome.incomplete
