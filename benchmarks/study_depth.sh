#!/bin/bash
# The depth study's sweeps still to run (benchmarks/study_depth_plan.py, SEED_SWEEPS; those whose
# cells are not yet in docs/study-depth/data), two at a time, one torch thread each, from a clone
# of normzoo at the study's commit so that work on the code cannot touch them:
#
#   git clone . ../study-seeds && git -C ../study-seeds checkout 3fd4a6b   # SEED_COMMIT
#   (cd ../study-seeds && python3 -m venv .venv && . .venv/bin/activate &&
#    pip install torch==2.13.0 && pip install -e .)
#   setsid nohup benchmarks/study_depth.sh ../study-seeds > study-depth.log 2>&1 < /dev/null &
#   python benchmarks/study_depth.py ../study-seeds/runs      # collect and render, any time
#
# Every command is resumable: a finished cell is skipped, an interrupted one resumes from its
# last.ckpt, so after a stop the same line picks up where it was. The commands come from
# study_depth.py --commands, so the report prints exactly what ran.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=benchmarks/study_slots.sh
. "$HERE/study_slots.sh"
run_slots "$1" "" python "$HERE/study_depth.py" --commands
