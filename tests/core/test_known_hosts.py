"""known_hosts matching through asyncssh (real files, real keys): wildcards, negation, hashed and port
entries, @revoked, @cert-authority, and a bad line named by file and line. No server here: see
tests/ssh/test_ssh_trust.py for the same rules against a real sshd."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import asyncssh
import pytest

from orchestrator.errors import HostKeyError
from orchestrator.inventory import HostSpec
from orchestrator.transport.known_hosts import (
    KnownHosts,
    Target,
    load_known_hosts,
    record_key,
    recorded_keys,
    refusal,
)


def _key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def _pub(key: asyncssh.SSHKey) -> str:
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


def _known(tmp_path: Path, *lines: str) -> tuple[Path, KnownHosts]:
    path = tmp_path / "known_hosts"
    path.write_text("".join(line + "\n" for line in lines))
    return path, load_known_hosts([path])


def _public(key: asyncssh.SSHKey) -> asyncssh.SSHKey:
    return asyncssh.import_public_key(key.export_public_key("openssh"))


def _target(path: Path, host: str = "gpu1.example", port: int = 22) -> Target:
    return Target(name="gpu1", host=host, port=port, user="me", known_hosts=path)


def _spec() -> HostSpec:
    return HostSpec(name="gpu1", address="gpu1.example")


def test_wildcards_star_and_question_mark(tmp_path: Path) -> None:
    star, one, ported = _key(), _key(), _key()
    _, known = _known(tmp_path, f"*.example {_pub(star)}", f"gpu?.lab {_pub(one)}", f"[*.dc]:2222 {_pub(ported)}")
    assert known.lookup("gpu1.example", 22).verdict(_public(star)) == "trusted"
    assert known.lookup("GPU1.Example", 22).verdict(_public(star)) == "trusted"  # names are lowercased, as OpenSSH does
    assert known.lookup("gpu1.other", 22).verdict(_public(star)) == "unknown"
    assert known.lookup("gpu7.lab", 22).verdict(_public(one)) == "trusted"
    assert known.lookup("gpu10.lab", 22).verdict(_public(one)) == "unknown"  # ? is exactly one character
    assert known.lookup("a.dc", 2222).verdict(_public(ported)) == "trusted"
    assert known.lookup("a.dc", 22).verdict(_public(ported)) == "unknown"


def test_negated_pattern_excludes_a_host(tmp_path: Path) -> None:
    key = _key()
    _, known = _known(tmp_path, f"*.example,!bad.example {_pub(key)}")
    assert known.lookup("good.example", 22).verdict(_public(key)) == "trusted"
    assert known.lookup("bad.example", 22).trusted == []
    assert known.lookup("bad.example", 22).verdict(_public(key)) == "unknown"


def test_hashed_entries_match_the_host_and_the_port_form(tmp_path: Path) -> None:
    def hashed(name: str) -> str:
        salt = b"0123456789abcdefghij"
        digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
        return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"

    plain, ported = _key(), _key()
    _, known = _known(tmp_path, f"{hashed('gpu1.example')} {_pub(plain)}", f"{hashed('[127.0.0.1]:2222')} {_pub(ported)}")
    assert known.lookup("gpu1.example", 22).verdict(_public(plain)) == "trusted"
    assert known.lookup("gpu2.example", 22).trusted == []
    assert known.lookup("127.0.0.1", 2222).verdict(_public(ported)) == "trusted"
    assert known.lookup("127.0.0.1", 2223).trusted == []


def test_port_entries_are_for_that_port(tmp_path: Path) -> None:
    key, other = _key(), _key()
    _, known = _known(tmp_path, f"[127.0.0.1]:2222 {_pub(key)}", f"[127.0.0.1]:2223 {_pub(other)}")
    assert known.lookup("127.0.0.1", 2222).trusted == [_public(key)]
    assert known.lookup("127.0.0.1", 2223).verdict(_public(key)) == "changed"
    assert known.lookup("127.0.0.1", 22).trusted == []
    # The address also matches when the host is reached by a name (asyncssh passes the peer's address).
    assert known.lookup("gpu1.example", 2222, addr="127.0.0.1").trusted == [_public(key)]


def test_revoked_key_is_refused_even_when_also_trusted(tmp_path: Path) -> None:
    key = _key()
    path, known = _known(tmp_path, f"gpu1.example {_pub(key)}", f"@revoked * {_pub(key)}")
    found = known.lookup("gpu1.example", 22)
    assert found.verdict(_public(key)) == "revoked"
    error = refusal(_spec(), _target(path), "Host key is revoked for host gpu1.example", known)
    assert error.title == "Host key revoked"
    assert "REVOKED" in error.message and f"{path}:2" in error.message
    assert _public(key).get_fingerprint("sha256") in error.message
    assert recorded_keys(path, "gpu1.example") == []  # `hosts trust` does not count it as trusted


def test_revoked_on_a_port_survives_asyncssh_fallback_to_the_bare_host(tmp_path: Path) -> None:
    """asyncssh retries ``[h]:port`` as ``h`` when nothing is trusted for the port; the revocation must stay."""
    key = _key()
    _, known = _known(tmp_path, f"@revoked [127.0.0.1]:2222 {_pub(key)}", f"127.0.0.1 {_pub(key)}")
    found = known.lookup("127.0.0.1", 2222)
    assert _public(key) in found.trusted and found.verdict(_public(key)) == "revoked"
    # ... and what asyncssh.connect itself is handed carries it too.
    assert _public(key) in known.match("127.0.0.1", "127.0.0.1", 2222)[2]


def test_cert_authority_line_trusts_certificates_it_signed(tmp_path: Path) -> None:
    ca, host_key, stranger = _key(), _key(), _key()
    cert = ca.generate_host_certificate(host_key, "gpu1", principals=["gpu1.example"])
    path, known = _known(tmp_path, f"@cert-authority *.example {_pub(ca)}")
    found = known.lookup("gpu1.example", 22)
    assert found.authorities == [_public(ca)] and found.trusted == []
    assert cert.signing_key in found.authorities  # what asyncssh checks for a host certificate
    cert.validate(asyncssh.public_key.CERT_TYPE_HOST, "gpu1.example")  # and the principal check it then makes
    bogus = stranger.generate_host_certificate(host_key, "gpu1", principals=["gpu1.example"])
    assert bogus.signing_key not in found.authorities
    assert known.lookup("gpu1.other", 22).authorities == []
    # A refused certificate for a CA-covered host is a change, not an unknown host.
    known.lookup("gpu1.example", 22)  # what asyncssh.connect does before refusing (the refusal explains it)
    error = refusal(_spec(), _target(path), "Host CA key is not trusted for host gpu1.example", known)
    assert "CHANGED" in error.message and "@cert-authority" in error.message and f"{path}:1" in error.message
    revoked_ca = refusal(_spec(), _target(path), "Host CA key is revoked for host gpu1.example", known)
    assert "certificate authority" in revoked_ca.message and "REVOKED" in revoked_ca.message


def test_unknown_host_is_refused_with_the_trust_hint(tmp_path: Path) -> None:
    path, known = _known(tmp_path, f"other.example {_pub(_key())}")
    error = refusal(_spec(), _target(path), "Host key is not trusted for host gpu1.example", known)
    assert "not known" in error.message and "orchestrator hosts trust gpu1" in error.message
    missing = load_known_hosts([tmp_path / "absent"])  # a missing file trusts nothing
    assert missing.lookup("gpu1.example", 22).trusted == []


@pytest.mark.parametrize("line, problem", [
    ("gpu1.example", "no key after the host names"),
    ("@trusted gpu1.example {key}", "unknown marker @trusted"),
    ("@revoked", "no host names and no key"),
    ("gpu1.example ssh-ed25519", "no base64 key data"),
    ("gpu1.example ssh-ed25519 AAAAnotakey", "does not parse"),
    ("gpu1.example ssh-rsa {b64}", "the ssh-rsa key does not parse"),
    ("|1|c2FsdA== {key}", "Invalid known hosts hash entry"),
    ("|2|YWJj|YWJj {key}", "Invalid known hosts hash type"),
    ("gpu1.example {cert}", "host certificate, not a key"),
])
def test_a_bad_line_names_the_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    good, ca = _key(), _key()
    cert = " ".join(ca.generate_host_certificate(good, "x").export_certificate("openssh").decode().split()[:2])
    text = line.format(key=_pub(good), b64=_pub(good).split()[1], cert=cert)
    path = tmp_path / "known_hosts"
    path.write_text(f"# comment\n\nok.example {_pub(good)}\n{text}\n")
    with pytest.raises(HostKeyError) as info:
        load_known_hosts([path])
    assert info.value.title == "Invalid known_hosts file"
    assert info.value.message.startswith(f"{path}:4: ") and problem in info.value.message


def test_a_key_type_asyncssh_does_not_know_is_skipped(tmp_path: Path) -> None:
    key = _key()
    _, known = _known(tmp_path, "gpu1.example ssh-future-algo AAAAB3NzaC1", f"gpu1.example {_pub(key)}")
    assert known.lookup("gpu1.example", 22).trusted == [_public(key)]


def test_an_unreadable_file_is_a_message(tmp_path: Path) -> None:
    directory = tmp_path / "kh"
    directory.mkdir()
    with pytest.raises(HostKeyError, match="cannot read the known_hosts file"):
        load_known_hosts([directory])


def test_record_key_replaces_only_the_plain_entry_for_the_pattern(tmp_path: Path) -> None:
    old, new, ca, revoked, wild = _key(), _key(), _key(), _key(), _key()
    path, _ = _known(
        tmp_path, f"[127.0.0.1]:2222 {_pub(old)}", f"@cert-authority [127.0.0.1]:2222 {_pub(ca)}",
        f"@revoked [127.0.0.1]:2222 {_pub(revoked)}", f"[127.0.0.*]:2222 {_pub(wild)}",
    )
    record_key(path, "[127.0.0.1]:2222", _public(new))
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and _pub(old) not in path.read_text() and lines[-1] == f"[127.0.0.1]:2222 {_pub(new)}"
    found = load_known_hosts([path]).lookup("127.0.0.1", 2222)
    assert found.verdict(_public(new)) == "trusted" and found.verdict(_public(revoked)) == "revoked"
    assert found.authorities == [_public(ca)]


async def test_ssh_config_known_hosts_files_and_none_does_not_turn_checking_off(tmp_path: Path) -> None:
    from orchestrator.transport.known_hosts import DEFAULT_KNOWN_HOSTS, resolve_target

    config = tmp_path / "config"
    config.write_text(f"Host two\n  UserKnownHostsFile {tmp_path}/a {tmp_path}/b\nHost off\n  UserKnownHostsFile none\n")
    two = await resolve_target(HostSpec(name="two", ssh_config=str(config)))
    assert two.files == [tmp_path / "a", tmp_path / "b"] and two.known_hosts == tmp_path / "a"
    # asyncssh alone would stop checking host keys here; we check against the default file instead.
    off = await resolve_target(HostSpec(name="off", ssh_config=str(config)))
    assert off.files == [Path(DEFAULT_KNOWN_HOSTS).expanduser()]
