"""The embedded lab: tiny models trained on CPU, the lab server, the lab inventory."""
