"""Slurm as a source of hosts: an inventory ``slurm:`` entry becomes an allocation (an existing job's, or one
asked for with ``salloc``), its nodes become hosts reached through ``srun --overlap`` (or SSH), and the
allocation is released when the session ends. See ``inventory.SlurmSpec`` (the entry), ``allocation`` (the Slurm
commands) and ``session`` (acquire before the first step, release after the last)."""
