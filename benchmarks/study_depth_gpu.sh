#!/bin/bash
# The depth study's 18+18 stability cells (benchmarks/study_depth.py) on a lent GPU: one
# background `normzoo sweep` per cell, from a wheel of normzoo at the study's commit, with the
# study's recipe and the prepared Multi30k cache the CPU cells used (same tokenizer, same ids).
# No `--jobs`: the study's commit predates the fix that gives local jobs a GPU.
#
#   benchmarks/study_depth_gpu.sh prepare ../study-papers     # here, once: fills .gpu/ (PyPI)
#   bash benchmarks/study_depth_gpu.sh run resi_dual subln     # there, with .gpu carried
#
# `run` prints each cell's update every 30 s (two lines give the speed), stops the cells at
# SWEEP_S seconds (default 540: call it with timeout_s 590; a stopped cell saves last.ckpt, and
# the same call on the still-warm machine resumes it), and puts each cell's files but its
# checkpoints in $OUT/gpu-<scheme>.tar.gz. Unpack them into one folder, DIR, and collect them
# with `python benchmarks/study_depth.py --gpu DIR`: a finished cell is copied as a sweep's, one
# the deadline cut off after training with its losses (reported as not scored), each with its
# sweep's log, the record that it trained on the GPU. The final test decodes on the host's CPU
# at the study's commit (Lightning's teardown moves the model there; fixed since): an 18+18
# cell's took more than 200 s on the H200 machine, after 9 minutes of training. EXTRA adds overrides
# (a dry run here: EXTRA="model.encoder_layers=2 model.decoder_layers=2 trainer.max_steps=20").
set -u
GPU=.gpu
# The stability tier's arguments, as in study_depth.py (_STABLE, --diagnose).
STABLE="model.encoder_layers=18 model.decoder_layers=18 trainer.max_steps=4500"
WHEELS="pydantic pydantic_core annotated-types typing-inspection typing_extensions annotated-doc
typer click submitit tensorboardX sacrebleu tokenizers"

prepare() {
  local study=$1 pins
  grep -qx "/$GPU/" .git/info/exclude || echo "/$GPU/" >> .git/info/exclude
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

run() {
  local root out t0 scheme folder pids=()
  root=$(pwd); out=${OUT:-/tmp/out}; t0=$(date +%s); mkdir -p "$out" /tmp/runs
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $GPU/whl/*.whl || return 1
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
  export NORMZOO_CACHE=$root/$GPU/cache
  nvidia-smi -L
  cd $GPU || return 1
  for scheme in "$@"; do
    folder=/tmp/runs/gpu-${scheme//[^a-z_]/}
    nvidia-smi -L >> "$folder.log"  # the device, in the log the report keeps
    # shellcheck disable=SC2086
    normzoo sweep recipes/multi30k_papers.yaml data.dir="$root/$GPU/multi30k" $STABLE \
      ${EXTRA:-} --set "model.residual=$scheme" --diagnose --out "$folder" \
      >> "$folder.log" 2>&1 &
    pids+=($!)
  done
  while kill -0 "${pids[@]}" 2>/dev/null && [ $(($(date +%s) - t0)) -lt "${SWEEP_S:-540}" ]; do
    sleep 30
    for f in /tmp/runs/gpu-*/*/logs/csv/metrics.csv; do
      [ -f "$f" ] && echo "t=$(($(date +%s) - t0))s $f update $(tail -1 "$f" | cut -d, -f2)"
    done
  done
  kill -TERM "${pids[@]}" 2>/dev/null; wait
  for folder in /tmp/runs/gpu-*; do
    [ -d "$folder" ] || continue
    tail -3 "$folder.log"
    tar -czf "$out/$(basename "$folder").tar.gz" -C /tmp/runs --exclude='*.ckpt' \
      "$(basename "$folder")" "$(basename "$folder").log"
  done
  grep -h "GPU available" /tmp/runs/gpu-*.log | sort | uniq -c
}

case "${1:-}" in
  prepare) prepare "$2" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare STUDY_CLONE | run SCHEME..." >&2; exit 2 ;;
esac
