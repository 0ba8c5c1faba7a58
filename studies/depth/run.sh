#!/bin/bash
# The depth study's sweeps still to run (studies/depth/plan.py, SEED_SWEEPS; those whose
# cells are not yet in docs/study-depth/data), two at a time, one torch thread each, from a clone
# of normzoo at the study's commit so that work on the code cannot touch them:
#
#   git clone . ../study-seeds && git -C ../study-seeds checkout 3fd4a6b   # SEED_COMMIT
#   (cd ../study-seeds && python3 -m venv .venv && . .venv/bin/activate &&
#    pip install torch==2.13.0 && pip install -e .)
#   setsid nohup studies/depth/run.sh ../study-seeds > study-depth.log 2>&1 < /dev/null &
#   python -m studies.depth.report ../study-seeds/runs      # collect and render, any time
#
# Every command is resumable: a finished cell is skipped, an interrupted one resumes from its
# last.ckpt, so after a stop the same line picks up where it was. The commands come from
# `python -m studies.depth.report --commands`, so the report prints exactly what ran.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=studies/slots.sh
. "$ROOT/studies/slots.sh"
run_slots "$1" "" env PYTHONPATH="$ROOT" python -m studies.depth.report --commands
