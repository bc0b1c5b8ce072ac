"""The lab's SGLang stand-in agrees with a REAL SGLang (0.5.15.post1, ``orchestrator lab sglang-host``) on this CPU
for everything but speculation, which that host cannot run (issue 43; tests/sglang_differential.py): the same greedy
output ids for the flagship's bench prompts on the lab's target (float32), the same refusal words for the same bad
flags, and the same /server_info values on the keys the product reads. One real SGLang start and one lab start for
the module (~20 s and ~3 s ready); the whole table, 64 tokens a request, is bench/lab_vs_sglang.py (BENCHMARKS.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.sglang_host.host import SGLANG_VERSION, SglangHost
from tests import sglang_differential as sd
from tests import vllm_differential as vd

pytestmark = [pytest.mark.lab, pytest.mark.slow]
READY_S = 600  # a loaded 2-core machine; ~20 s alone
N, TOKENS = 12, 16  # the flagship's 12 bench prompts; 16 new tokens each (~2 s a request on the real engine)


@pytest.fixture(scope="module")
def both(lab: LabPaths, sglang_host: SglangHost, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[sd.Side, sd.Side]:
    """(lab, real SGLang): each started once with the host's CPU flags, served every prompt, stopped."""
    from orchestrator.servers.prompts import load_prompts
    from orchestrator.servers.sglang import SglangAdapter

    work = tmp_path_factory.mktemp("lab-vs-sglang")
    prompts = load_prompts(None)[:N]
    site = sd.tree_site(sd.real_root(sglang_host), work)  # the lab parses with the real server's own tree
    traffic = work / "traffic.jsonl"  # issue 40: greedy completions replayed through SGLang's OpenAI route
    traffic.write_text("".join(json.dumps({"prompt": p, "temperature": 0, "max_tokens": TOKENS, "category": "code"})
                               + "\n" for p in prompts[:4]))

    def replay(server: vd.ServerProcess) -> dict[str, Any]:
        return {**vd.replay(server, traffic, SglangAdapter()), "penalised": penalised(server, prompts[:3])}

    lab_side = sd.serve(sd.lab_server(lab.target, work / "lab", site), prompts, TOKENS, READY_S, replay)
    real_side = sd.serve(sd.real_server(sglang_host, lab.target, work / "real"), prompts, TOKENS, READY_S, replay)
    return lab_side, real_side


#: greedy requests with penalties (issue 40): SGLang's penalisers (penaltylib) on plain decoding, where every token
#: is fed; the repetition penalty counts the output only, where vLLM's counts the prompt too
PENALTIES = ({"frequency_penalty": 1.0}, {"repetition_penalty": 1.3})


def penalised(server: vd.ServerProcess, prompts: list[str]) -> list[list[int]]:
    """The output ids of each prompt under each of PENALTIES, greedy, through /generate."""
    out = []
    for extra in PENALTIES:
        for prompt in prompts:
            body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": TOKENS, **extra}}
            status, text = vd.http(server.url + "/generate", body, timeout=600)
            assert status == 200, (server.engine, status, text[:500])
            out.append(json.loads(text)["output_ids"])
    return out


@pytest.mark.timeout(900)
def test_the_lab_penalises_as_real_sglang(both: tuple[sd.Side, sd.Side], lab: LabPaths) -> None:
    """The same token ids under a frequency and a repetition penalty on both; and vLLM's rule (the prompt counted by
    the repetition penalty) would have served other ids here, so the comparison tells the two rules apart."""
    import logging

    from orchestrator.lab.stand_in.model_runner import LabModelRunner
    from orchestrator.lab.stand_in.sglang_args import build_parser, resolve
    from orchestrator.servers.prompts import load_prompts
    from remote_probes.evaluation.penalties import RULES, Penalties

    real_ids, lab_ids = both[1].extra["penalised"], both[0].extra["penalised"]
    assert lab_ids == real_ids, (lab_ids, real_ids)
    runner = LabModelRunner(resolve(build_parser().parse_args(["--model-path", str(lab.target)]),
                                    target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)
    prompts = load_prompts(None)[:3]
    as_vllm = [runner.generate(runner.tokenizer(p)["input_ids"], max_new_tokens=TOKENS, stop=[], stop_token_ids=[],
                               ignore_eos=False, penalties=Penalties(repetition=1.3),
                               rule=RULES["vllm"]).output_ids for p in prompts]
    assert as_vllm != real_ids[len(prompts):], "vLLM's repetition rule serves these prompts as SGLang's does"


@pytest.mark.timeout(900)
def test_the_lab_answers_generate_greedy_with_real_sglangs_token_ids(both: tuple[sd.Side, sd.Side]) -> None:
    lab, real = both
    assert lab.left_after_stop == [] and real.left_after_stop == [], "a server process outlived its stop"
    compared = sd.compare_outputs(lab, real)
    assert compared["requests"] == N and compared["identical"] == N, compared["rows"]
    assert all(o["completion_tokens"] == TOKENS and o["finish"] == {"type": "length", "length": TOKENS}
               for o in real.outputs), real.outputs


@pytest.mark.timeout(900)
def test_the_lab_replays_traffic_through_the_openai_route_as_real_sglang(both: tuple[sd.Side, sd.Side]) -> None:
    """Issue 40: the replay's requests (with the one field it adds, ``return_spec_tokens_details``) are answered by a
    real SGLang 0.5.15.post1's /v1/completions as by the lab standing in for that version: every request, the same
    token counts, and no per-request speculative stats on either (that version's OpenAI answers carry none)."""
    lab, real = both
    for side in (lab, real):
        assert side.extra["errors"] == [] and len(side.extra["rows"]) == 4, side.extra
        assert side.extra["unmeasured"] == "the server gave no per-request accept length", side.extra
    assert ([(r["prompt_tokens"], r["completion_tokens"]) for r in lab.extra["rows"]]
            == [(r["prompt_tokens"], r["completion_tokens"]) for r in real.extra["rows"]]), (lab.extra, real.extra)


@pytest.mark.timeout(900)
def test_the_lab_reports_the_resolved_args_the_product_reads_as_real_sglang(both: tuple[sd.Side, sd.Side]) -> None:
    """Every key the product reads agrees, but those SGLang resolves from the device and its memory or draws at
    random (HARDWARE_KEYS, listed in BENCHMARKS.md); the host's requested flags are all reported by both."""
    lab, real = both
    rows = sd.compare_info(lab.info, real.info)
    assert [r for r in rows if not r["same"] and not r["hardware"]] == [], rows
    assert real.info["version"] == SGLANG_VERSION and lab.info["lab"] is True
    for flag in ("dtype", "device", "disable_overlap_schedule", "max_total_tokens", "context_length"):
        assert flag in lab.info and lab.info[flag] == real.info[flag], flag


@pytest.mark.timeout(600)
def test_the_lab_refuses_bad_flags_with_real_sglangs_words(lab: LabPaths, sglang_host: SglangHost,
                                                           tmp_path: Path) -> None:
    """A valid set, an unknown flag, a bad int, a bad choice and a port ServerArgs refuses (its gRPC twin past 65535):
    SGLang's own prepare_server_args and the lab's parser and rules give the same first error line."""
    argvs = sd.case_argvs(lab.target, 30000)
    real = sd.real_refusals(sglang_host, argvs, tmp_path)
    ours = sd.lab_refusals(sd.real_root(sglang_host), sglang_host.version, argvs)
    assert ours == real
    assert real["valid"] is None and sum(v is not None for v in real.values()) == len(argvs) - 1, real
