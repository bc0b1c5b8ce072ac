"""The terminal going away never ends an investigation (issue 41).

A terminal that closes (its window shut, the SSH connection dropped) sends SIGHUP, whose default action ends the
process at once: the servers it started are left running and the session log stops mid-step. Afterwards its
descriptors read end-of-file and write EIO. So a front end that runs a session treats SIGHUP as "nobody is watching
any more": the descriptors that were the terminal are pointed elsewhere (output to /dev/null, input to a pipe that
never has data, so a reader waits instead of spinning on end-of-file), and the session goes on to its end: the log
and the report are written and the servers stopped as usual. ``orchestrator run`` under ``nohup`` or with its
output in a file is unchanged: only descriptors that were a terminal are touched.

Public API: ``Terminal`` (``Terminal().detach()`` from a SIGHUP handler; ``release_input()`` before exiting).
"""

from __future__ import annotations

import os

#: stdin, stdout, stderr
STANDARD_FDS = (0, 1, 2)


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


class Terminal:
    """The standard descriptors that are a terminal, noted at start (a hung-up terminal may no longer say so)."""

    def __init__(self) -> None:
        self.fds = [fd for fd in STANDARD_FDS if _is_terminal(fd)]
        self.lost = False
        self._idle_writer: int | None = None  # the write end of stdin's pipe, kept open so it never reads EOF

    def detach(self) -> None:
        """Point the terminal's descriptors away from it (once): writes go to /dev/null, reads wait on a pipe."""
        if self.lost:
            return
        self.lost = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in self.fds:
                if fd == 0:
                    reader, self._idle_writer = os.pipe()
                    os.dup2(reader, 0)
                    os.close(reader)
                else:
                    os.dup2(devnull, fd)
        finally:
            os.close(devnull)

    def release_input(self) -> None:
        """End stdin's idle pipe (end-of-file): a reader blocked on it (Textual's input thread, which may have
        been inside ``read`` when the terminal went) returns, so the app can join it and exit."""
        if self._idle_writer is not None:
            os.close(self._idle_writer)
            self._idle_writer = None
