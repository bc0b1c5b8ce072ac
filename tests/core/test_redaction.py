"""Secrets never reach a sink: not events.jsonl, outputs/, report.md/html, the -v console, nor --json.
Secret vars (inline value and from_env), env names like HF_TOKEN/API_KEY are masked; MAX_NEW_TOKENS is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.redact import Redactor, is_secret_name

# Every planted secret lives in tests/planted_secrets.py, scanned for at the end of the run.
from tests.planted_secrets import API, FROM_ENV, HF, INLINE

VIA_VAR = "plainvar-to-token-5e5e5e"
NOT_SECRET = "maxnewtokens-value-2048"
# VIA_VAR is a plain var (listed as such at session start); only its use as $STEP_TOKEN must be masked.
SECRETS = [INLINE, FROM_ENV, HF, API]

PLAYBOOK = f"""name: redaction
hosts: localhost
vars:
  inline: {{secret: true, value: "{INLINE}"}}
  from_env: {{secret: true, from_env: ORCH_TEST_SECRET}}
  plain: "{VIA_VAR}"
steps:
  - name: print everything
    shell:
      command: |
        echo "inline={{{{ inline }}}}"
        echo "from_env={{{{ from_env }}}}"
        echo "hf=$HF_TOKEN api=$API_KEY max=$MAX_NEW_TOKENS" >&2
        echo "step token=$STEP_TOKEN"
        python3 -c "import sys; sys.stdout.write('x' * 65530 + sys.argv[1] + chr(10))" {{{{ inline }}}}
      env: {{STEP_TOKEN: "{{{{ plain }}}}"}}
    register: out
  - name: use the registered result
    shell: "echo {{{{ out.stdout_lines[0] }}}}"
  - name: fail showing the secret
    shell: "echo {{{{ from_env }}}} >&2; exit 3"
"""


def secret_env() -> dict[str, str]:
    return {"ORCH_TEST_SECRET": FROM_ENV, "HF_TOKEN": HF, "API_KEY": API, "MAX_NEW_TOKENS": NOT_SECRET}


def assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {where}"
        # Nor a recognisable chunk of one (a secret split across two output chunks).
        assert secret[:10] not in text, f"start of {secret!r} leaked into {where}"


def session_texts(root: Path) -> dict[str, str]:
    sessions = [p for p in root.iterdir() if (p / "events.jsonl").exists()]
    assert len(sessions) == 1, sessions
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
            for p in sessions[0].rglob("*") if p.is_file()}


@pytest.mark.parametrize("mode", ["-v", "--json"])
def test_no_secret_reaches_any_sink(cli, tmp_path: Path, mode: str) -> None:
    (tmp_path / "pb.yaml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "inv.yaml").write_text("hosts: {localhost: {}}\n", encoding="utf-8")
    proc = cli("run", "pb.yaml", "-i", "inv.yaml", mode, "--sessions-dir", "sessions", **secret_env())
    assert proc.returncode == 1, proc.stderr  # the last step fails on purpose
    assert_clean(proc.stdout, f"stdout ({mode})")
    assert_clean(proc.stderr, f"stderr ({mode})")
    files = session_texts(tmp_path / "sessions")
    assert any(name.endswith("report.md") for name in files)
    assert any("/outputs/" in name for name in files)
    for name, text in files.items():
        assert_clean(text, name)
    everything = proc.stdout + "".join(files.values())
    # The output really was recorded, masked, and the non-secret value is not over-redacted.
    assert "inline=***" in everything and "from_env=***" in everything
    assert "hf=*** api=***" in everything and f"max={NOT_SECRET}" in everything
    assert "step token=***" in everything and f"step token={VIA_VAR}" not in everything
    assert "x***\n" in everything  # the secret after 65530 chars, split across reads, still masked
    if mode == "--json":
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        assert events[0]["type"] == "session_started" and events[-1]["type"] == "session_finished"
        assert events[0]["vars"]["inline"] == "***" and events[0]["vars"]["from_env"] == "***"


def test_secret_name_rule() -> None:
    for name in ("HF_TOKEN", "API_KEY", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "token", "GITHUB_TOKEN_2"):
        assert is_secret_name(name), name
    for name in ("MAX_NEW_TOKENS", "KEYBOARD", "TOKENIZER_PATH", "MONKEY", "num_tokens", "PATH"):
        assert not is_secret_name(name), name


def test_redactor_masks_nested_and_longest_first() -> None:
    redactor = Redactor(["abcd", "abcdefgh", "xy"])  # "xy" is too short to mask everywhere
    assert redactor.text("abcdefgh abcd xy") == "*** *** xy"
    assert redactor.deep({"a": ["abcd", 1, {"b": "pre-abcdefgh"}]}) == {"a": ["***", 1, {"b": "pre-***"}]}


def test_hold_back_keeps_a_possible_secret_start() -> None:
    redactor = Redactor(["s3cret-value"])
    assert redactor.hold_back("output ends with s3c") == 3
    assert redactor.hold_back("output ends with s3cret-valu") == len("s3cret-valu")
    assert redactor.hold_back("plain line\n") == 0
    assert redactor.hold_back("ends with s3cret-value") == 0  # whole secret: masked now, nothing to hold
