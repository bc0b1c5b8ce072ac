"""`orchestrator hosts ...`: host-key trust. (`exec` lives elsewhere.)

``hosts trust HOST`` connects just far enough to read the server's host key, prints its fingerprint and
records it in known_hosts only when the user confirms (or passes ``--yes``). There is no silent
trust-on-first-use and no switch that turns checking off.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from orchestrator.errors import OrchestratorError, UserInputError

if TYPE_CHECKING:
    from orchestrator.inventory import HostSpec

hosts_app = typer.Typer(help="Host keys and connections.", no_args_is_help=True)


@hosts_app.callback()
def _hosts() -> None:
    """Host keys and connections."""  # a callback keeps `trust` a subcommand even while it is the only one


def _spec_for(host: str, inventory: Path | None, known_hosts: Path | None, ssh_config: Path | None) -> HostSpec:
    from orchestrator.inventory import HostSpec, load_inventory

    """The inventory's entry for HOST, or a one-off spec (an ssh_config alias, an address, host:port)."""
    spec: HostSpec | None = None
    if inventory is not None:
        inv = load_inventory(inventory)
        if host in inv.hosts:
            spec = inv.hosts[host]
    if spec is None:
        name, port = host, None
        if ":" in host and host.rsplit(":", 1)[1].isdigit() and not host.startswith("["):
            name, port_text = host.rsplit(":", 1)
            port = int(port_text)
        if not name or any(c.isspace() for c in name):
            raise UserInputError(f"invalid host {host!r}")
        spec = HostSpec(name=host, address=name, port=port)
    if spec.kind == "local":
        raise UserInputError(f"{host} uses the local transport: there is no host key to trust")
    updates: dict[str, str] = {}
    if known_hosts is not None:
        updates["known_hosts"] = str(known_hosts)
    if ssh_config is not None:
        updates["ssh_config"] = str(ssh_config)
    return spec.model_copy(update=updates)


@hosts_app.command("trust")
def trust(
    host: Annotated[str, typer.Argument(help="inventory host name, ~/.ssh/config alias, or address[:port]")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="record without asking (after reading the fingerprint)")] = False,
    inventory: Annotated[Path | None, typer.Option("--inventory", "-i", help="inventory YAML file")] = None,
    known_hosts: Annotated[Path | None, typer.Option("--known-hosts", help="known_hosts file to record into")] = None,
    ssh_config: Annotated[Path | None, typer.Option("--ssh-config", help="OpenSSH client config to read")] = None,
) -> None:
    """Show HOST's SSH host key fingerprint and record it in known_hosts once you confirm."""
    # asyncssh is heavy: imported only when a host is actually contacted (keeps `--help` fast).
    from orchestrator.transport.known_hosts import (
        fetch_host_key,
        fingerprint,
        load_known_hosts,
        record_key,
        revoked_message,
    )

    out, err = Console(), Console(stderr=True)
    try:
        spec = _spec_for(host, inventory, known_hosts, ssh_config)
        target, key = asyncio.run(fetch_host_key(spec))
        known = load_known_hosts(target.files)  # a bad line is an error (file:line), before anything is written
    except OrchestratorError as exc:
        err.print(Panel(escape(exc.message), title=exc.title, border_style="red"))
        raise typer.Exit(exc.exit_code) from None
    found = known.lookup(target.host, target.port)
    verdict = found.verdict(key)
    new_print = fingerprint(key)
    out.print(f"Host      {spec.name} -> {target.host}:{target.port}")
    out.print(f"Key       {key.get_algorithm()} {new_print}")
    out.print(f"File      {target.known_hosts}")
    if verdict == "revoked":
        out.print("[bold red]Status    the key is REVOKED[/]; not recorded")
        err.print(Panel(escape(revoked_message(spec, target, known, [key], refusing="Not recording it")), title="Host key revoked", border_style="red"))
        raise typer.Exit(1)
    if verdict == "trusted":
        out.print("Status    already trusted; nothing to do")
        return
    if found.trusted:
        old = ", ".join(fingerprint(k) for k in found.trusted)
        out.print(f"[bold red]Status    the key CHANGED[/] (recorded: {old}); trusting replaces the old entry")
    elif found.authorities:
        out.print("Status    not recorded (this host is covered by @cert-authority lines; its plain key is not)")
    else:
        out.print("Status    not recorded yet")
    if not yes and not typer.confirm("Compare the fingerprint with the server's. Trust this key?", default=False):
        out.print("Not recorded.")
        raise typer.Exit(1)
    try:
        record_key(target.known_hosts, target.pattern, key)
    except OSError as exc:
        err.print(Panel(escape(f"cannot write {target.known_hosts}: {exc}"), title="Host key not recorded", border_style="red"))
        raise typer.Exit(1) from None
    out.print(f"Recorded  {target.pattern} in {target.known_hosts}")
