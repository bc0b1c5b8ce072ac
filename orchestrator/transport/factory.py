"""The transport for an inventory host: local (subprocess) or SSH. Lives here, not in the inventory, so the
inventory knows nothing of transports (the transports read a ``ConnectionSpec``, which ``HostSpec`` satisfies; the reverse made a cycle)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.transport.base import Transport

if TYPE_CHECKING:
    from orchestrator.transport.spec import ConnectionSpec

TransportFactory = Callable[["ConnectionSpec", str], Transport]  # (host spec, session id) -> an unconnected transport


def make_transport(spec: ConnectionSpec, session_id: str) -> Transport:
    """An unconnected transport for ``spec``. SSH is imported only when a host needs it (asyncssh is heavy);
    a broken import fails here, loudly."""
    if spec.kind == "local":
        from orchestrator.transport.local import LocalTransport

        return LocalTransport(spec.name, state_dir=spec.state_dir, session_id=session_id, env=spec.env,
                              agent=spec.agent)
    if spec.kind == "srun":  # a node of a Slurm allocation (orchestrator.slurm)
        from orchestrator.transport.srun import SrunTransport

        return SrunTransport(spec, session_id=session_id)
    from orchestrator.transport.ssh import SshTransport

    return SshTransport(spec, session_id=session_id)
