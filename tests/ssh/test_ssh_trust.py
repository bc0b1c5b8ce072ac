"""Host keys (strict by default, `hosts trust`) and ~/.ssh/config aliases, against a real sshd."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest
import yaml
from sshd_fixture import SshdServer
from typer.testing import CliRunner

from orchestrator.cli.hosts import hosts_app
from orchestrator.errors import HostKeyError, HostUnreachable
from orchestrator.inventory import HostSpec
from orchestrator.transport.ssh import SshTransport


def _known_hosts_with(path: Path, line: str = "") -> Path:
    path.write_text(line)
    return path


async def _connect(spec: HostSpec) -> str:
    t = SshTransport(spec, session_id="trust")
    try:
        return (await t.run("echo connected")).stdout
    finally:
        await t.close()


async def test_unknown_host_key_is_refused_with_what_to_do(sshd_server: SshdServer, tmp_path: Path) -> None:
    empty = _known_hosts_with(tmp_path / "known_hosts")
    spec = HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(empty)))
    with pytest.raises(HostKeyError) as info:
        await _connect(spec)
    assert "not known" in info.value.message and "orchestrator hosts trust gpu1" in info.value.message
    # A missing file is "nothing trusted", not "checking off".
    missing = HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(tmp_path / "absent")))
    with pytest.raises(HostKeyError, match="not known"):
        await _connect(missing)


async def test_changed_host_key_is_refused(sshd_server: SshdServer, tmp_path: Path) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().split()
    path = _known_hosts_with(tmp_path / "kh", f"[{sshd_server.addresses[0]}]:{sshd_server.port} {impostor[0]} {impostor[1]}\n")
    spec = HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(path)))
    with pytest.raises(HostKeyError) as info:
        await _connect(spec)
    assert "CHANGED" in info.value.message and "orchestrator hosts trust gpu1" in info.value.message


def _inventory(tmp_path: Path, server: SshdServer, known_hosts: Path) -> Path:
    spec = server.host_spec("gpu1", known_hosts=str(known_hosts))
    spec.pop("name")
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump({"hosts": {"gpu1": spec}}))
    return path


def test_hosts_trust_records_only_on_confirm(sshd_server: SshdServer, tmp_path: Path) -> None:
    known = _known_hosts_with(tmp_path / "kh")
    inventory = _inventory(tmp_path, sshd_server, known)
    runner = CliRunner()
    expected = sshd_server.host_key.get_fingerprint("sha256")

    declined = runner.invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory)], input="n\n")
    assert declined.exit_code == 1 and expected in declined.output and "Not recorded" in declined.output
    assert known.read_text() == ""

    accepted = runner.invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory), "--yes"])
    assert accepted.exit_code == 0, accepted.output
    assert expected in accepted.output
    assert known.read_text().startswith(f"[{sshd_server.addresses[0]}]:{sshd_server.port} ssh-ed25519 ")
    spec = HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(known)))
    assert asyncio.run(_connect(spec)) == "connected\n"

    again = runner.invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory)])
    assert again.exit_code == 0 and "already trusted" in again.output


def test_hosts_trust_replaces_a_changed_key_after_confirming(sshd_server: SshdServer, tmp_path: Path) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().split()
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key("openssh").decode().split()
    keep = f"other.example {other[0]} {other[1]}"
    pattern = f"[{sshd_server.addresses[0]}]:{sshd_server.port}"
    known = _known_hosts_with(tmp_path / "kh", f"{keep}\n{pattern} {impostor[0]} {impostor[1]}\n")
    inventory = _inventory(tmp_path, sshd_server, known)
    result = CliRunner().invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory)], input="y\n")
    assert result.exit_code == 0, result.output
    assert "CHANGED" in result.output
    lines = known.read_text().splitlines()
    assert lines[0] == keep and len(lines) == 2 and impostor[1] not in lines[1]
    assert asyncio.run(_connect(HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(known))))) == "connected\n"


def test_hosts_trust_bad_input_is_a_message(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(hosts_app, ["trust", "bad host", "--known-hosts", str(tmp_path / "kh")])
    assert result.exit_code == 2 and "invalid host" in result.output and "Traceback" not in result.output
    down = runner.invoke(hosts_app, ["trust", "127.0.0.250:1", "--known-hosts", str(tmp_path / "kh"),
                                     "--ssh-config", str(tmp_path / "none")])
    assert down.exit_code == 1 and "cannot" in down.output


def _write_config(path: Path, server: SshdServer, text: str) -> Path:
    path.write_text(text.format(port=server.port, user=server.user, key=server.client_key_path, kh=server.known_hosts,
                                a2=server.addresses[1], a3=server.addresses[2], down=server.down_address))
    return path


async def test_ssh_config_alias_hostname_port_user_identityfile(sshd_server: SshdServer, tmp_path: Path) -> None:
    config = _write_config(tmp_path / "config", sshd_server, (
        "Host gpu-alias\n  Hostname {a2}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {kh}\n"
    ))
    spec = HostSpec(name="gpu-alias", ssh_config=str(config), state_dir=str(tmp_path / "state"))
    t = SshTransport(spec, session_id="alias")
    try:
        result = await t.run('echo "$SSH_CONNECTION"')
        assert result.stdout.split()[2:] == [sshd_server.addresses[1], str(sshd_server.port)]
    finally:
        await t.close()


async def test_ssh_config_proxyjump(sshd_server: SshdServer, tmp_path: Path) -> None:
    config = _write_config(tmp_path / "config", sshd_server, (
        "Host jump\n  Hostname {a2}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {kh}\n"
        "Host deadjump\n  Hostname {down}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {kh}\n"
        "Host behind\n  Hostname {a3}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {kh}\n"
        "  ProxyJump jump\n"
        "Host behind-dead\n  Hostname {a3}\n  Port {port}\n  User {user}\n  IdentityFile {key}\n  UserKnownHostsFile {kh}\n"
        "  ProxyJump deadjump\n"
    ))
    t = SshTransport(HostSpec(name="behind", ssh_config=str(config), state_dir=str(tmp_path / "s")), session_id="jump")
    try:
        result = await t.run('echo "$SSH_CONNECTION"')
        assert result.stdout.split()[2:] == [sshd_server.addresses[2], str(sshd_server.port)]
    finally:
        await t.close()
    # The same target through a jump host that is down fails: the ProxyJump line is really used.
    dead = SshTransport(HostSpec(name="behind-dead", ssh_config=str(config), connect_timeout=5), session_id="jump")
    with pytest.raises(HostUnreachable):
        await dead.connect()
