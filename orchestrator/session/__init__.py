"""Sessions on disk: the append-only event log, reading it back, listing, reports."""
