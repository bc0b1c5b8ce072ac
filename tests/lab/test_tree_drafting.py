"""Tree drafting in the lab (issue 39): SGLang's own selection code decides the same tree, a tree of topk 1 is the
chain the lab always served, and speculation over a tree still serves plain greedy decoding's tokens."""

from __future__ import annotations

import logging

import pytest
import torch

from orchestrator.lab.building.build import LabPaths
from orchestrator.lab.stand_in.sglang_args import StartupError, build_parser, resolve
from remote_probes.eagle3.tree import candidate_count, grow_tree, link_parents, propose_tree
from tests.sglang_source_functions import functions

pytestmark = [pytest.mark.lab, pytest.mark.torch]

VERSIONS = ("0.5.12.post1", "0.5.23")
SHAPES = [(1, 1, 2), (3, 1, 4), (3, 2, 6), (3, 4, 8), (5, 4, 8), (4, 3, 10), (7, 4, 16), (2, 8, 40)]


def _sglang(tree):
    topk_fn = functions(tree, "srt/utils/common.py", ("fast_topk",))
    spec = functions(tree, "srt/speculative/spec_utils.py", ("_select_top_k_tokens_first", "_select_top_k_tokens_later",
                                                               "select_top_k_tokens"), **topk_fn)
    organize = functions(tree, "srt/speculative/eagle_utils.py", ("organize_draft_results",),
                         maybe_detect_oob=lambda *a, **k: None)  # 0.5.23's debug check
    return spec["select_top_k_tokens"], organize["organize_draft_results"], topk_fn["fast_topk"]


class FakeDraft:
    """A draft whose next-token logits depend on the row's input token and on the hidden state it is fed, and whose
    hidden state records both: a wrong re-selection of a row's hidden state changes every later step."""

    def __init__(self, vocab: int, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.by_token = torch.randn(vocab, vocab, generator=gen) * 3
        self.by_hidden = torch.randn(997, vocab, generator=gen) * 3
        self.d2t = torch.randint(0, 4, (vocab,), generator=gen)

    def to_target(self, ids: torch.Tensor) -> torch.Tensor:
        return ids + self.d2t[ids]

    def step(self, input_ids: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = hidden.reshape(-1).long()
        logits = self.by_token[input_ids % self.by_token.shape[0]] + self.by_hidden[h % 997]
        return logits, ((h * 31 + input_ids) % 997).float().view(-1, 1, 1)


def _sglang_tree(select, organize, fast_topk, draft: FakeDraft, first: torch.Tensor, steps: int, topk: int,
                 budget: int):
    """EAGLEWorker.draft_forward's loop (srt/speculative/eagle_worker.py:851-925) around SGLang's own functions."""
    topk_p, topk_index = fast_topk(torch.softmax(first, dim=-1), topk, dim=-1)
    topk_index = draft.to_target(topk_index)
    hidden = torch.zeros(1, 1)
    score_list, token_list, parents_list, scores = [], [], [], None
    for i in range(steps):
        input_ids, hidden, scores, tree_info = select(i, topk_p, topk_index, hidden, scores, topk)
        score_list.append(tree_info[0])
        token_list.append(tree_info[1])
        parents_list.append(tree_info[2])
        if i == steps - 1:
            break
        logits, new_hidden = draft.step(input_ids, hidden)
        topk_p, topk_index = fast_topk(torch.softmax(logits, dim=-1), topk, dim=-1)
        topk_index = draft.to_target(topk_index)
        hidden = new_hidden.view(-1, 1)
    return organize(score_list, token_list, parents_list, budget)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("steps", "topk", "budget"), SHAPES)
def test_the_lab_grows_the_tree_sglangs_own_code_selects(sglang_trees, version, steps, topk, budget):
    select, organize, fast_topk = _sglang(sglang_trees(version))
    for seed in range(3):
        draft = FakeDraft(vocab=48, seed=seed)
        first = torch.randn(1, 48, generator=torch.Generator().manual_seed(100 + seed)) * 3
        parent_list, kept, tokens = _sglang_tree(select, organize, fast_topk, draft, first, steps, topk, budget)
        tree = grow_tree(draft.to_target, first, torch.zeros(1, 1, 1), draft.step, 7, steps, topk, budget)
        assert tree.tokens == [7, *tokens[0].tolist()]
        assert (tree.parents, tree.depths) == link_parents(kept[0].tolist(), parent_list[0].tolist(), topk)
        assert max(tree.depths) <= steps and len(tree.tokens) == budget


def test_parents_follow_sglangs_kernel_by_hand():
    # topk 2, 3 steps: candidates 0-1 (step 0), 2-5 (step 1: rows of 0 and 1), 6-9 (step 2: rows of the two
    # step-1 candidates that continued, parent_list slots 3 and 4); kept 0, 1, 3, 7 and 8
    parent_list = [-1, 0, 1, 3, 5]
    parents, depths = link_parents([0, 1, 3, 7, 8], parent_list, topk=2)
    # 3 // 2 = slot 1 -> candidate 0 (node 1); 7 // 2 = slot 3 -> candidate 3 (node 3); 8 // 2 = slot 4 -> 5: not kept
    assert parents == [-1, 0, 0, 1, 3, -2] and depths == [0, 1, 1, 2, 3, 0]


def _runner(lab: LabPaths, *flags: str):
    from orchestrator.lab.stand_in.model_runner import LabModelRunner

    ns = build_parser().parse_args(["--model-path", str(lab.target), *flags])
    return LabModelRunner(resolve(ns, target_architecture="LlamaForCausalLM"), log=logging.getLogger("t").debug)


def _spec(lab: LabPaths, steps: int, topk: int, budget: int) -> tuple[str, ...]:
    return ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(lab.drafts["healthy"]),
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(budget))


def test_a_tree_of_topk_one_is_the_chain(lab: LabPaths, prompts: list[str]):
    from remote_probes.eagle3.draft import DraftKVCache

    runner = _runner(lab, *_spec(lab, 7, 1, 8))
    draft = runner.draft
    assert draft is not None
    with torch.inference_mode():
        for text in prompts[:4]:
            ids = torch.tensor([runner.tokenizer(text)["input_ids"]])
            out = runner.target(input_ids=ids, output_hidden_states=True)
            aux = torch.cat([out.hidden_states[i] for i in runner.capture], dim=-1)
            nxt = int(out.logits[0, -1].argmax())
            tokens = torch.cat([ids[:, 1:], torch.tensor([[nxt]])], dim=1)
            chain = draft.propose(tokens, aux, DraftKVCache(), 7)
            tree = propose_tree(draft, tokens, aux, DraftKVCache(), nxt, 7, 1, 8)
            assert tree.tokens == [nxt, *chain] and tree.parents == [-1, 0, 1, 2, 3, 4, 5, 6]


def test_speculation_over_a_tree_serves_plain_greedy_tokens(lab: LabPaths, prompts: list[str]):
    plain = _runner(lab)
    tree = _runner(lab, *_spec(lab, 5, 4, 8))
    accepted = []
    for text in prompts[:6]:
        ids = plain.tokenizer(text)["input_ids"]
        want = plain.generate(ids, max_new_tokens=40, stop=[], stop_token_ids=[], ignore_eos=False).output_ids
        got = tree.generate(ids, max_new_tokens=40, stop=[], stop_token_ids=[], ignore_eos=False)
        assert got.output_ids == want
        assert got.spec.proposed_drafts == 7 * got.spec.verify_ct  # num_draft_tokens - 1 per cycle, as SGLang counts
        accepted.append(len(got.output_ids) / got.spec.verify_ct)
    assert max(accepted) > 1.0  # the tree is accepted at all (the healthy draft predicts this target)


def test_a_budget_above_the_candidates_is_torchs_error_at_start_up():
    ns = build_parser().parse_args(["--model-path", "/m", "--speculative-algorithm", "EAGLE3",
                                    "--speculative-draft-model-path", "/d", "--speculative-num-steps", "2",
                                    "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "8"])
    with pytest.raises(StartupError, match="^selected index k out of range") as info:
        resolve(ns, target_architecture="LlamaForCausalLM")
    assert info.value.kind == "RuntimeError" and candidate_count(2, 2) == 6
    with pytest.raises(RuntimeError, match="selected index k out of range"):  # torch's own words, as SGLang meets them
        torch.topk(torch.zeros(candidate_count(2, 2)), 8 - 1)


def test_the_offline_simulation_serves_the_tree_the_lab_serves(lab: LabPaths, prompts: list[str]):
    """The reconcile's offline side (spec_simulation.simulate with topk) counts what the lab's server counts, cycle
    for cycle: the same draft, target and rules give the same tokens and verify forwards per request."""
    from remote_probes.evaluation.decoding import GREEDY
    from remote_probes.evaluation.spec_simulation import simulate

    runner = _runner(lab, *_spec(lab, 5, 4, 16))
    for text in prompts[:4]:
        ids = runner.tokenizer(text)["input_ids"]
        served = runner.generate(ids, max_new_tokens=40, stop=[], stop_token_ids=[], ignore_eos=True)
        tokens, cycles = simulate(torch, runner.target, runner.draft, ids, runner.capture, 5, 40, GREEDY, None,
                                  count_first_token=True, topk=4, num_draft_tokens=16)
        assert cycles == served.spec.verify_ct
        assert tokens == served.spec.accepted_tokens + 1  # the first token, from the prefill, counted as SGLang does


TREE_PLAYBOOK = """
name: tree-reconcile
description: A tree server benchmarked and reconciled with the draft test.
vars:
  tree_flags: {}
steps:
  - name: Start a tree server
    server: {action: start, name: tree, flags: "{{ tree_flags }}"}
    register: srv
  - name: Benchmark it
    bench: {server: tree, n: 6, max_new_tokens: 40}
    register: b
  - name: Reconcile it
    reconcile:
      target: "{{ target }}"
      engine: sglang
      n: 6
      max_new_tokens: 40
      servers: [{name: tree, bench: "{{ b }}", flags: "{{ srv.flags }}", effective: "{{ srv.effective }}"}]
    register: rc
always:
  - server: {action: stop_all}
"""


@pytest.mark.lab
async def test_a_tree_server_is_reconciled_with_the_tree_offline(lab: LabPaths, tmp_path):
    """The user's path (a playbook, the lab's server, its bench, the reconcile step): the offline side serves the
    server's tree, not a chain of its steps, and the two agree within their intervals."""
    from orchestrator.lab.building.inventory import ensure_lab, lab_inventory
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.session.reader import read_session
    from orchestrator.session.recording import build_runner, run_with_signals

    ensure_lab("seed-wiring", root=lab.root)
    inventory = lab_inventory("seed-wiring", root=lab.root)
    book = tmp_path / "tree.yaml"
    book.write_text(TREE_PLAYBOOK)
    playbook = load_playbook(book, extra_names=inventory.host_vars("lab"))
    flags = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(lab.drafts["healthy"]),
             "speculative-num-steps": 5, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 16}
    engine, directory = build_runner(playbook, inventory, sinks=[], sessions_dir=tmp_path / "sessions",
                                     extra_vars={"tree_flags": flags})
    outcome = await run_with_signals(engine)
    assert outcome.status == "ok"
    session = read_session(directory)
    rc = next(r.result for e in session.events if getattr(e, "type", "") == "step_finished"
              and e.action == "reconcile" for r in e.results)
    server = rc["by_name"]["tree"]
    assert (server["topk"], server["num_draft_tokens"], server["steps"]) == (4, 16, 5)
    assert server["decision"] == "reconciled", server["verdict"]
    # a chain of 5 on the same draft accepts at most 6 per cycle and measures well under the tree here
    assert server["predicted"]["accept_length"] > 1.0
    assert "a tree of 16 tokens (5 steps, topk 4)" in "\n".join(
        e.text for e in session.events if getattr(e, "type", "") == "output")


def test_a_penalised_tree_is_served_as_the_offline_simulation_serves_it(lab: LabPaths, prompts: list[str]):
    """SGLang's relaxed penalty (one token fed to its penalisers per verify cycle: penalties.py) on a tree: the lab's
    server and the offline simulation, each by the same rule, count the same cycles and tokens."""
    from remote_probes.evaluation.decoding import Decoding
    from remote_probes.evaluation.penalties import RULES, Penalties
    from remote_probes.evaluation.spec_simulation import simulate

    runner = _runner(lab, *_spec(lab, 5, 4, 16))
    penalty, rule = Penalties(frequency=1.0), RULES["sglang"]
    for text in prompts[:3]:
        ids = runner.tokenizer(text)["input_ids"]
        served = runner.generate(ids, max_new_tokens=40, stop=[], stop_token_ids=[], ignore_eos=True,
                                 penalties=penalty, rule=rule)
        tokens, cycles = simulate(torch, runner.target, runner.draft, ids, runner.capture, 5, 40,
                                  Decoding(penalty, rule), None, count_first_token=True, topk=4, num_draft_tokens=16)
        assert (tokens, cycles) == (served.spec.accepted_tokens + 1, served.spec.verify_ct)


def test_a_sampled_tree_is_served_as_the_offline_simulation_serves_it(lab: LabPaths, prompts: list[str]):
    """A sampled request on a tree (SGLang's target-only walk: decoding.py ``walk_tree``), with an acceptance
    threshold: the lab's server and the offline simulation, from one seed, count the same cycles and tokens."""
    from remote_probes.evaluation.decoding import Decoding
    from remote_probes.evaluation.penalties import RULES
    from remote_probes.evaluation.spec_simulation import simulate

    runner = _runner(lab, *_spec(lab, 5, 4, 16))
    decoding = Decoding(rule=RULES["sglang"], temperature=0.8, seed=21, top_p=0.95, threshold_acc=0.7)
    for text in prompts[:3]:
        ids = runner.tokenizer(text)["input_ids"]
        served = runner.generate(ids, max_new_tokens=40, stop=[], stop_token_ids=[], ignore_eos=True,
                                 rule=decoding.rule, temperature=decoding.temperature, seed=decoding.seed,
                                 top_p=decoding.top_p, threshold_acc=decoding.threshold_acc)
        tokens, cycles = simulate(torch, runner.target, runner.draft, ids, runner.capture, 5, 40, decoding, None,
                                  count_first_token=True, topk=4, num_draft_tokens=16)
        assert (tokens, cycles) == (served.spec.accepted_tokens + 1, served.spec.verify_ct)
