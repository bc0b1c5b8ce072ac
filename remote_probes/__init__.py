"""Probe scripts pushed to target hosts and run with the host's own python.

This package exists so an installed orchestrator can find the scripts; on the remote side each
file runs as a plain script (``python3 NAME.py``) next to its siblings, never as a package.
"""
