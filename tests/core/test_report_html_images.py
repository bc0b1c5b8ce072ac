"""report.html holds every chart the Markdown report links, whatever names the session directory (issue 41): a
relative sessions directory (the default ``./sessions``), an absolute one, a session imported from another machine
(its recorded paths foreign); a chart whose file is gone is said in the page, never dropped in silence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.session.document import Image, Para, to_html, to_markdown

SVG = "<svg xmlns='http://www.w3.org/2000/svg' width='4' height='4'><rect width='4' height='4'/></svg>"


def _session(root: Path) -> Path:
    art = root / "sessions" / "20261204T000000Z-eagle3" / "artifacts"
    art.mkdir(parents=True)
    (art / "acceptance-s1.svg").write_text(SVG)
    return art.parent


@pytest.mark.parametrize("naming", ["relative", "absolute", "imported"])
def test_the_html_page_embeds_the_chart(naming: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session(tmp_path)
    monkeypatch.chdir(tmp_path)
    if naming == "relative":  # how `orchestrator run` names it with the default ./sessions
        base = Path("sessions") / session.name
        image = base / "artifacts" / "acceptance-s1.svg"
    elif naming == "absolute":
        base, image = session, session / "artifacts" / "acceptance-s1.svg"
    else:  # written on another machine: the recorded path does not exist here, the file sits in artifacts/
        base, image = session, Path("/elsewhere/sessions/x/artifacts/acceptance-s1.svg")
    page = to_html([Para("text"), Image(image, "accept length")], base, "t")
    assert page.count("src='data:image/svg+xml;base64,") == 1, page
    if naming != "imported":
        assert "](artifacts/acceptance-s1.svg)" in to_markdown([Image(image, "accept length")], base)


def test_a_missing_chart_is_said_in_the_page(tmp_path: Path) -> None:
    session = _session(tmp_path)
    os.remove(session / "artifacts" / "acceptance-s1.svg")
    page = to_html([Image(session / "artifacts" / "acceptance-s1.svg", "accept length")], session, "t")
    assert "<img" not in page and "chart “accept length” missing" in page
