"""The playbooks that ship with the tool (orchestrator/playbooks/: the flagship, tune, sweep, read-sglang,
cross-engine), found by name from any directory: ``orchestrator run eagle3`` is the installed flagship, and a path
to a file still means that file."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserInputError

#: the folder the wheel installs them in (a checkout's ./playbooks links to it)
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "playbooks"
#: the flagship investigation: "EAGLE-3 makes the server slower instead of faster"
FLAGSHIP_NAME = "eagle3"


def bundled_playbooks() -> dict[str, Path]:
    """Name (the file's stem) -> path of every bundled playbook."""
    return {p.stem: p for p in sorted(BUNDLED_DIR.glob("*.yaml"))}


def flagship_path() -> Path:
    return BUNDLED_DIR / f"{FLAGSHIP_NAME}.yaml"


def resolve_playbook(given: str | Path) -> Path:
    """The file ``given`` names: itself when it exists or names a folder (the loader then says the file is not
    found), else the bundled playbook of that name (``eagle3`` or ``eagle3.yaml``); a bare name that is neither is
    the user's mistake, said with the names that would have worked."""
    path = Path(given)
    text = str(given)
    if path.exists() or "/" in text or "\\" in text:
        return path
    found = bundled_playbooks().get(text.removesuffix(".yaml").removesuffix(".yml"))
    if found is not None:
        return found
    names = ", ".join(bundled_playbooks())
    raise UserInputError(f"file not found: {text}, and no bundled playbook of that name (bundled: {names}; "
                         "`orchestrator playbooks` lists them)")
