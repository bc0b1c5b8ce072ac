"""The core never loads Textual: importing the engine, the session runner and the CLI app in a fresh
interpreter leaves ``textual`` out of ``sys.modules``."""

import subprocess
import sys


def test_core_does_not_import_textual() -> None:
    code = ("import sys, orchestrator.runner, orchestrator.session.recording, orchestrator.cli.tui; "
            "print('textual' in sys.modules, 'orchestrator.tui.app' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
