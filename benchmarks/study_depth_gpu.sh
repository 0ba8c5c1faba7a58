#!/bin/bash
# The depth study's cells (benchmarks/study_depth.py) on a lent GPU: one background
# `normzoo sweep` per lane, all lanes side by side on the one GPU, from a wheel of normzoo at the
# study's commit, with the study's recipe and the prepared Multi30k cache the CPU cells use (the
# same tokenizer, the same ids: an 18+18 Post-LN cell's first 100 losses are bit-equal here and
# on the CPU).
#
#   benchmarks/study_depth_gpu.sh prepare ../study-35            # here, once: fills .gpu/ (PyPI)
#   bash benchmarks/study_depth_gpu.sh run 560                    # there, .gpu carried: call 1
#   bash benchmarks/study_depth_gpu.sh run 150                    # there, same warm machine: 2
#
# The lanes are LANES below, highest priority first (the CPU runs the rest of the study, so a lane
# here is a cell the CPU does not run). `run SECONDS` starts every lane that has not finished (a
# sweep skips its finished cells and resumes an interrupted one from last.ckpt), prints each
# cell's update every 30 s, and stops the lanes with a checkpoint at SECONDS. From THROTTLE_AT
# seconds on it projects when each 18+18 lane ends its training from its speed; while the slowest
# would end after TARGET_S seconds of the whole lease's training (RAN_S: seconds this lease
# trained before this call), it stops the lowest-priority 18+18 lane (the lanes share the GPU, so
# the others speed up). A stopped lane is written to .gpu-dropped and not resumed. Each call puts
# every lane's files but checkpoints in $OUT/gpu-lanes.tar.gz; unpack the last call's into DIR and
# collect with `python benchmarks/study_depth.py --gpu DIR`. EXTRA adds overrides (a dry run here:
# EXTRA="model.encoder_layers=2 model.decoder_layers=2 trainer.max_steps=20" LONG_STEPS=20).
set -u
GPU=.gpu
RUNS=${RUNS:-/tmp/runs}
RECIPE=recipes/multi30k_papers.yaml
DEEP="model.encoder_layers=18 model.decoder_layers=18 trainer.max_steps=4500 --diagnose"
# One decode of the best checkpoint (beam 5, greedy beside it): the averaged checkpoint is scored
# from the kept checkpoints on the CPU, and the GPU's keep none.
GPU_EVAL="eval.average_last=1"
# name|args, highest priority first: the 3-seed 18+18 cells the CPU would take longest over,
# then ResiDual and Sub-LN (one seed, scored on a GPU only). The cheap 6+6 cells run on the CPU.
LANES=(
  "stability-pre-1|$DEEP --set seed=1 --set model.residual=pre"
  "stability-deepnorm-1|$DEEP --set seed=1 --set model.residual=deepnorm"
  "stability-pre-2|$DEEP --set seed=2 --set model.residual=pre"
  "stability-deepnorm-2|$DEEP --set seed=2 --set model.residual=deepnorm"
  "stability-resi_dual|$DEEP --set model.residual=resi_dual"
  "stability-subln|$DEEP --set model.residual=subln"
)
WHEELS="pydantic pydantic_core annotated-types typing-inspection typing_extensions annotated-doc
typer click submitit tensorboardX sacrebleu tokenizers"

prepare() {
  local study=$1 pins
  grep -qsx "/$GPU/" .git/info/exclude || echo "/$GPU/" >> .git/info/exclude
  mkdir -p $GPU/whl $GPU/recipes || return 1
  pins=$("$study/.venv/bin/pip" freeze | python3 -c "
import sys
wanted = {n.lower().replace('_', '-') for n in sys.argv[1].split()}
print(' '.join(l.strip() for l in sys.stdin if l.split('==')[0].lower().replace('_', '-') in wanted))
" "$WHEELS")
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d $GPU/whl $pins || return 1
  (cd "$study" && .venv/bin/pip wheel -q --no-deps --no-build-isolation -w "$OLDPWD/$GPU/whl" .) \
    || return 1
  cp -r ../shared/data/multi30k $GPU/ && cp -r "${NORMZOO_CACHE:-$HOME/.cache/normzoo}" $GPU/cache \
    && cp "$study/recipes/studies/multi30k_papers.yaml" $GPU/recipes/ && du -sh $GPU
}

lane_step() {  # the last logged update of a lane's running cell, 0 if none
  local f step=0
  for f in "$RUNS/$1"/*/logs/csv/metrics.csv; do
    [ -f "$f" ] && [ ! -f "$(dirname "$(dirname "$(dirname "$f")")")/cell.json" ] \
      && step=$(tail -1 "$f" | cut -d, -f2)
  done
  echo "${step:-0}"
}

run() {
  local deadline=$1 root out t0 spec name args i now left hold=0 pids=() names=() long=() last=() seen=()
  root=$(pwd); out=${OUT:-/tmp/out}; t0=$(date +%s); mkdir -p "$out" $RUNS
  if [ -z "${LOCAL:-}" ]; then  # LOCAL=1: a dry run here, with the study clone's venv active
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site $GPU/whl/*.whl || return 1
    export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  fi
  export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
  export NORMZOO_CACHE=$root/$GPU/cache
  nvidia-smi -L 2>/dev/null
  cd $GPU || return 1
  for spec in "${LANES[@]}"; do
    IFS='|' read -r name args <<< "$spec"
    grep -qsx "$name" "$RUNS/.gpu-dropped" && continue
    [ -f "$RUNS/$name/.done" ] && continue
    nvidia-smi -L >> "$RUNS/$name.log" 2>/dev/null  # the device, in the log the report keeps
    # shellcheck disable=SC2086
    (normzoo sweep $RECIPE data.dir="$root/$GPU/multi30k" $GPU_EVAL $args ${EXTRA:-} \
       --out "$RUNS/$name" >> "$RUNS/$name.log" 2>&1 && touch "$RUNS/$name/.done") &
    pids+=($!); names+=("$name"); [[ $name == stability-* ]] && long+=(${#names[@]}) || true
  done
  for i in "${!names[@]}"; do last[i]=$(lane_step "${names[i]}"); seen[i]=$t0; done
  while kill -0 "${pids[@]}" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "$deadline" ]; do
    sleep $(( (left = deadline - ($(date +%s) - t0)) < 30 ? left : 30 )); now=$(date +%s)
    local worst=0 lowest=-1 alive=0
    for i in "${!names[@]}"; do
      kill -0 "${pids[i]}" 2>/dev/null || continue
      local step rate end
      step=$(lane_step "${names[i]}")
      echo "t=$((now - t0))s ${names[i]} update $step"
      [[ " ${long[*]} " == *" $((i + 1)) "* ]] || continue
      lowest=$i; alive=$((alive + 1))
      if [ "$step" -gt "${last[i]}" ] && [ $((now - t0)) -ge "${THROTTLE_AT:-120}" ]; then
        rate=$(python3 -c "print(($step - ${last[i]}) / ($now - ${seen[i]}))")
        end=$(python3 -c "print(int(${RAN_S:-0} + $now - $t0 + (${LONG_STEPS:-4500} - $step) / $rate))")
        echo "  ${names[i]}: $rate updates/s, training ends at ~${end}s of the lease's training"
        [ "$end" -gt "$worst" ] && worst=$end
      fi
      last[i]=$step; seen[i]=$now
    done
    if [ "$hold" -gt 0 ]; then
      hold=$((hold - 1))  # the lanes' speeds settle after a drop before they are judged again
    elif [ "$worst" -gt "${TARGET_S:-640}" ] && [ "$alive" -gt 1 ]; then
      echo "  dropping ${names[lowest]}: the slowest lane would end at ${worst}s > ${TARGET_S:-640}s"
      pkill -TERM -P "${pids[lowest]}"  # the lane's sweep saves a checkpoint and exits
      echo "${names[lowest]}" >> "$RUNS/.gpu-dropped"
      hold=1
    fi
  done
  for i in "${!pids[@]}"; do pkill -TERM -P "${pids[i]}"; done; wait
  echo "ran $(($(date +%s) - t0))s; finished lanes: $(ls -d $RUNS/*/.done 2>/dev/null | wc -l)"
  for name in "${names[@]}"; do tail -2 "$RUNS/$name.log"; done
  tar -czf "$out/gpu-lanes.tar.gz" -C $RUNS --exclude='*.ckpt' .
  grep -h "GPU available" $RUNS/*.log | sort | uniq -c
}

case "${1:-}" in
  prepare) prepare "$2" ;;
  run) run "${2:-560}" ;;
  *) echo "usage: $0 prepare STUDY_CLONE | run SECONDS" >&2; exit 2 ;;
esac
