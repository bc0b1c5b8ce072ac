"""Making a session fit to leave this machine: a second redaction pass and optional path anonymisation.

The session log is redacted when written, but only of the secrets that run knew (vars marked secret, env
names like HF_TOKEN). An export goes further, because an archive travels: it also masks the values of this
machine's secret-named environment variables (a token in the user's shell that a probe printed), values
under secret-named keys (``api-key: ...`` in server flags), and strings shaped like well-known credentials
(Hugging Face, OpenAI, GitHub, AWS, Slack tokens, PEM private keys, ``Bearer``/``--api-key`` arguments).
Everything it masks is counted, so the exporter can say so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.redact import MASK, Redactor, is_secret_name

# Credentials recognisable by their shape alone. Each is long and specific enough that innocent output
# (hashes, paths, model names) does not match: a masked commit hash would make the archive less useful.
TOKEN_SHAPES: tuple[re.Pattern[str], ...] = (
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),  # Hugging Face
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI, Anthropic
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),  # GitHub
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
)
# A credential by its position: the value after a flag or header that always carries one.
KEYED_VALUE = re.compile(
    r"(?P<lead>(?:--(?:admin-)?api[-_]key|--token|Bearer|Authorization:\s*Basic)(?:\s*=\s*|\s+)[\"']?)"
    r"(?P<value>[^\s\"',;]{4,})",
    re.IGNORECASE,
)
# NAME=value where NAME looks like a secret's name (HF_TOKEN=..., export API_KEY=...).
ENV_ASSIGNMENT = re.compile(r"\b(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<quote>[\"']?)(?P<value>[^\s\"';&|]{4,})")
# A path ends where a path-name character cannot follow: "/root" matches in "/root/x" and "/root\n", not "/rootfs".
PATH_END = r"(?![A-Za-z0-9_.\-+@~])"


@dataclass
class Sanitiser:
    """Masks secrets (``***``) and, when given path prefixes, replaces them with placeholders (``~``,
    ``<cwd>``). ``masked`` and ``anonymised`` count the replacements made so far."""

    redactor: Redactor = field(default_factory=Redactor)
    paths: list[tuple[str, str]] = field(default_factory=list)  # (absolute prefix, placeholder)
    masked: int = 0
    anonymised: int = 0
    _path_pattern: re.Pattern[str] | None = None
    _placeholders: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.set_paths(self.paths)

    def set_paths(self, paths: Iterable[tuple[str, str]]) -> None:
        clean: dict[str, str] = {}
        for prefix, placeholder in paths:
            prefix = prefix.rstrip("/")
            if prefix and prefix not in clean:  # "/" itself would turn every path into a placeholder
                clean[prefix] = placeholder
        self.paths = sorted(clean.items(), key=lambda item: len(item[0]), reverse=True)  # longest first
        self._placeholders = dict(self.paths)
        self._path_pattern = (re.compile("(?:" + "|".join(re.escape(p) for p, _ in self.paths) + ")" + PATH_END)
                              if self.paths else None)

    def text(self, value: str) -> str:
        if not value:
            return value
        out = self.redactor.text(value)
        self.masked += out.count(MASK) - value.count(MASK)
        for shape in TOKEN_SHAPES:
            out, n = shape.subn(MASK, out)
            self.masked += n
        out = KEYED_VALUE.sub(self._mask_keyed, out)
        out = ENV_ASSIGNMENT.sub(self._mask_assignment, out)
        if self._path_pattern is not None:
            out, n = self._path_pattern.subn(lambda m: self._placeholders[m.group(0)], out)
            self.anonymised += n
        return out

    def _mask_keyed(self, match: re.Match[str]) -> str:
        if match.group("value") == MASK:
            return match.group(0)
        self.masked += 1
        return match.group("lead") + MASK

    def _mask_assignment(self, match: re.Match[str]) -> str:
        if not is_secret_name(match.group("name")) or match.group("value") == MASK:
            return match.group(0)
        self.masked += 1
        return f"{match.group('name')}={match.group('quote')}{MASK}"

    def deep(self, value: Any, key: str | None = None) -> Any:
        """Every string in a JSON-like structure; a string under a secret-named key is masked whole."""
        if isinstance(value, str):
            if key is not None and len(value) >= 4 and value != MASK and is_secret_name(key.replace("-", "_")):
                self.masked += 1
                return MASK
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.deep(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.deep(v) for v in value]
        return value


def environment_secrets(env: Mapping[str, str], names: Iterable[str] = ()) -> list[str]:
    """Values of ``env`` to mask: every secret-named variable, and the ``names`` given explicitly."""
    values = [value for name, value in env.items() if is_secret_name(name)]
    values.extend(env[name] for name in names if env.get(name))
    return values


def local_path_prefixes(*, session_dir: Path, cwd: Path | None = None, home: Path | None = None,
                        extra: Iterable[Path] = ()) -> list[tuple[str, str]]:
    """The absolute local paths an export anonymises, each with its placeholder. Both the given and the
    resolved spelling of each path are replaced (a symlinked home, a relative sessions dir)."""
    cwd = cwd or Path.cwd()
    home = home or Path.home()
    pairs: list[tuple[Path, str]] = [(session_dir, "<session>"), (session_dir.parent, "<sessions>"),
                                     (cwd, "<cwd>"), (home, "~")]
    pairs.extend((path, f"<path{n}>") for n, path in enumerate(extra, start=1))
    prefixes: list[tuple[str, str]] = []
    for path, placeholder in pairs:
        for spelling in {os.path.abspath(path), os.path.realpath(path)}:
            prefixes.append((spelling, placeholder))
    return prefixes
