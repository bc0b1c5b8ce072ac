"""The draft as each installed engine reads it: every draft-config field the engine's EAGLE-3 class reads and what
it does with the value (field_table), and the findings that follow for one checkpoint (field_findings). Standard
library only: these run on the host beside the engine, never importing it. (The acceptance ceiling, what the served
vocabulary can name of the target's tokens, is measured by the draft test: evaluation/ceiling.py.)"""

from __future__ import annotations
