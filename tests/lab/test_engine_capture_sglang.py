"""The target's hidden states from a REAL SGLang (0.5.15.post1, ``orchestrator lab sglang-host``) serving the lab's
target on this CPU (issues 38 and 43): ``/generate`` with ``return_hidden_states`` on a server whose target class is
SGLang's own with EAGLE-3 aux capture on (remote_probes/engine/sglang_capture_model, loaded through
``SGLANG_EXTERNAL_MODEL_PACKAGE``; the client is remote_probes/engine/sglang_states.py). Held to transformers on the
same tokens, layer by layer; and SGLang's own default capture is the layers target_capture.py reads from its source
for a Llama, [2, N // 2, N - 3], not the draft's: the seed's fault, on the real engine. Two server starts (every
layer through a playbook's ``server`` step with ``capture:`` and the draft test, then SGLang's default directly; ~20 s
each alone), one after the other; each stop leaves no process."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.building.build import LabPaths, seed_wiring
from orchestrator.lab.sglang_host.host import SglangHost, server_argv
from remote_probes.engine import sglang_states
from remote_probes.engine.engine_states import capture_for
from remote_probes.engine.sglang_capture import find_sglang_root
from remote_probes.engine.target_capture import resolve
from tests import realparts
from tests import vllm_differential as vd

torch = realparts.importorskip("torch")
pytestmark = [pytest.mark.lab, pytest.mark.slow]
READY_S = 600  # a loaded 2-core machine; ~20 s alone
CONTEXT = 1024  # the host's --context-length (orchestrator/lab/sglang_host/host.py CPU_FLAGS)
#: two prompts of different lengths, sent at once: SGLang prefills them in one batch, whose rows it slices per
#: request (batch_result_processor.py:465-483)
PROMPTS = [[5, 17, 99, 3, 250, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]]
NEW_TOKENS = 6
#: float32 rounding of the same arithmetic in another order: measured 7.6e-5 on values up to ~155 (5e-7 relative)
RELATIVE = 1e-5


@contextmanager
def capture_server(host: SglangHost, target: Path, work: Path, layers: list[int] | None) -> Iterator[vd.ServerProcess]:
    """A real SGLang server capturing ``layers`` (None: SGLang's default), stopped (its whole group) on exit; the
    stop leaves none of its processes."""
    env = {**os.environ, **host.env(work / "run")}
    capture = sglang_states.capture_env(layers, sglang_states.target_architectures(str(target)))
    capture["PYTHONPATH"] = os.pathsep.join(p for p in (capture["PYTHONPATH"], env.get("PYTHONPATH")) if p)
    port = vd.sglang_port()
    srv = vd.ServerProcess("sglang", server_argv(host.python, target, port, *sglang_states.capture_argv(CONTEXT)),
                           {**env, **capture}, work / "sglang.log", port)
    srv.start()
    try:
        assert srv.wait_ready(READY_S), f"SGLang exited before it served:\n{srv.log_text()[-3000:]}"
        yield srv
    except BaseException:
        srv.stop()  # the test's own failure is the one to see
        raise
    pids = srv.group_pids()
    left = srv.stop()
    assert left == [] and srv.proc is not None and srv.proc.poll() is not None, left
    assert not [pid for pid in pids if alive(pid)], pids  # none left its group to outlive the stop either
    assert len(pids) >= 3, pids  # the launcher, the scheduler and the detokenizer were all there to stop



def alive(pid: int) -> bool:
    """A process that runs (a zombie has ended: only its parent's wait is missing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def by_engine(url: str, served: list[int]) -> list[dict[str, Any]]:
    """Both prompts in flight at once, through the draft test's own dispatch (states_from.engine: sglang)."""
    capture = capture_for("sglang", hidden_size=128)
    with ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
        return [run for runs in pool.map(lambda p: capture(url, "unused", [p], NEW_TOKENS, served), PROMPTS)
                for run in runs]


def reference(target: Path, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers on the engine's tokens: ``hidden_states`` per HF index, the final norm's input (id N as the
    engine gives it), and greedy tokens."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    out = []
    for prompt, run in zip(PROMPTS, runs, strict=True):
        seq = torch.tensor([run["token_ids"]])
        before_norm: dict[str, Any] = {}
        hook = model.model.norm.register_forward_pre_hook(
            lambda _m, a, kept=before_norm: kept.update(x=a[0][0].clone()))
        with torch.no_grad():
            hidden = [h[0] for h in model(input_ids=seq, output_hidden_states=True).hidden_states]
            hook.remove()
            greedy = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                    attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        out.append({"hidden": hidden, "before_norm": before_norm["x"], "greedy": greedy[0, len(prompt):].tolist(),
                    "norm": model.model.norm})
    return out


def relative_diff(state: Any, ref: Any) -> float:
    return float((state - ref).abs().max()) / float(ref.abs().max())


@pytest.mark.timeout(900)
def test_the_draft_test_reads_sglangs_states_as_transformers_computes_them(
        lab: LabPaths, sglang_host: SglangHost, tmp_path: Path) -> None:
    """Through a playbook, as a user's SGLang host: the ``server`` step starts the real SGLang with ``capture:``
    (every layer id, 0 the embedding output and N before the final norm), and the draft test reads the target's
    states from it (``states_from``, checked against transformers on its first prompt) with the same figures, wiring
    by wiring, as the transformers copy gives; the console says where the states came from."""
    from orchestrator.inventory import Inventory
    from tests.servers.conftest import processes_with, run_playbook
    from tests.servers.test_real_sglang_adapter import cpu_flags, inventory_doc

    n = lab.num_layers
    marker = f"orch-test-capture-{tmp_path.name}"
    models = {"target": str(lab.target), "draft": str(lab.draft)}
    inventory = Inventory.model_validate(inventory_doc(sglang_host, models, tmp_path, marker))
    common = "target: '{{ target }}', draft: '{{ draft }}', engine: sglang, num_prompts: 6, max_new_tokens: 24"
    ran = run_playbook(f"""
name: engine capture on SGLang
steps:
  - name: capture server
    server: {{name: cap, ready_timeout: {READY_S}, flags: {json.dumps(cpu_flags())},
             capture: {list(range(n + 1))}}}
    register: cap
  - name: by the engine
    draft_test: {{{common}, states_from: "{{{{ cap.states_from | combine({{'check': true}}) }}}}"}}
    register: by_engine
  - name: by transformers
    draft_test: {{{common}}}
    register: by_transformers
  - server: {{action: stop, name: cap}}
""", inventory, tmp_path / "sessions")
    assert ran.status == "ok", [e.get("error") for e in ran.of_type("step_finished")]
    cap = ran.result("s1", "sglang")["result"]
    assert cap["states_from"]["engine"] == "sglang" and cap["states_from"]["layers"] == list(range(n + 1))
    assert "--enable-return-hidden-states" in cap["command"] and "--disable-radix-cache" in cap["command"]
    by_engine, by_tf = ran.result("s2", "sglang")["result"], ran.result("s3", "sglang")["result"]
    states = by_engine["states"]
    assert states["source"] == "engine" and states["normed_here"] == [n], states
    assert by_tf["states"]["source"] == "transformers"
    check = states["check"]
    assert check["agree"] and check["same_greedy_tokens"], check
    assert max(check["relative_max_diff"].values()) < RELATIVE * 10, check
    engine_rows = {tuple(r["wiring"]): r["tau_serving"] for r in by_engine["wirings"]}
    tf_rows = {tuple(r["wiring"]): r["tau_serving"] for r in by_tf["wirings"]}
    assert engine_rows.keys() == tf_rows.keys() and len(engine_rows) >= 5
    assert all(abs(engine_rows[w] - tf_rows[w]) < 0.02 for w in tf_rows), (engine_rows, tf_rows)
    assert by_engine["decision"] == by_tf["decision"] and by_engine["best"]["wiring"] == by_tf["best"]["wiring"]
    said = "".join(e.get("text", "") for e in ran.of_type("output"))
    assert "hidden states: the serving engine, sglang" in said and "checked against transformers" in said
    assert processes_with(marker) == []


@pytest.mark.timeout(900)
def test_sglangs_default_capture_is_what_its_source_says_not_the_drafts(lab: LabPaths, sglang_host: SglangHost,
                                                                        tmp_path: Path) -> None:
    n = lab.num_layers
    [site] = glob.glob(str(sglang_host.root / "venv" / "lib" / "python*" / "site-packages"))
    read = resolve(json.loads((lab.target / "config.json").read_text()), "sglang", str(find_sglang_root([site])))
    assert read["default_ids"] == [2, n // 2, n - 3] == read["default_wiring"]  # llama.py:815-818
    with capture_server(sglang_host, lab.target, tmp_path, None) as srv:
        runs = by_engine(srv.url, read["default_ids"])
    assert f"orchestrator capture: SGLang's default layers, HF ids {read['default_ids']}" in srv.log_text()
    for run, ref in zip(runs, reference(lab.target, runs), strict=True):
        for j in read["default_ids"]:
            assert relative_diff(run["states"][j], ref["hidden"][j]) < RELATIVE, j
    # the seed's draft names no ids, so SGLang feeds it these; it was trained on others (the embedding output first)
    assert "eagle_aux_hidden_state_layer_ids" not in json.loads((lab.draft / "config.json").read_text())["eagle_config"]
    assert seed_wiring(n) == [0, n // 2, n - 1] != read["default_ids"]
