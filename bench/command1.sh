#!/bin/bash
# The README's command 1 from a fresh clone of this repository, with an empty HOME (so no pip cache) and fresh
# cache and lab dirs, timed in two parts: pip (with the compileall that follows it) and `orchestrator run`.
#   bash bench/command1.sh        # prints the parts, the session's verdict lines and the load before and after
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/command1.XXXX"); git clone -q "$REPO" "$W/repo"; cd "$W/repo"
export HOME=$W/home; mkdir -p "$HOME"; unset ORCHESTRATOR_CACHE_DIR ORCHESTRATOR_LAB_DIR XDG_DATA_HOME XDG_CACHE_HOME
line=$(grep -A1 '^# 1\. install' README.md | tail -1)
pipline=${line%% && .venv/bin/orchestrator*}; runline=".venv/bin/orchestrator${line#* && .venv/bin/orchestrator}"
echo "load start $(cut -d' ' -f1-3 /proc/loadavg)"
s=$(date +%s.%N); bash -c "$pipline" > "$W/pip.log" 2>&1; p=$(date +%s.%N)
bash -c "$runline" > "$W/run.log" 2>&1; rc=$?; e=$(date +%s.%N)
echo "pip $(echo "$p - $s" | bc) s; orchestrator run $(echo "$e - $p" | bc) s (rc $rc); in all $(echo "$e - $s" | bc) s"
grep -E "^■|lab:|confirm" "$W/run.log" | head -8
echo "load end $(cut -d' ' -f1-3 /proc/loadavg)"; echo "logs in $W"
