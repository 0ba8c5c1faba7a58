#!/bin/bash
# The depth study's sweeps (benchmarks/study_depth.py, SWEEPS), two at a time, one torch thread
# each, from a clone of normzoo at the study's commit so that work on the code cannot touch them:
#
#   git clone . ../study-papers && git -C ../study-papers checkout <STUDY_COMMIT>
#   (cd ../study-papers && python3 -m venv .venv && . .venv/bin/activate &&
#    pip install torch==2.13.0 && pip install -e .)
#   setsid nohup benchmarks/study_depth.sh ../study-papers > study-depth.log 2>&1 < /dev/null &
#
# Every command is resumable: a finished cell is skipped, an interrupted one resumes from its
# last.ckpt, so after a stop the same line picks up where it was. The commands come from
# study_depth.py, so the report prints exactly what ran.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
cd "$1" && . .venv/bin/activate || exit 2
mkdir -p logs
slot() {
  local commands
  mapfile -t commands < <(python "$HERE/study_depth.py" --commands "$1")
  for command in "${commands[@]}"; do eval "$command" < /dev/null; done
}
slot a > logs/slot-a.log 2>&1 &
slot b > logs/slot-b.log 2>&1 &
wait
