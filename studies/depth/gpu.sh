#!/bin/bash
# The depth study's 18+18 cells (studies/depth/report.py) on a lent GPU: one background
# `normzoo sweep` per cell ("lane"), all side by side on the one GPU, from a wheel of normzoo at
# the study's commit, with the study's recipe and the prepared Multi30k cache the CPU cells use
# (the same tokenizer, the same ids: an 18+18 Post-LN cell's first 100 losses are bit-equal here
# and on two CPUs).
#
#   studies/depth/gpu.sh prepare ../study-seeds   # here: fills .gpu/ (PyPI), the lanes
#   bash studies/depth/gpu.sh run 560             # there, .gpu carried: call 1
#   bash studies/depth/gpu.sh run 150             # there, same warm machine: call 2
#
# The lanes are the cells still to run when `prepare` ran
# (`python -m studies.depth.report --gpu-lanes`, into .gpu/lanes.txt). Measured on an H200 (2026-11-26): an 18+18 lane trains at about 8 updates/s
# whether two or six run side by side (each lane is bound by its own CPU process, 16 cores
# there), so 4,500 updates take about 560 s and the final test (beam 5 and greedy on test2016)
# well under a minute. One call cannot hold both under its 10 minutes: call 1 trains, and a
# second call on the still-warm machine (within 30 s) resumes each lane from its checkpoint and
# scores it; a 15-minute lease holds both (about 35 s to start, 560 s, then about 200 s).
# `run SECONDS` starts every lane not yet finished (a sweep skips its finished cells and resumes
# an interrupted one from last.ckpt), prints each lane's update every 30 s, and stops them with a
# checkpoint at SECONDS. Each call puts every lane's files but checkpoints into
# $OUT/gpu-lanes.tar.gz: unpack the last call's into DIR and collect with
# `python -m studies.depth.report --gpu DIR` (finished cells only: the GPU's checkpoints do not
# come back, so an unfinished lane cannot be resumed here). EXTRA adds overrides (a dry run
# here: LOCAL=1 RUNS=/tmp/dry EXTRA="model.encoder_layers=1 model.decoder_layers=1 ...").
set -u
# shellcheck source=benchmarks/gpu_wheels.sh
. "$(dirname "$0")/../../benchmarks/gpu_wheels.sh"
GPU=.gpu
RUNS=${RUNS:-/tmp/runs}
RECIPE=recipes/multi30k_papers.yaml
# One decode of the best checkpoint (beam 5, greedy beside it): a capped 18+18 cell has no
# converged checkpoints to average (docs/study-depth.md), and the GPU keeps none to average later.
GPU_EVAL="eval.average_last=1"
WHEELS="pydantic pydantic_core annotated-types typing-inspection typing_extensions annotated-doc
typer click submitit tensorboardX sacrebleu tokenizers"

prepare() {
  local study=$1
  grep -qsx "/$GPU/" .git/info/exclude || echo "/$GPU/" >> .git/info/exclude
  mkdir -p $GPU/whl $GPU/recipes || return 1
  download_wheels $GPU/whl "$WHEELS" "$study/.venv/bin/pip" || return 1
  (cd "$study" && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w "$OLDPWD/$GPU/whl" .) \
    || return 1
  cp -r ../shared/data/multi30k $GPU/ && cp -r "${NORMZOO_CACHE:-$HOME/.cache/normzoo}" $GPU/cache \
    && cp "$study/recipes/studies/multi30k_papers.yaml" $GPU/recipes/ || return 1
  python3 -m studies.depth.report --gpu-lanes > $GPU/lanes.txt || return 1
  echo "$(wc -l < $GPU/lanes.txt) lanes:"; cut -d'|' -f1 $GPU/lanes.txt; du -sh $GPU
}

lane_step() {  # the last logged update of a lane's unfinished cell, 0 if none
  local f step=0
  for f in "$RUNS/$1"/*/logs/csv/metrics.csv; do
    [ -f "$f" ] && [ ! -f "$(dirname "$(dirname "$(dirname "$f")")")/cell.json" ] \
      && step=$(tail -1 "$f" | cut -d, -f2)
  done
  echo "${step:-0}"
}

run() {
  local deadline=$1 root out t0 name args left pids=() names=()
  root=$(pwd); out=${OUT:-/tmp/out}; t0=$(date +%s); mkdir -p "$out" "$RUNS"
  if [ -z "${LOCAL:-}" ]; then  # LOCAL=1: a dry run here, with the study clone's venv active
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site $GPU/whl/*.whl || return 1
    export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  fi
  export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 NORMZOO_CACHE=$root/$GPU/cache
  nvidia-smi -L 2>/dev/null
  cd $GPU || return 1
  while IFS='|' read -r name args; do
    [ -n "$name" ] && [ ! -f "$RUNS/$name/.done" ] || continue
    nvidia-smi -L >> "$RUNS/$name.log" 2>/dev/null  # the device, in the log the report keeps
    (eval "normzoo sweep $RECIPE data.dir=$root/$GPU/multi30k $GPU_EVAL $args ${EXTRA:-}" \
       "--out $RUNS/$name" >> "$RUNS/$name.log" 2>&1 && touch "$RUNS/$name/.done") < /dev/null &
    pids+=($!); names+=("$name")
  done < lanes.txt
  while [ ${#pids[@]} -gt 0 ] && kill -0 "${pids[@]}" 2>/dev/null \
      && [ $(($(date +%s) - t0)) -lt "$deadline" ]; do
    sleep $(( (left = deadline - ($(date +%s) - t0)) < 30 ? left : 30 ))
    for name in "${names[@]}"; do
      echo "t=$(($(date +%s) - t0))s $name update $(lane_step "$name")"
    done
  done
  # A lane's sweep saves a checkpoint on SIGTERM; its subshell waits for it.
  for pid in "${pids[@]}"; do pkill -TERM -P "$pid"; done; wait
  echo "ran $(($(date +%s) - t0))s; finished lanes: $(ls -d "$RUNS"/*/.done 2>/dev/null | wc -l)"
  tar -czf "$out/gpu-lanes.tar.gz" -C "$RUNS" --exclude='*.ckpt' .
  grep -h "GPU available" "$RUNS"/*.log | sort | uniq -c
}

case "${1:-}" in
  prepare) prepare "$2" ;;
  run) run "${2:-560}" ;;
  *) echo "usage: $0 prepare STUDY_CLONE | run SECONDS" >&2; exit 2 ;;
esac
