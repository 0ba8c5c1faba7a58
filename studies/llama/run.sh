#!/bin/bash
# The Llama-style decoder study's second part (studies/llama/plan.py, SWEEPS), two
# sweeps at a time, one torch thread each, from a clone of normzoo at the study's commit so that
# work on the code cannot touch them:
#
#   git clone . ../study-llama && git -C ../study-llama checkout f5670b6   # SCHEMES_COMMIT
#   (cd ../study-llama && python3 -m venv .venv && . .venv/bin/activate &&
#    pip install torch==2.13.0 && pip install -e .)
#   setsid nohup studies/llama/run.sh ../study-llama > study-llama.log 2>&1 < /dev/null &
#   python -m studies.llama.report ../study-llama/runs/study-llama   # collect and render
#
# Every command is resumable: a finished cell is skipped, an interrupted one resumes from its
# last.ckpt, so after a stop the same line picks up where it was.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=studies/slots.sh
. "$ROOT/studies/slots.sh"
run_slots "$1" "llama-" env PYTHONPATH="$ROOT" python -m studies.llama.plan
