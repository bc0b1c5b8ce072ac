"""Inventory: which hosts exist, how to reach them, and their variables.

```yaml
hosts:
  gpu1: {address: 10.0.0.5, user: ubuntu, port: 22, key: ~/.ssh/id_ed25519, python: /opt/venv/bin/python}
  gpu2: {}                      # an ~/.ssh/config alias: Hostname/User/Port/IdentityFile/ProxyJump apply
  localhost: {}                 # always the local transport
groups:
  gpu: {hosts: [gpu1, gpu2], vars: {model: /models/kimi}}
vars: {port: 30000}             # for every host
slurm:                          # a Slurm allocation: its nodes become hosts of group `cluster` (orchestrator.slurm)
  cluster: {partition: gpu, nodes: 2, time: "1:00:00"}
exec_policy:                    # what `orchestrator mcp`'s exec tool may run (a host may have its own)
  allow: ["python -c 'import torch; print(torch.__version__)'"]
  deny: ["cat /etc/shadow"]
```
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.errors import UserInputError

LOCAL_NAMES = {"localhost", "local", "127.0.0.1"}

# Commands that only read: what an assistant may run without `--allow-exec`. Globs over one simple command
# (argv joined by spaces); `re:` marks a regex (full match) where a glob would let too much through.
READ_ONLY_COMMANDS: tuple[str, ...] = (
    "cat *", "head", "head *", "tail *", "ls", "ls *", "grep *", "egrep *", "rg *", "wc *", "stat *", "file *",
    "du *", "df", "df *", "free", "free *", "uname", "uname *", "hostname", "uptime", "whoami", "id", "date", "pwd",
    "echo *", "printenv", "printenv *", "env", "ps", "ps *", "lscpu", "nproc", "true", "which *", "readlink *",
    "realpath *", "basename *", "dirname *", "md5sum *", "sha256sum *", "sort *", "uniq *", "cut *", "diff *",
    "tree *", "find *", "ss *",
    "nvidia-smi", "nvidia-smi -L", "nvidia-smi -q*", "nvidia-smi --query*", "nvidia-smi topo *",
    "git log*", "git show*", "git diff*", "git status*", "git rev-parse*",
    # sed only as a printer of line ranges (the seed's `sed -n 155,200p file`): sed scripts can write and execute
    r"re:sed -n \d+(,\+?\d+)?p( \S+)+",
    # pip's read-only verbs, from any python (the host's python is often a venv path)
    r"re:(\S*/)?pip3? (list|show|freeze)( .*)?", r"re:(\S*/)?python[0-9.]* -m pip (list|show|freeze)( .*)?",
    r"re:(\S*/)?python[0-9.]* (--version|-V)",
)
# Never run, even with --allow-exec: privilege changes, machine state, private keys, find's writers.
DENIED_COMMANDS: tuple[str, ...] = (
    "sudo *", "su", "su *", "doas *", "reboot*", "shutdown*", "poweroff*", "halt*", "mkfs*", "dd *",
    "nvidia-smi -r*", "nvidia-smi --gpu-reset*", "rm -rf /", "rm -fr /", "*.ssh/*", "*id_rsa*", "*id_ed25519*",
    "*id_ecdsa*", "find * -delete*", "find * -exec*", "find * -ok*", "find * -fprint*", "find * -fls*",
)
_CONTROL_OPERATORS = {"|", "||", "&&", ";", "&", ";;", "|&", "(", ")"}
_REDIRECTIONS = {">", ">>", "<", ">&", "<&", "&>", "&>>", ">|", "<>", "<<", "<<<"}


class ExecPolicy(BaseModel):
    """Which commands an assistant's ``exec`` may run on a host (``orchestrator mcp``).

    Rules are shell globs (or ``re:`` regexes) matched against each simple command of the line: a pipeline or
    a ``;``/``&&`` list is checked part by part. ``deny`` wins over everything, ``--allow-exec`` included; then a
    command matching ``allow`` runs; anything else needs ``--allow-exec``. With ``defaults`` (the default) the
    built-in read-only list and deny list apply too. A policy, not a sandbox: it keeps an assistant to what it
    was asked to do, it does not stop a determined attacker.
    """

    model_config = ConfigDict(extra="forbid")

    allow: list[str] = []
    deny: list[str] = []
    defaults: bool = True

    @field_validator("allow", "deny")
    @classmethod
    def _valid_rules(cls, rules: list[str]) -> list[str]:
        for rule in rules:
            if rule.startswith("re:"):
                try:
                    re.compile(rule[3:])
                except re.error as exc:
                    raise ValueError(f"rule {rule!r} is not a valid regex: {exc}") from None
        return rules

    def rules(self) -> tuple[list[str], list[str]]:
        allow = [*(READ_ONLY_COMMANDS if self.defaults else ()), *map(_normalized, self.allow)]
        deny = [*(DENIED_COMMANDS if self.defaults else ()), *map(_normalized, self.deny)]
        return allow, deny

    def refusal(self, *, command: str | None = None, argv: list[str] | None = None,
                allow_exec: bool = False) -> str | None:
        """Why this command may not run, or None if it may."""
        allow, deny = self.rules()
        if argv is not None:
            parts, unchecked = [[str(a) for a in argv]], None
        else:
            parts, unchecked = split_shell(command or "")
        for words in parts:
            text = " ".join(words)
            rule = next((r for r in deny if _matches(r, text)), None)
            if rule is not None:
                return f"`{text}` is denied by the exec policy (rule {rule!r}); --allow-exec does not lift a deny rule"
        if allow_exec:
            return None
        if unchecked:
            return (f"{unchecked}: the exec policy cannot tell whether it only reads; run orchestrator mcp with "
                    "--allow-exec to allow commands beyond the read-only list")
        for words in parts:
            text = " ".join(words)
            if not any(_matches(r, text) for r in allow):
                return (f"`{text}` is not in the exec policy's allow list (read-only commands and the inventory's "
                        "exec_policy.allow); run orchestrator mcp with --allow-exec to allow it")
        return None


def _normalized(rule: str) -> str:
    """A glob rule as the commands it is matched against are written: shell words joined by one space, quotes
    removed (``python3 -c 'print(1)'`` -> ``python3 -c print(1)``)."""
    if rule.startswith("re:"):
        return rule
    try:
        return " ".join(shlex.split(rule))
    except ValueError:  # unbalanced quotes: the rule as written (the validator could refuse it; this is kinder)
        return rule


def _matches(rule: str, text: str) -> bool:
    if rule.startswith("re:"):
        return re.fullmatch(rule[3:], text) is not None
    return fnmatch.fnmatchcase(text, rule)


def split_shell(command: str) -> tuple[list[list[str]], str | None]:
    """The simple commands of a shell line (argv-like word lists), and what makes the line uncheckable
    (a command substitution, an output redirection to a file, unbalanced quotes), if anything."""
    if "$(" in command or "`" in command or "<(" in command or ">(" in command:
        return [], "command substitution"
    lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:  # "No closing quotation"
        return [], f"the command does not parse ({exc})"
    parts: list[list[str]] = []
    words: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _CONTROL_OPERATORS:
            if words:
                parts.append(words)
            words = []
        elif token in _REDIRECTIONS:
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if words and words[-1].isdigit():
                words.pop()  # the fd of `2>/dev/null`
            if token.startswith(">") or token.startswith("&>"):
                if token != ">&" and target != "/dev/null":
                    return [], f"the output redirection `{token} {target}` writes a file"
            i += 1  # skip the target (a file read, /dev/null, or an fd)
        else:
            words.append(token)
        i += 1
    if words:
        parts.append(words)
    if not parts:
        return [], "an empty command"
    return parts, None


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    transport: Literal["local", "ssh", "srun"] | None = None  # default: local for localhost names, else ssh
    slurm_job: int | None = None  # transport srun: the job whose allocation the node belongs to
    slurm_node: str | None = None  # transport srun: the node (srun -w); default: the host's name
    address: str | None = None  # default: the name (may be an ~/.ssh/config alias)
    user: str | None = None
    port: int | None = None
    key: str | None = None
    python: str = "python3"
    state_dir: str = "$HOME/.orchestrator"
    known_hosts: str | None = None  # default ~/.ssh/known_hosts (or the ssh_config's UserKnownHostsFile)
    ssh_config: str | None = None  # OpenSSH client config to read; default ~/.ssh/config
    connect_timeout: float = 15.0
    keepalive_interval: float = 15.0  # a silent link is given up after 4 intervals (keepalive_count_max 3): 60 s
    max_channels: int = Field(default=8, ge=1, le=64)
    agent: bool = True  # probe calls through the per-session remote agent; false: one Python start per call
    env: dict[str, str] = {}  # exported for every command on this host (e.g. PYTHONPATH for the lab)
    vars: dict[str, Any] = {}
    exec_policy: ExecPolicy | None = None  # this host's own (default: the inventory's)

    @property
    def kind(self) -> str:
        if self.transport:
            return self.transport
        return "local" if self.name in LOCAL_NAMES else "ssh"


# A Slurm allocation whose nodes become hosts (orchestrator.slurm does the allocating): see the module docstring.
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")  # Slurm's minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]


class SlurmSpec(BaseModel):
    """``slurm: {NAME: {...}}``: ask for ``nodes`` nodes (``salloc --no-shell``, released at session end) or take
    ``job``'s allocation (never released by us). The nodes become hosts of group NAME, reached ``via`` srun
    (``srun --jobid J --overlap -w NODE``) or ssh; each node's workdir is ``<state_dir>/nodes/<node>``."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    job: int | None = Field(default=None, description="an existing job whose allocation to use (not released)")
    partition: str | None = Field(default=None, description="partition to allocate from (default: the cluster's)")
    nodes: int = Field(default=1, ge=1, le=4096, description="nodes to allocate (or to use of the job's)")
    time: str = Field(default="1:00:00", description="time limit of a new allocation (salloc -t)")
    job_name: str | None = Field(default=None, description="name of a new allocation (default: orch-<entry name>)")
    salloc_args: list[str] = Field(default_factory=list, description="extra salloc arguments, e.g. [--gres=gpu:8]")
    allocate_timeout: float = Field(default=300.0, gt=0, description="seconds to wait for a pending allocation")
    via: Literal["srun", "ssh"] = Field(default="srun", description="how commands reach a node")
    # what every node host gets (as HostSpec fields)
    python: str = "python3"
    state_dir: str = Field(default="$HOME/.orchestrator",
                           description="per-node workdirs live in <state_dir>/nodes/<node> (safe on a shared home)")
    env: dict[str, str] = {}
    vars: dict[str, Any] = {}
    # via: ssh only
    user: str | None = None
    port: int | None = None
    key: str | None = None
    known_hosts: str | None = None
    ssh_config: str | None = None

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        if not _TIME.match(value.strip()):
            raise ValueError(f"{value!r} is not a Slurm time limit (minutes, MM:SS, HH:MM:SS or D-HH:MM:SS)")
        return value.strip()

    @model_validator(mode="after")
    def _ssh_fields_need_ssh(self) -> SlurmSpec:
        if self.via == "srun":
            given = [f for f in ("user", "port", "key", "known_hosts", "ssh_config") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} only apply with via: ssh (this entry reaches nodes through srun)")
        return self

    @property
    def owned(self) -> bool:
        """True when the orchestrator asks for the allocation (and so must release it)."""
        return self.job is None


_INDEXED = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<start>-?\d*)(?P<colon>:?)(?P<stop>-?\d*)\]$")


def _index_suffix(part: str) -> tuple[str, slice | None]:
    """Ansible's ``group[0]`` / ``group[1:3]``: the name and the slice of its hosts, or (part, None)."""
    m = _INDEXED.match(part)
    if m is None:
        if "[" in part or "]" in part:
            raise UserInputError(f"{part!r}: a host index is NAME[i] or NAME[i:j] (e.g. cluster[0])")
        return part, None
    start, stop = m["start"], m["stop"]
    if not m["colon"]:
        if not start:
            raise UserInputError(f"{part!r}: empty index; write NAME[i] or NAME[i:j]")
        i = int(start)
        return m["name"], slice(i, i + 1 if i != -1 else None)
    return m["name"], slice(int(start) if start else None, int(stop) if stop else None)


class GroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[str] = []
    vars: dict[str, Any] = {}


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: dict[str, HostSpec] = {}
    groups: dict[str, GroupSpec] = {}
    vars: dict[str, Any] = {}
    default_hosts: str | list[str] | None = None  # what a playbook without `hosts:` targets
    exec_policy: ExecPolicy = Field(default_factory=ExecPolicy)  # what an assistant's exec may run (mcp)
    slurm: dict[str, SlurmSpec] = {}  # allocations whose nodes become hosts once granted (orchestrator.slurm)
    source: str | None = Field(default=None, exclude=True)

    @field_validator("hosts", mode="before")
    @classmethod
    def _name_hosts(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: {**(spec or {}), "name": name} for name, spec in value.items()}
        return value

    @field_validator("slurm", mode="before")
    @classmethod
    def _name_allocations(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: {**(spec or {}), "name": name} for name, spec in value.items()}
        return value

    def resolve(self, pattern: str | list[str] | None) -> list[str]:
        """Host names for a `hosts:` value: a host, a group, `all`, or a list of those. Unknown -> error."""
        if pattern is None:
            pattern = self.default_hosts or (["localhost"] if not self.hosts else list(self.hosts)[:1])
        items = [pattern] if isinstance(pattern, str) else list(pattern)
        names: list[str] = []
        for item in items:
            for part in [p.strip() for p in item.split(",") if p.strip()]:
                part, picked = _index_suffix(part)
                if picked is not None:
                    members = self.resolve(part)
                    found = members[picked]
                    if not found:
                        raise UserInputError(f"{item!r}: {part!r} has {len(members)} host(s); the index picks none")
                elif part == "all":
                    found = list(self.hosts)
                elif part in self.groups:
                    found = self.groups[part].hosts
                elif part in self.hosts or part in LOCAL_NAMES:
                    found = [part]
                elif part in self.slurm:  # its nodes become a group once the session is granted them
                    raise UserInputError(f"Slurm allocation {part!r} has no nodes yet: it is acquired when a "
                                         "session starts (orchestrator run)")
                else:
                    known = ", ".join(sorted([*self.hosts, *self.groups])) or "none"
                    raise UserInputError(f"unknown host or group {part!r} (inventory has: {known})")
                names.extend(n for n in found if n not in names)
        return names

    def host(self, name: str) -> HostSpec:
        if name in self.hosts:
            return self.hosts[name]
        if name in LOCAL_NAMES:
            return HostSpec(name=name, transport="local")
        raise UserInputError(f"unknown host {name!r}")

    def exec_policy_for(self, name: str) -> ExecPolicy:
        spec = self.hosts.get(name)
        return spec.exec_policy if spec is not None and spec.exec_policy is not None else self.exec_policy

    def host_vars(self, name: str) -> dict[str, Any]:
        """Variables for one host: inventory vars < group vars < host vars."""
        merged = dict(self.vars)
        for group in self.groups.values():
            if name in group.hosts:
                merged.update(group.vars)
        if name in self.hosts:
            merged.update(self.hosts[name].vars)
        return merged

    def with_host(self, name: str, **spec: Any) -> Inventory:
        """A copy with one more host (the `--host` one-off)."""
        hosts = dict(self.hosts)
        hosts[name] = HostSpec(name=name, **spec)
        return self.model_copy(update={"hosts": hosts})


def load_inventory(path: str | Path) -> Inventory:
    """Load and validate an inventory file; errors name the file, line and column."""
    from orchestrator.playbook.yamlio import load_yaml, validation_errors

    path = Path(path)
    data, locate = load_yaml(path)
    try:
        inventory = Inventory.model_validate(data or {})
    except Exception as exc:  # pydantic ValidationError -> located messages
        raise validation_errors(exc, locate, str(path)) from None
    for name in inventory.slurm:
        if name in inventory.hosts or name in inventory.groups:
            raise UserInputError(f"{path}: slurm entry {name!r} has the name of a host or group (its nodes become "
                                 "a group of that name)")
    for gname, group in inventory.groups.items():
        for h in group.hosts:
            if h not in inventory.hosts and h not in LOCAL_NAMES:
                raise UserInputError(f"{path}: group {gname!r} lists unknown host {h!r}")
    inventory.source = str(path)
    return inventory
