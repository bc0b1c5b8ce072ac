"""The right column: output, source, hypothesis history, servers."""
