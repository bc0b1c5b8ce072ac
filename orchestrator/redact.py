"""Redaction of secrets before any sink (log, console, TUI, report) sees them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Env names like HF_TOKEN, API_KEY, DB_PASSWORD, AWS_SECRET_ACCESS_KEY — but not MAX_NEW_TOKENS.
SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|KEY|APIKEY|PASSWORD|PASSWD|SECRET|CREDENTIALS?|AUTH)(?:$|_)", re.IGNORECASE
)
MASK = "***"
# Short values would mask innocent text everywhere ("1", "on"); they are still never printed as vars.
MIN_SECRET_LEN = 4


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


class Redactor:
    """Replaces every known secret value with ``***`` in strings and nested structures."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._prefixes: set[str] = set()  # proper prefixes of the secrets (see hold_back)
        self._last_chars: set[str] = set()
        self._longest_prefix = 0
        self.add(*secrets)

    def add(self, *values: Any) -> None:
        changed = False
        for value in values:
            if value is None:
                continue
            text = str(value)
            if len(text) >= MIN_SECRET_LEN and text not in self._secrets:
                self._secrets.add(text)
                changed = True
        if changed:
            # Longest first so a secret containing another is masked whole.
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))
            self._prefixes = {s[:n] for s in self._secrets for n in range(1, len(s))}
            self._last_chars = {p[-1] for p in self._prefixes}
            self._longest_prefix = max((len(p) for p in self._prefixes), default=0)

    def hold_back(self, text: str) -> int:
        """How many trailing characters of a streamed chunk could be the start of a secret: the caller
        keeps them until the next chunk, so a secret split across chunks is still masked whole."""
        if not text or text[-1] not in self._last_chars:  # the common case: no secret starts here
            return 0
        for n in range(min(len(text), self._longest_prefix), 0, -1):
            if text[-n:] in self._prefixes:
                return n
        return 0

    def add_env(self, env: dict[str, Any] | None) -> None:
        """Treat values of env vars with secret-looking names as secrets."""
        for name, value in (env or {}).items():
            if is_secret_name(name):
                self.add(value)

    def text(self, value: str) -> str:
        if self._pattern is None or not value:
            return value
        return self._pattern.sub(MASK, value)

    def deep(self, value: Any) -> Any:
        """Redact every string inside a JSON-like structure."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.deep(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.deep(v) for v in value]
        return value
