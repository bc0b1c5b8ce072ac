"""The suite's own hygiene (issue 28), checked statically so it does not come back:

- no fixed sleep used as a wait: a test waits for the state itself (tests/waiting.py polls a condition under a
  deadline). A sleep is allowed only where it is the subject (a delay injected, a kill at a chosen moment) or the
  pause of a poll that has its own deadline, each listed below with its reason;
- no skip outside tests/realparts.py: a test whose real part is missing goes through ``realparts`` so that under CI
  it fails instead of skipping (a ``pytest.skip`` in an ``except`` bypassed that).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: (file under tests/, the call's source line, stripped) -> why this sleep is not a wait for a state
ALLOWED_SLEEPS = {
    ("waiting.py", "time.sleep(interval)"): "the poll's pause, under the caller's deadline",
    ("waiting.py", "await asyncio.sleep(interval)"): "the poll's pause, under the caller's deadline",
    ("core/test_local_transport.py", "await asyncio.sleep(0.5)  # the slowness is the subject: a delay injected, not "
                                     "a wait"): "the subject: asyncio connecting pipes late",
    ("tcp_delay_proxy.py", "await asyncio.sleep(wait)"): "the subject: the proxy's injected latency",
    ("reliability/link_cut.py", "await asyncio.sleep(trial.cut_after)"): "the subject: the link cut at a chosen moment",
    ("reliability/crash.py", "time.sleep(delay)"): "the subject: the SIGKILL at a random moment of the run",
    ("reliability/crash.py", "time.sleep(0.2)"): "poll of the first listener, under its deadline (a bench helper)",
    ("reliability/crash.py", "time.sleep(0.05)"): "poll of processes and ports going, under a 3 s deadline",
    ("slurm_cluster.py", "time.sleep(0.1)"): "poll of an idle cluster, under wait_idle's deadline",
    ("slurm_cluster.py", "time.sleep(0.05)"): "poll of daemons starting or stopping, under a deadline",
    ("sshd_fixture.py", "time.sleep(0.02)"): "poll of sshd listening, under a 10 s deadline",
    ("netns.py", "time.sleep(0.05)"): "poll of the link's carrier, under a 10 s deadline",
}
SKIPS = {"skip", "importorskip", "xfail"}


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__snapshots__" not in p.parts)


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def test_no_fixed_sleep_waits_for_a_state() -> None:
    found = []
    for path in _python_files():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):  # calls only: a probe script inside a string is not a call here
            if isinstance(node, ast.Call) and _name(node.func) == "sleep":
                key = (path.relative_to(TESTS).as_posix(), lines[node.lineno - 1].strip())
                if key not in ALLOWED_SLEEPS:
                    found.append(f"tests/{key[0]}:{node.lineno}: {key[1]}")
    assert not found, ("a sleep used as a wait: wait for the state (tests/waiting.py), or list it in ALLOWED_SLEEPS "
                       "with the reason it is the subject:\n" + "\n".join(found))


def test_the_allow_list_names_only_sleeps_that_exist() -> None:
    """A stale entry would let a new sleep of the same text through unseen."""
    present = set()
    for path in _python_files():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        present |= {(path.relative_to(TESTS).as_posix(), lines[n.lineno - 1].strip()) for n in ast.walk(ast.parse(source))
                    if isinstance(n, ast.Call) and _name(n.func) == "sleep"}
    assert set(ALLOWED_SLEEPS) <= present, sorted(set(ALLOWED_SLEEPS) - present)


def test_no_skip_bypasses_realparts() -> None:
    """``pytest.skip`` / ``importorskip`` / ``xfail`` and the skip marks only in tests/realparts.py."""
    found = []
    for path in _python_files():
        if path == TESTS / "realparts.py":
            continue
        source = path.read_text(encoding="utf-8")
        where = f"tests/{path.relative_to(TESTS).as_posix()}"
        for node in ast.walk(ast.parse(source)):
            func = node.func if isinstance(node, ast.Call) else None  # a call: pytest.skip.Exception is no skip
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "pytest" \
                    and func.attr in SKIPS:
                found.append(f"{where}:{node.lineno}: pytest.{func.attr}(...)")
            if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif", "xfail") \
                    and isinstance(node.value, ast.Attribute) and node.value.attr == "mark":
                found.append(f"{where}:{node.lineno}: pytest.mark.{node.attr}")
    assert not found, "skip through tests/realparts.py (it fails under CI):\n" + "\n".join(found)
