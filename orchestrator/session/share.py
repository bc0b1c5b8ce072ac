"""Sessions as one archive: ``export_session`` packs a session (sanitised, reports rendered from the sanitised
log) into a ``.tar.gz``; ``import_session`` unpacks one into a sessions root after checking every member.

Archive layout::

    orchestrator-export.json      the manifest: format version, session name, what was masked, file hashes
    <session name>/events.jsonl   the log, every event sanitised (a torn last line stays torn, sanitised as text)
    <session name>/outputs/...    full outputs, sanitised as text
    <session name>/report.md|html rendered again from the sanitised log
    <session name>/artifacts/...  charts and tables (binary files are copied as they are, and listed as such)

An archive is untrusted input on import: only regular files and directories under the session's own folder
are accepted (no absolute paths, no ``..``, no links or devices), each file must match the manifest's size
and hash, and the session only appears in the sessions root, by one rename, once all of that held.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator import __version__
from orchestrator.errors import SessionError
from orchestrator.redact import Redactor
from orchestrator.session.log import EVENTS_FILE
from orchestrator.session.reader import read_session
from orchestrator.session.report import PARTIAL_SUFFIX
from orchestrator.session.sanitise import Sanitiser, environment_secrets, local_path_prefixes

MANIFEST = "orchestrator-export.json"
FORMAT = "orchestrator-session-export"
FORMAT_VERSION = 1
REPORTS = ("report.md", "report.html")
MAX_IMPORT_BYTES = 4 * 1024**3  # unpacked; a session is events and text, so more means a wrong (or hostile) file
MAX_IMPORT_FILES = 100_000


@dataclass
class ExportSummary:
    archive: Path
    session: str
    files: int
    masked: int  # values the export pass masked that the log still held
    anonymised: int  # path prefixes replaced
    binary: list[str] = field(default_factory=list)  # copied unscanned
    report_failures: list[str] = field(default_factory=list)


@dataclass
class ImportSummary:
    directory: Path
    manifest: dict[str, Any]
    problems: list[str]  # what the imported log itself says is missing (a killed run's export)


def export_session(directory: Path, archive: Path, *, anonymise_paths: bool = False,
                   extra_paths: Iterable[Path] = (), secret_env: Iterable[str] = (),
                   env: Mapping[str, str] | None = None, cwd: Path | None = None, home: Path | None = None,
                   ) -> ExportSummary:
    """Write ``archive`` (a .tar.gz) from the session at ``directory``.

    :raises SessionError: no session there, or ``secret_env`` names an unset variable.
    :raises OSError: the archive cannot be written (the partial file is removed).
    """
    from orchestrator.session.report import write_report

    directory = Path(directory)
    if not (directory / EVENTS_FILE).is_file():
        raise SessionError(f"no session at {directory} (missing {EVENTS_FILE})")
    env = os.environ if env is None else env
    names = list(secret_env)
    unset = [name for name in names if not env.get(name)]
    if unset:
        raise SessionError(f"--secret-env {', '.join(unset)}: not set in this environment, so there is no value to mask")
    sanitiser = Sanitiser(Redactor(environment_secrets(env, names)))
    if anonymise_paths:
        sanitiser.set_paths(local_path_prefixes(session_dir=directory.absolute(), cwd=cwd, home=home,
                                                extra=extra_paths))
    name = directory.name
    binary: list[str] = []
    report_failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="orchestrator-export-") as tmp:
        staged = Path(tmp) / name
        staged.mkdir()
        for source in sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = source.relative_to(directory)
            if rel.as_posix() in REPORTS or source.name.endswith(PARTIAL_SUFFIX):
                continue  # rendered again below, from what the archive holds; a half-written file is no record
            target = staged / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if rel.as_posix() == EVENTS_FILE:
                target.write_text(_sanitise_log(source, sanitiser), encoding="utf-8")
                continue
            try:
                data = source.read_bytes()
            except FileNotFoundError:
                continue  # gone since the listing (a live session renamed or removed it): nothing to export
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                binary.append(rel.as_posix())
                target.write_bytes(data)
                continue
            target.write_text(sanitiser.text(text), encoding="utf-8")
        (staged / "outputs").mkdir(exist_ok=True)
        for fmt in ("md", "html"):
            try:
                write_report(staged, fmt=fmt, failures=report_failures)
            except Exception as exc:  # the log is the record; a report can be rendered after import
                report_failures.append(f"report.{fmt} not rendered: {type(exc).__name__}: {exc}")
        loaded = read_session(staged)
        finished = loaded.finished
        files = {p.relative_to(staged).as_posix(): _digest(p) for p in sorted(staged.rglob("*")) if p.is_file()}
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "orchestrator_version": __version__,
            "session": name, "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "status": finished.status if finished else None, "incomplete": loaded.incomplete,
            "masked_by_export": sanitiser.masked, "anonymised_paths": anonymise_paths,
            "path_placeholders": sorted({placeholder for _, placeholder in sanitiser.paths}),
            "binary_unscanned": binary, "files": files,
        }
        _write_archive(archive, staged, manifest)
    return ExportSummary(archive=archive, session=name, files=len(files), masked=sanitiser.masked,
                         anonymised=sanitiser.anonymised, binary=binary, report_failures=report_failures)


def _sanitise_log(path: Path, sanitiser: Sanitiser) -> str:
    lines = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            stripped = line.rstrip("\n")
            try:
                data = json.loads(stripped)
            except json.JSONDecodeError:
                lines.append(sanitiser.text(stripped))  # a torn line stays torn: the reader counts it
                continue
            lines.append(json.dumps(sanitiser.deep(data), separators=(",", ":"), ensure_ascii=False))
    return "".join(f"{line}\n" for line in lines)


def _digest(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _write_archive(archive: Path, staged: Path, manifest: dict[str, Any]) -> None:
    """Written beside the target and renamed into place, so a failed export leaves no half archive."""
    archive = Path(archive)
    partial = archive.with_name(archive.name + ".part")
    try:
        with tarfile.open(partial, "w:gz") as tar:
            data = json.dumps(manifest, indent=2, ensure_ascii=False).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))
            for path in sorted(staged.rglob("*")):
                arcname = f"{staged.name}/{path.relative_to(staged).as_posix()}"
                if path.is_file():  # files only, one by one: a link or a device never reaches the archive
                    tar.add(path, arcname=arcname, recursive=False, filter=_anonymous_owner)
        os.replace(partial, archive)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _anonymous_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """The exporter's user and group names would travel in every member header: leave them out."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o644
    return info


def import_session(archive: Path, root: Path, *, name: str | None = None) -> ImportSummary:
    """Unpack an export into ``root`` (as ``name``, default the exported session's name).

    :raises SessionError: not an export, a member that is not allowed, a hash that does not match, a
        format this version cannot read, or a session of that name already there.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise SessionError(f"{archive}: no such file")
    try:
        tar = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        detail = str(exc).splitlines()[0]  # tarfile lists every compression it tried: the first line says it
        raise SessionError(f"{archive}: not a session export (not a readable .tar.gz: {detail})") from None
    with tar:
        try:
            members = tar.getmembers()
            manifest = _read_manifest(tar, archive)
            session = manifest["session"]
            wanted: dict[str, Any] = manifest["files"]
            _check_members(members, session, wanted, archive)
            target_name = name or session
            if not target_name or "/" in target_name or target_name in (".", ".."):
                raise SessionError(f"--name {target_name!r}: a session name is one directory name")
            root.mkdir(parents=True, exist_ok=True)
            destination = root / target_name
            if destination.exists():
                raise SessionError(f"{destination} already exists: import it under another name with --name NEW")
            staging = Path(tempfile.mkdtemp(prefix=".import-", dir=root))
            try:
                _extract(tar, members, wanted, staging, archive)
                loaded = read_session(staging)
                os.rename(staging, destination)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise SessionError(f"{archive}: damaged archive ({type(exc).__name__}: {exc})") from None
    loaded.directory = destination
    return ImportSummary(directory=destination, manifest=manifest, problems=loaded.problems)


def _read_manifest(tar: tarfile.TarFile, archive: Path) -> dict[str, Any]:
    try:
        member = tar.getmember(MANIFEST)
    except KeyError:
        raise SessionError(f"{archive}: not a session export (no {MANIFEST}; make one with "
                           "`orchestrator sessions export`)") from None
    handle = tar.extractfile(member) if member.isfile() and member.size < 64 * 1024**2 else None
    try:
        manifest = json.loads(handle.read()) if handle else None
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SessionError(f"{archive}: {MANIFEST} is not an orchestrator export manifest")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise SessionError(f"{archive}: export format {version!r} is newer than this orchestrator reads "
                           f"({FORMAT_VERSION}); upgrade orchestrator to import it")
    session, files = manifest.get("session"), manifest.get("files")
    if not isinstance(session, str) or not _plain_name(session) or not isinstance(files, dict):
        raise SessionError(f"{archive}: {MANIFEST} lacks a valid session name or file list")
    return manifest


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def _check_members(members: list[tarfile.TarInfo], session: str, wanted: dict[str, Any], archive: Path) -> None:
    if len(members) > MAX_IMPORT_FILES:
        raise SessionError(f"{archive}: {len(members)} members, more than a session export holds")
    total = 0
    seen: set[str] = set()
    for member in members:
        if member.name == MANIFEST:
            continue
        path = PurePosixPath(member.name)
        if path.is_absolute() or ".." in path.parts or path.parts[0] != session:
            raise SessionError(f"{archive}: refused member {member.name!r}: outside the session's folder")
        if not (member.isfile() or member.isdir()):
            raise SessionError(f"{archive}: refused member {member.name!r}: only files and folders are imported")
        if member.isfile():
            rel = PurePosixPath(*path.parts[1:]).as_posix()
            expected = wanted.get(rel)
            if not isinstance(expected, dict) or expected.get("size") != member.size:
                raise SessionError(f"{archive}: member {member.name!r} is not the file the manifest lists")
            seen.add(rel)
            total += member.size
    missing = sorted(set(wanted) - seen)
    if missing:
        raise SessionError(f"{archive}: the manifest lists files the archive lacks: {', '.join(missing[:5])}")
    if EVENTS_FILE not in seen:
        raise SessionError(f"{archive}: no {EVENTS_FILE} in the export")
    if total > MAX_IMPORT_BYTES:
        raise SessionError(f"{archive}: {total} bytes unpacked, more than a session export holds")


def _extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], wanted: dict[str, Any], staging: Path,
             archive: Path) -> None:
    for member in members:
        if member.name == MANIFEST or not member.isfile():
            continue
        rel = PurePosixPath(*PurePosixPath(member.name).parts[1:])
        target = staging.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        if source is None:
            raise SessionError(f"{archive}: member {member.name!r} cannot be read")
        digest = hashlib.sha256()
        with open(target, "wb") as out:
            for chunk in iter(lambda: source.read(1 << 20), b""):  # noqa: B023 - read at once, in this iteration
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != wanted[rel.as_posix()].get("sha256"):
            raise SessionError(f"{archive}: {member.name} does not match the manifest's hash (damaged or edited)")
    (staging / "outputs").mkdir(exist_ok=True)
