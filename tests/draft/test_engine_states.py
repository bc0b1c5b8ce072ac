"""The engine path of the draft test without a server (issue 38): the arguments, the target's light parts against the
whole model (the shipped lab target), the lock protocol of vLLM's states file, and the refusals that come before any
request. The path against a real vLLM: tests/lab/test_engine_capture_vllm.py."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from orchestrator.templating import render
from remote_probes.agent.protocol import ProbeFailure
from remote_probes.engine.engine_states import CONNECTOR, capture_flags, read_states
from remote_probes.evaluation.draft_test import engine_layers, main, parse_states_from
from tests import realparts

torch = realparts.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "orchestrator" / "data" / "lab" / "target"
DRAFT = REPO / "orchestrator" / "data" / "lab" / "drafts" / "seed-wiring"


@pytest.mark.parametrize(("value", "words"), [
    ("http://x:1", "must be a mapping"),
    ({"url": "x:1", "layers": [1]}, "states_from.url"),
    ({"url": "http://x:1", "layers": []}, "states_from.layers"),
    ({"url": "http://x:1", "layers": [1, -2]}, "states_from.layers"),
    ({"url": "http://x:1", "layers": [1], "layer": 2}, "unknown key(s) layer"),
    ({"url": "http://x:1", "layers": [1], "check": "yes"}, "check must be true or false"),
])
def test_bad_states_from_is_named(value: object, words: str) -> None:
    with pytest.raises(ProbeFailure, match="states_from") as info:
        parse_states_from(value)
    assert words in info.value.message and info.value.details["field"] == "states_from"


def test_no_engine_is_the_transformers_path() -> None:
    assert parse_states_from(None) is None and parse_states_from({}) is None
    assert parse_states_from({"url": "http://h:1", "layers": [9, 2, 2]})["layers"] == [2, 9]


def test_which_layers_the_engine_gives() -> None:
    # id N is read from the engine and normed here; the embedding output is looked up where not captured
    assert engine_layers([0, 6, 12], [6, 12], 12) == {"engine": [6, 12], "looked_up": [0], "missing": []}
    assert engine_layers([1, 6, 11], [0, 6, 12], 12)["missing"] == [1, 11]


def test_capture_flags_are_vllms_method_and_the_pushed_connector() -> None:
    flags = capture_flags([9, 0, 2, 2], "/tmp/store")
    spec = flags["speculative-config"]
    assert spec["method"] == "extract_hidden_states" and spec["num_speculative_tokens"] == 1
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 9]  # top level
    kv = flags["kv-transfer-config"]
    assert kv["kv_connector"] == CONNECTOR and kv["kv_connector_module_path"] == "remote_probes.engine.vllm_states_connector"
    assert (REPO / "remote_probes" / "engine" / "vllm_states_connector.py").read_text().count(f"class {CONNECTOR}(") == 1
    assert kv["kv_connector_extra_config"] == {"shared_storage_path": "/tmp/store"}


def test_a_playbook_adds_the_check_with_combine() -> None:
    got = render("{{ cap.states_from | combine({'check': true}) }}",
                       {"cap": {"states_from": {"url": "http://h:1", "layers": [1]}}})
    assert got == {"url": "http://h:1", "layers": [1], "check": True}
    assert render("{{ none | combine({'a': 1}) }}", {"none": None}) == {"a": 1}


def test_the_light_target_is_the_models_own_parts() -> None:
    from transformers import AutoModelForCausalLM

    from remote_probes.evaluation.light_target import final_norm, load_light_target

    light = load_light_target(str(TARGET), "cpu", torch.float32)
    model = AutoModelForCausalLM.from_pretrained(str(TARGET), dtype=torch.float32).eval()
    assert torch.equal(light.get_input_embeddings().weight, model.get_input_embeddings().weight)
    head = model.get_output_embeddings()
    assert torch.equal(light.get_output_embeddings().weight, head.weight)
    x = torch.randn(1, 5, model.config.hidden_size) * 50
    with torch.no_grad():
        assert torch.allclose(final_norm(light, x), model.model.norm(x), atol=1e-5)
        # what the engine's last id is against transformers' last hidden_states entry: the norm, applied here
        ids = torch.tensor([[5, 17, 29, 3]])
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    assert light.config.num_hidden_layers == len(hidden) - 1


def test_the_states_file_is_read_once_its_writer_lets_go(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = str(tmp_path / "req.safetensors")
    lock = os.open(path + ".lock", os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)  # the engine holds it while it writes

    def write() -> None:
        save_file({"hidden_states": torch.ones(3, 2, 4), "token_ids": torch.tensor([1, 2, 3])}, path)
        os.close(lock)

    got: dict[str, object] = {}
    reader = threading.Thread(target=lambda: got.update(read_states(path, timeout=30)))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # waiting on the lock, not reading a file that is not there yet
    write()
    reader.join(30)
    assert not reader.is_alive() and got["hidden_states"].shape == (3, 2, 4)  # type: ignore[attr-defined]


def test_a_states_file_on_another_host_is_said(tmp_path: Path) -> None:
    with pytest.raises(ProbeFailure, match="not on this host"):
        read_states(str(tmp_path / "elsewhere.safetensors"))


def test_the_served_wiring_uncaptured_is_refused_before_any_request() -> None:
    # vLLM feeds the seed-wiring draft [2, 6, 9] here; a server capturing [0, 2, 6] cannot score it. The port is
    # closed: the refusal comes before any request
    with pytest.raises(ProbeFailure, match="restart it capturing them") as info:
        main({"target": str(TARGET), "draft": str(DRAFT), "engine": "vllm", "num_prompts": 2,
              "states_from": {"url": "http://127.0.0.1:9", "layers": [0, 2, 6]}})
    assert info.value.kind == "engine_capture" and "[9]" in info.value.message


def test_an_engine_that_does_not_answer_is_said() -> None:
    with pytest.raises(ProbeFailure, match="no answer from the engine") as info:
        main({"target": str(TARGET), "draft": str(DRAFT), "engine": "vllm", "num_prompts": 1, "wirings": [[2, 6, 9]],
              "states_from": {"url": "http://127.0.0.1:9", "layers": [2, 6, 9]}})
    assert info.value.kind == "engine_capture"


def test_a_wrappers_parts_are_its_language_models(tmp_path: Path) -> None:
    """A wrapper target (a ``text_config`` around its language model, as Kimi-K2.5 is): the tensors nested under
    ``language_model.``, the layer count and eps from the text config; a vision tower's own norm is not the final
    norm."""
    import json

    from safetensors.torch import load_file, save_file

    from remote_probes.evaluation.light_target import load_light_target

    text = json.loads((TARGET / "config.json").read_text())
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": text,
                                                     "architectures": ["LlavaForConditionalGeneration"]}))
    own = load_file(str(TARGET / "model.safetensors"))
    nested = {f"language_model.{k}": v for k, v in own.items()}
    nested["vision_tower.encoder.layers.0.norm.weight"] = torch.zeros(8)
    nested["vision_tower.norm.weight"] = torch.zeros(8)  # shorter than the language model's: still not it
    save_file(nested, str(wrapper / "model.safetensors"))
    light = load_light_target(str(wrapper), "cpu", torch.float32)
    assert light.config.get_text_config().num_hidden_layers == text["num_hidden_layers"]
    assert torch.equal(light.get_input_embeddings().weight, own["model.embed_tokens.weight"])
    assert torch.equal(light.model.norm.weight, own["model.norm.weight"])
    head = own.get("lm_head.weight", own["model.embed_tokens.weight"])
    assert torch.equal(light.get_output_embeddings().weight, head)
