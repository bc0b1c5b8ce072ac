"""`server`: start, stop, restart, inspect inference servers (SGLang, the lab) with candidate flags.

```yaml
- server: {action: start, engine: lab, name: spec, model: "{{ target }}", port: auto, ready_timeout: 120,
           flags: {speculative-algorithm: EAGLE3, speculative-draft-model-path: "{{ draft }}",
                   speculative-num-steps: 1, speculative-eagle-topk: 1, speculative-num-draft-tokens: 16},
           env: {}, launcher: null, python: null, keep: false}
  register: srv     # srv.url, srv.port, srv.pgid, srv.effective, srv.overrides, srv.log_tail, srv.ready_s ...
- server: {action: restart, name: spec, flags: {speculative-num-steps: 15}}   # merged into the old flags
- server: {action: status, name: spec}
- server: {action: stop, name: spec}
- server: {action: stop_all}
```
Flags: ``name: 3`` -> ``--name 3``; true -> bare flag; false/null -> omitted; lists -> ``--name a b``.
``srv.overrides`` lists every requested flag the server resolved differently:
``{flag, requested, effective, source: server_info|log, detail}``. A start that fails registers ``srv.failure``
(with ``ignore_errors: true`` the playbook goes on): ``{cause, label, summary, reason, exit_code, error_lines,
last_lines}``, cause one of unknown_flag, ambiguous_flag, invalid_flag, bad_combination, port_in_use,
out_of_memory, draft_load, timeout, error, exited (orchestrator/servers/startlog.py); ``srv.failure`` is null on
success. Before the start the installed SGLang's own parser checks the flags on the host (``srv.preflight``: route,
version, errors, adjustments; orchestrator/servers/preflight.py): an unknown or ambiguous flag, or a combination
that crashes SGLang at start-up, fails the step in seconds (failure reason ``preflight``) and nothing is started.
``preflight: false`` skips the check. ``engine`` defaults to the host var
``engine`` (the lab inventory sets ``lab``), else ``sglang``; ``model`` to the host var ``target``.
The server is stopped at session end (also on failure or cancel) unless ``keep: true``.
``nodes: N`` starts ONE logical server across N hosts (servers/ranks.py): rank 0 on the step's first host, ranks
1..N-1 on the next of the step's hosts, or, when the step has fewer, the next nodes of rank 0's Slurm allocation
(host var ``slurm_nodes``). Every rank gets the same argv plus the engine's own multi-node flags (SGLang and the lab:
``--nnodes N --node-rank R --dist-init-addr ADDR:PORT``, ADDR = rank 0's address: its host var ``node_addr``, its
Slurm NodeAddr, its SSH address, else 127.0.0.1; PORT picked free on rank 0). A ``nodes:`` step runs once, not once
per host. Readiness, ``srv.url`` and ``bench`` are rank 0's; ``srv.ranks`` lists every rank (host, pid, log); stop
and the session's end stop every rank (on Slurm, ``scancel`` of a rank's step is the last resort). vLLM refuses
``nodes > 1`` (its multi-node serving needs a Ray cluster started beforehand).
``capture: [ids]`` (vLLM, SGLang): the server also returns these layers' hidden states for every request (vLLM's
``extract_hidden_states`` method, remote_probes/engine/engine_states.py; SGLang's ``/generate`` with
``return_hidden_states`` on the target's own class with EAGLE-3 aux capture on, remote_probes/engine/sglang_states.py)
and registers ``srv.states_from``, which
``draft_test`` and ``reconcile`` take (``states_from: "{{ srv.states_from }}"``) to read the target's states from
the engine instead of loading it: the path for targets that do not fit one process. Such a server drafts nothing.
``api-key`` (and ``admin-api-key``) among the flags: the server client sends the key as a bearer token on every
call (readiness, /server_info, /flush_cache, bench), and the value is masked like a secret var wherever the
flags, the command or the server's log are shown; give it from a secret var (``api-key: "{{ api_key }}"``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from orchestrator.actions.base import Action, ActionArgs, ActionContext, StepFailed
from orchestrator.errors import OrchestratorError

# a mapping value is one JSON argument (vLLM's --speculative-config {method: eagle3, model: ..., ...})
FlagMap = dict[str, str | int | float | bool | list[str | int | float] | dict[str, Any] | None]


def server_keys(args: Any) -> list[str]:
    """API keys in a step's arguments: ``api_key`` (bench) and the adapters' key flags (``--api-key``,
    ``--admin-api-key``) in ``flags`` (server, sweep, tune), however they are spelled."""
    from orchestrator.servers.flags import flag_key
    from orchestrator.servers.registry import all_key_flags

    if not isinstance(args, dict):
        return []
    keys = [args.get("api_key")]
    flags = args.get("flags")
    if isinstance(flags, dict):
        known = all_key_flags()
        keys += [v for k, v in flags.items() if flag_key(str(k)) in known]
    return [str(k) for k in keys if isinstance(k, (str, int)) and not isinstance(k, bool) and str(k)]


class ServerLaunchArgs(ActionArgs):
    """What `server` start and `sweep` share."""

    engine: str | None = Field(default=None, description="sglang | vllm | lab (default: host var 'engine', else sglang)")
    model: str | None = Field(default=None, description="--model-path (default: host var 'target')")
    flags: FlagMap = Field(default_factory=dict, description="server flags without leading dashes")
    port: Annotated[int, Field(ge=1, le=65535)] | Literal["auto"] = Field(default="auto", description="a port number, or auto to pick a free one")
    bind: str = Field(default="127.0.0.1", description="--host the server listens on")
    ready_timeout: float | None = Field(default=None, gt=0, description="seconds (default: engine's, 600 for sglang)")
    env: dict[str, str | int | float | bool] = Field(default_factory=dict)
    launcher: str | list[str] | None = Field(default=None, description="e.g. 'sglang serve'")
    python: str | None = Field(default=None, description="python to run the server with (default: host's)")
    grace: float | None = Field(default=None, ge=0, description="seconds between SIGTERM and SIGKILL on stop")
    preflight: bool = Field(default=True, description="check the flags with the installed SGLang's own parser "
                                                      "before starting (a refusal fails the start in seconds)")

    @classmethod
    def secret_values(cls, args: Any) -> list[str]:
        return server_keys(args)

    @model_validator(mode="after")
    def _check(self) -> ServerLaunchArgs:
        for name in self.env:
            if not name.isidentifier():
                raise ValueError(f"invalid environment variable name {name!r}")
        return self


class ServerStepArgs(ServerLaunchArgs):
    action: Literal["start", "stop", "restart", "status", "stop_all"] = "start"
    name: str = Field(default="server", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    keep: bool = Field(default=False, description="leave it running after the session ends")
    replace_flags: bool = Field(default=False, description="restart: use only the new flags, not merged")
    nodes: int = Field(default=1, ge=1, le=1024, description="start: one server across this many hosts (rank 0 = "
                                                              "the step's first host; the engine's multi-node flags)")
    capture: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, min_length=1, description="start (vLLM, SGLang): serve the target so that it returns these "
        "layers' hidden states (vLLM's extract_hidden_states; SGLang's return_hidden_states with the target's class "
        "capturing them; id k = transformers' hidden_states[k], id N the last layer before the final norm); "
        "registers states_from, what draft_test and reconcile take to read them")


def host_var(ctx: ActionContext, name: str) -> Any:
    value = ctx.variables.get(name)
    if value is None and ctx.host_spec is not None:
        value = ctx.host_spec.vars.get(name)
    return value


def launch_parts(args: ServerLaunchArgs, ctx: ActionContext) -> tuple[Any, Any, str, bool]:
    """(adapter, LaunchSpec, client python, auto_port) for a start."""
    from orchestrator.servers.base import LaunchSpec
    from orchestrator.servers.registry import get_adapter

    adapter = get_adapter(args.engine or host_var(ctx, "engine") or "sglang")
    host_python = ctx.host_spec.python if ctx.host_spec is not None else "python3"
    python = args.python or host_python
    model = args.model if args.model is not None else host_var(ctx, "target")
    env = {k: (("true" if v else "false") if isinstance(v, bool) else str(v)) for k, v in args.env.items()}
    auto = args.port == "auto"
    spec = LaunchSpec(model=str(model) if model else None, flags=dict(args.flags), port=0 if auto else int(args.port),
                      bind=args.bind, python=python, launcher=args.launcher, env=env)
    adapter.check_flags(spec.flags)
    adapter.build_argv(spec)  # bad flag names fail here, before anything starts
    return adapter, spec, host_python, auto


def rank_hosts(nodes: int, ctx: ActionContext) -> list[str]:
    """The hosts of a ``nodes: N`` server in rank order: the step's host, the step's other hosts, then the other
    nodes of its Slurm allocation. :raises StepFailed: when there are fewer than N."""
    pool = [ctx.host, *(h for h in ctx.step_hosts if h != ctx.host)]
    siblings = ctx.host_spec.vars.get("slurm_nodes") if ctx.host_spec is not None else None
    pool += [h for h in (siblings if isinstance(siblings, list) else []) if str(h) not in pool]
    if len(pool) < nodes:
        raise StepFailed(f"nodes: {nodes} needs {nodes} hosts, but the step has {len(pool)} "
                         f"({', '.join(map(str, pool))}): target a group of {nodes} (or a Slurm allocation's node)")
    return [str(h) for h in pool[:nodes]]


def rank0_address(ctx: ActionContext) -> str:
    """Where the workers reach rank 0 (the dist-init address): set, Slurm's NodeAddr, SSH's address, loopback."""
    spec = ctx.host_spec
    if spec is None:
        return "127.0.0.1"
    for key in ("node_addr", "slurm_node_addr"):
        if spec.vars.get(key):
            return str(spec.vars[key])
    if spec.kind == "ssh" and spec.address:
        return spec.address
    return "127.0.0.1"


async def with_capture(args: ServerStepArgs, ctx: ActionContext, adapter: Any, spec: Any) -> None:
    """The flags and environment that make the server return the ``capture`` layers' hidden states, from the probes
    tree pushed to the host (on PYTHONPATH): vLLM's own ``extract_hidden_states`` method and the connector it loads,
    writing under the session's workdir there (remote_probes/engine/engine_states.py); SGLang's target class with
    its EAGLE-3 aux capture on, which SGLang loads by ``SGLANG_EXTERNAL_MODEL_PACKAGE``
    (remote_probes/engine/sglang_states.py)."""
    from orchestrator.probes import PUSH_PATTERN, probes_dir

    if adapter.name not in ("vllm", "sglang"):
        raise StepFailed(f"capture: needs a vLLM or an SGLang server; {adapter.name!r} has no capture path here: "
                         "serve the target with engine: vllm or sglang (a real one on a CPU: `orchestrator lab "
                         "vllm-host`, `orchestrator lab sglang-host`)")
    own = ("speculative-config", "kv-transfer-config") if adapter.name == "vllm" else (
        "speculative-algorithm", "speculative-draft-model-path")
    clash = sorted(k for k in own if spec.flags.get(k) is not None)
    if clash:
        raise StepFailed(f"capture: {'sets' if adapter.name == 'vllm' else 'serves without'} {', '.join(clash)} "
                         f"(a capture server drafts nothing): remove {'it' if len(clash) == 1 else 'them'} from "
                         "this step's flags")
    transport = ctx.require_transport()
    tree = await transport.put_tree(probes_dir(), pattern=PUSH_PATTERN)
    if adapter.name == "vllm":
        from remote_probes.engine.engine_states import capture_flags

        store = f"{await transport.workdir()}/captures/{args.name}"
        spec.flags.update(capture_flags(args.capture or [], store))
    else:
        from remote_probes.engine.sglang_states import capture_env
        from remote_probes.engine.sglang_states import capture_flags as sglang_flags

        read = await transport.run(["cat", f"{spec.model}/config.json"], timeout=30)
        try:
            archs = [str(a) for a in (json.loads(read.stdout).get("architectures") or [])]
        except ValueError:
            archs = []
        if read.exit_code != 0 or not archs:
            raise StepFailed(f"capture: cannot read the target's architectures from {spec.model}/config.json on "
                             f"{ctx.host} (SGLang's capture class subclasses the target's own)")
        spec.env.update({k: v for k, v in capture_env(args.capture, archs, root=tree).items() if k != "PYTHONPATH"})
        spec.flags.update(sglang_flags(spec.flags.get("context-length")))
    path = spec.env.get("PYTHONPATH")
    spec.env["PYTHONPATH"] = f"{tree}:{path}" if path else tree
    adapter.build_argv(spec)


async def states_from(record: Any, args: ServerStepArgs, ctx: ActionContext) -> dict[str, Any]:
    """What a draft test needs to read this server's states, and how it serves (said in the draft test's result):
    the version from vLLM's own start-up line ("Initializing a V1 LLM engine (v0.32.0)"), SGLang's from its
    /server_info."""
    version = (record.diff.get("effective") or {}).get("version") if record.adapter.name == "sglang" else None
    if record.adapter.name == "vllm" and record.handle is not None and record.handle.log_path:
        found = await ctx.require_transport().run(
            ["grep", "-m1", "-oE", r"LLM engine \(v[^)]+\)", record.handle.log_path], timeout=30)
        hit = found.stdout.strip()
        version = hit[len("LLM engine (v"):-1] if hit else None
    tp = record.spec.flags.get("tensor-parallel-size") or record.spec.flags.get("tp") or 1
    return {"url": record.url, "layers": sorted(set(args.capture or [])), "model": record.spec.model,
            "engine": record.adapter.name, "version": version, "tensor_parallel": int(tp), "nodes": record.nodes}


class ServerAction(Action[ServerStepArgs]):
    kind = "server"
    Args = ServerStepArgs
    takes_server_flags = True
    summary = "Start/stop/restart an inference server with candidate flags; registers url, effective args, overrides."

    @classmethod
    def runs_once(cls, raw_args: Any) -> bool:
        # a multi-node start is one server over the step's hosts (any templated `nodes:` counts: decided unrendered)
        return isinstance(raw_args, dict) and raw_args.get("nodes") not in (None, 1, "1")

    async def _workers(self, args: ServerStepArgs, ctx: ActionContext, adapter: Any, spec: Any) -> list[Any]:
        from orchestrator.servers.ranks import RankHost

        if args.nodes == 1:
            return []
        adapter.rank_argv(spec, nnodes=args.nodes, rank=0, dist_init_addr="127.0.0.1:1")  # refusals first
        if ctx.peer is None:
            raise StepFailed(f"nodes: {args.nodes} needs the session's other hosts (run it from a playbook)")
        workers = []
        for host in rank_hosts(args.nodes, ctx)[1:]:
            host_spec, transport = await ctx.peer(host)
            workers.append(RankHost(host, transport, python=args.python or host_spec.python))
        return workers

    async def run(self, args: ServerStepArgs, ctx: ActionContext) -> dict[str, Any]:
        from orchestrator.servers.manager import ServerStartError
        manager = ctx.services.servers
        on_log = manager.log_forwarder(ctx.step_id, ctx.host)
        try:
            if args.action == "start":
                adapter, spec, client_python, auto = launch_parts(args, ctx)
                if args.capture is not None:
                    await with_capture(args, ctx, adapter, spec)
                workers = await self._workers(args, ctx, adapter, spec)
                record = await manager.start(
                    name=args.name, host=ctx.host, transport=ctx.require_transport(), adapter=adapter, spec=spec,
                    client_python=client_python, ready_timeout=args.ready_timeout, keep=args.keep, grace=args.grace,
                    step_id=ctx.step_id, on_log=on_log, auto_port=auto, preflight=args.preflight,
                    workers=workers, dist_host=rank0_address(ctx))
                if workers:
                    ctx.output(f"one server over {record.nodes} nodes: "
                               + ", ".join(f"rank {r.rank} on {r.host}" for r in record.ranks) + "\n")
                result = record.as_result()
                if args.capture is not None:
                    result["states_from"] = await states_from(record, args, ctx)
                    ctx.output(f"capturing layers {result['states_from']['layers']} for the draft test "
                               f"({result['states_from']['engine']} {result['states_from']['version'] or ''}, "
                               f"tensor parallel {result['states_from']['tensor_parallel']})\n")
                if record.launcher is not None and record.launcher.name not in ("given", "default"):
                    ctx.output(f"launcher: {record.launcher.name} ({record.launcher.reason})\n")
                if (result.get("decisions") or {}).get("summary"):
                    ctx.output(f"start-up decisions: {result['decisions']['summary']}\n")
                if record.preflight is not None:
                    ctx.output(record.preflight.note() + "\n")
                for o in result["overrides"]:
                    ctx.output(f"override: {o['flag']} requested {o['requested']!r}, server uses {o['effective']!r} "
                               f"({o['source']})\n")
                return result
            if args.action == "restart":
                record = await manager.restart(args.name, flags=dict(args.flags) or None,
                                               replace_flags=args.replace_flags, ready_timeout=args.ready_timeout,
                                               step_id=ctx.step_id, on_log=on_log)
                return record.as_result()
            if args.action == "stop":
                return (await manager.stop(args.name)).as_result()
            if args.action == "status":
                return await manager.status(args.name)
            stopped = await manager.stop_all(include_kept=True)
            return {"stopped": stopped, "count": len(stopped)}
        except ServerStartError as exc:
            check = exc.result.get("preflight")
            if check and not check["ok"]:
                ctx.output(f"pre-flight: SGLang {check['version']} ({check['route']} route) refuses the flags\n")
            raise StepFailed(exc.message, exc.result) from None
        except OrchestratorError as exc:
            raise StepFailed(exc.message) from None
