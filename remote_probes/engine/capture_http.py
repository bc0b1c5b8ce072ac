"""The capture clients' one HTTP call: POST a JSON body to the serving engine and read its JSON answer (standard
library only, Python >= 3.9). Its own module because both engines' clients send through it and engine_states.py
imports sglang_states.py: a shared helper inside either would make the two import each other."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Dict

from remote_probes.agent.protocol import ProbeFailure


def post_json(url: str, body: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """POST ``body`` as JSON and read the JSON answer; a refusal or no answer is a ProbeFailure (engine_capture)
    naming the HTTP status or the address (both engines' capture clients send their requests through it)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:400]
        raise ProbeFailure("engine_capture", "the engine refused the capture request (HTTP %d): %s"
                           % (exc.code, detail), status=exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ProbeFailure("engine_capture", "no answer from the engine at %s: %s" % (url, exc)) from None
