# Sourced by the study runners (studies/depth/run.sh, studies/llama/run.sh): run a study's
# sweeps in two slots, one torch thread each, from a clone of normzoo at the study's commit.
# PLAN_COMMAND runs in the clone with its venv active; the runners give it PYTHONPATH=ROOT so
# that `python -m studies.<study>...` finds this checkout's studies/.
#
#   run_slots CLONE LOG_PREFIX PLAN_COMMAND...   # PLAN_COMMAND SLOT prints that slot's sweeps
run_slots() {
  local clone=$1 prefix=$2
  shift 2
  cd "$clone" && . .venv/bin/activate || return 2
  mkdir -p logs
  slot() {
    local commands
    mapfile -t commands < <("${@:2}" "$1")
    for command in "${commands[@]}"; do eval "$command" < /dev/null; done
  }
  slot a "$@" > "logs/${prefix}slot-a.log" 2>&1 &
  slot b "$@" > "logs/${prefix}slot-b.log" 2>&1 &
  wait
}
