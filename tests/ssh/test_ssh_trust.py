"""Host keys (strict by default, `hosts trust`) and ~/.ssh/config aliases, against a real sshd."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
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


# -- asyncssh's own matching, end to end: @revoked, wildcards and negation, @cert-authority, bad lines --------

def _public_line(key: asyncssh.SSHKey) -> str:
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


async def test_revoked_host_key_is_refused_even_if_trusted(sshd_server: SshdServer, tmp_path: Path) -> None:
    pattern = f"[{sshd_server.addresses[0]}]:{sshd_server.port}"
    path = _known_hosts_with(tmp_path / "kh", f"{pattern} {_public_line(sshd_server.host_key)}\n"
                                              f"@revoked [127.0.0.*]:{sshd_server.port} {_public_line(sshd_server.host_key)}\n")
    with pytest.raises(HostKeyError) as info:
        await _connect(HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(path))))
    assert info.value.title == "Host key revoked"
    assert "REVOKED" in info.value.message and f"{path}:2" in info.value.message
    assert sshd_server.host_key.get_fingerprint("sha256") in info.value.message


def test_hosts_trust_will_not_record_a_revoked_key(sshd_server: SshdServer, tmp_path: Path) -> None:
    text = f"@revoked * {_public_line(sshd_server.host_key)}\n"
    known = _known_hosts_with(tmp_path / "kh", text)
    inventory = _inventory(tmp_path, sshd_server, known)
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory), "--yes"])
    assert result.exit_code == 1 and "REVOKED" in result.output and f"{known}:1" in result.output
    assert known.read_text() == text


async def test_wildcard_and_negated_entries(sshd_server: SshdServer, tmp_path: Path) -> None:
    first, second = sshd_server.addresses[:2]
    key, port = _public_line(sshd_server.host_key), sshd_server.port
    wildcard = _known_hosts_with(tmp_path / "wild", f"[127.0.0.?]:{port} {key}\n")
    assert await _connect(HostSpec(**sshd_server.host_spec("gpu1", first, known_hosts=str(wildcard)))) == "connected\n"
    negated = _known_hosts_with(tmp_path / "neg", f"[127.0.0.*]:{port},![{first}]:{port} {key}\n")
    assert await _connect(HostSpec(**sshd_server.host_spec("gpu2", second, known_hosts=str(negated)))) == "connected\n"
    with pytest.raises(HostKeyError, match="not known.*orchestrator hosts trust gpu1"):
        await _connect(HostSpec(**sshd_server.host_spec("gpu1", first, known_hosts=str(negated))))


async def test_a_bad_known_hosts_line_is_named_not_a_traceback(sshd_server: SshdServer, tmp_path: Path) -> None:
    path = _known_hosts_with(tmp_path / "kh", f"# mine\n[127.0.0.*]:{sshd_server.port} ssh-ed25519 AAAA-oops\n")
    with pytest.raises(HostKeyError) as info:
        await _connect(HostSpec(**sshd_server.host_spec("gpu1", known_hosts=str(path))))
    assert info.value.title == "Invalid known_hosts file" and info.value.message.startswith(f"{path}:2: ")


def test_hosts_trust_names_a_bad_known_hosts_line(sshd_server: SshdServer, tmp_path: Path) -> None:
    text = f"[127.0.0.*]:{sshd_server.port} ssh-ed25519 AAAA-oops\n"
    path = _known_hosts_with(tmp_path / "kh", text)
    inventory = _inventory(tmp_path, sshd_server, path)
    result = CliRunner(env={"COLUMNS": "1000"}).invoke(hosts_app, ["trust", "gpu1", "-i", str(inventory), "--yes"])
    assert result.exit_code == 1 and f"{path}:1: the ssh-ed25519 key does not parse" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and path.read_text() == text  # nothing written over the user's file


@pytest.fixture(scope="module")
def cert_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshdServer, asyncssh.SSHKey]]:
    """An sshd on one loopback address presenting a host certificate signed by a fresh CA."""
    from sshd_fixture import start_sshd

    server = start_sshd(tmp_path_factory.mktemp("certsshd"), hosts=1)
    server.stop()
    ca = asyncssh.generate_private_key("ssh-ed25519")
    cert = ca.generate_host_certificate(server.host_key, "gpu-cert", principals=[server.addresses[0]])
    cert_path = server.directory / "ssh_host_ed25519_key-cert.pub"
    cert_path.write_bytes(cert.export_certificate("openssh"))
    assert server.config_path is not None
    with server.config_path.open("a") as config:
        config.write(f"HostCertificate {cert_path}\n")
    server.start()
    try:
        yield server, ca
    finally:
        server.stop()


async def test_cert_authority_trusts_a_host_certificate(cert_sshd: tuple[SshdServer, asyncssh.SSHKey],
                                                        tmp_path: Path) -> None:
    server, ca = cert_sshd
    trusted_ca = _known_hosts_with(tmp_path / "ca", f"@cert-authority [127.0.0.*]:{server.port} {_public_line(ca)}\n")
    assert await _connect(HostSpec(**server.host_spec("gpu1", known_hosts=str(trusted_ca)))) == "connected\n"

    other_ca = asyncssh.generate_private_key("ssh-ed25519")
    wrong = _known_hosts_with(tmp_path / "wrong", f"@cert-authority * {_public_line(other_ca)}\n")
    with pytest.raises(HostKeyError) as info:
        await _connect(HostSpec(**server.host_spec("gpu1", known_hosts=str(wrong))))
    assert "CHANGED" in info.value.message and "@cert-authority" in info.value.message

    revoked = _known_hosts_with(tmp_path / "revoked", f"@cert-authority * {_public_line(ca)}\n@revoked * {_public_line(ca)}\n")
    with pytest.raises(HostKeyError) as info:
        await _connect(HostSpec(**server.host_spec("gpu1", known_hosts=str(revoked))))
    assert info.value.title == "Host key revoked" and "certificate authority" in info.value.message
    assert f"{revoked}:2" in info.value.message
