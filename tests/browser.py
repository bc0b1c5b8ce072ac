"""A real headless Chromium for the tests that must see a page as a reader does (issue 41: report.html's charts are
checked as rendered images, not as HTML text).

Chromium is driven over its DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ended by NUL on
file descriptors 3 and 4), so no websocket client and no browser-driver package are needed: the browser is Debian's
``chromium`` (``.ci/run`` installs it). Skips, or fails under CI, where no Chromium is installed.

    from tests.browser import open_page
    page = open_page(path, screenshot=tmp_path / "page.png")
    page.images   # [Rendered(alt, complete, width, height)] as the page's document.images holds them
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import realparts
from tests.waiting import wait_until

#: an image whose pixels the browser decoded: complete, with a natural size (a broken src is complete at 0 x 0)
IMAGES_JS = ("JSON.stringify(Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, "
             "i.naturalHeight]))")


@dataclass(frozen=True)
class Rendered:
    alt: str
    complete: bool
    width: int
    height: int

    @property
    def shown(self) -> bool:
        return self.complete and self.width > 0 and self.height > 0


@dataclass(frozen=True)
class Page:
    title: str
    text: str  # document.body.innerText: what a reader sees
    images: list[Rendered]


def chromium() -> str:
    """The installed Chromium (Debian's ``chromium``, or Google's build)."""
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    realparts.require(found, "no Chromium is installed (apt-get install chromium)")
    assert found is not None
    return found


class _Pipe:
    """The DevTools protocol over Chromium's debugging pipe: one request at a time, answers matched by id (events,
    which carry no id, are read past)."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd, self.read_fd = write_fd, read_fd
        self.buffer = b""
        self.last_id = 0

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self.last_id += 1
        message: dict[str, Any] = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self.buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Chromium did not answer {method} in {timeout:.0f} s")
                chunk = os.read(self.read_fd, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"Chromium closed its pipe during {method}")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\0", 1)
            answer = json.loads(line)
            if answer.get("id") == self.last_id:
                if "error" in answer:
                    raise RuntimeError(f"Chromium refused {method}: {answer['error']}")
                return dict(answer.get("result", {}))


def open_page(path: Path, screenshot: Path | None = None, width: int = 1200, around_first_image: bool = False,
              ) -> Page:
    """``path`` opened in a fresh headless Chromium (its own profile) once the page's load completed: its title, its
    visible text and its images as rendered; the full page saved as PNG to ``screenshot`` if given (with
    ``around_first_image``: 1,400 pixels from just above the first image, the picture kept in docs/)."""
    binary = chromium()
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def on_fds_3_and_4() -> None:  # in the child: the protocol's fixed descriptors
        a, b = os.dup(to_browser_r), os.dup(from_browser_w)
        os.dup2(a, 3)
        os.dup2(b, 4)

    with tempfile.TemporaryDirectory(prefix="orch-chromium-") as profile:
        proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", f"--window-size={width},900", "about:blank"],
            preexec_fn=on_fds_3_and_4, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        pipe = _Pipe(to_browser_w, from_browser_r)
        try:
            target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            pipe.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)

            def evaluate(expression: str) -> Any:
                result = pipe.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                   session=session)
                return result["result"].get("value")

            def loaded() -> bool:  # the page's own state: loaded, and every image decoded or failed
                return bool(evaluate("document.readyState") == "complete"
                            and not evaluate("Array.from(document.images).some(i => !i.complete)"))

            if not wait_until(loaded, timeout=30):
                raise TimeoutError(f"{path} did not finish loading in 30 s")
            page = Page(evaluate("document.title"), evaluate("document.body.innerText"),
                        [Rendered(*row) for row in json.loads(evaluate(IMAGES_JS))])
            if screenshot is not None:
                params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
                if around_first_image and page.images:
                    top = evaluate("document.images[0].getBoundingClientRect().top + window.scrollY")
                    params["clip"] = {"x": 0, "y": max(0.0, float(top) - 500), "width": width, "height": 1400,
                                      "scale": 1}
                shot = pipe.call("Page.captureScreenshot", params, session=session)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
            pipe.call("Browser.close")
            proc.wait(timeout=30)
        finally:
            os.close(to_browser_w)
            os.close(from_browser_r)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return page


if __name__ == "__main__":  # python -m tests.browser REPORT.html SHOT.png: the screenshot kept in docs/
    shown = open_page(Path(sys.argv[1]), screenshot=Path(sys.argv[2]), width=1000, around_first_image=True)
    print(f"{shown.title}: {sum(i.shown for i in shown.images)}/{len(shown.images)} images rendered")
