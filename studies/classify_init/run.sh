#!/usr/bin/env bash
# The classifier study: does starting recipes/classify.yaml from a masked LM's encoder
# (recipes/classify_mlm.yaml, trained on the same sentences without labels) beat a random
# initialisation? One MLM run, then seeds 1-3 of each classifier, on the recipe's 4,000
# labelled sentences and on 400 of them ("small"); every run resumable (a completed one is
# skipped, an interrupted one continues from its last.ckpt).
#
#   studies/classify_init/run.sh CLONE      # a clone of normzoo with its .venv, at a fixed commit
set -euo pipefail
clone=$(cd "$1" && pwd)
cd "$clone" && . .venv/bin/activate
export OMP_NUM_THREADS=1
out=runs/classify-init
mkdir -p "$out" logs

train() {  # DIR RECIPE [KEY=VALUE...]: train into DIR, resuming, skipping a completed run
  local dir=$1 recipe=$2
  shift 2
  if grep -qs '"status": "completed"' "$dir/summary.json"; then return 0; fi
  local resume=()
  if [ -f "$dir/checkpoints/last.ckpt" ]; then resume=(--resume auto); fi
  normzoo train "$recipe" "$@" run.dir="$dir" "${resume[@]}" < /dev/null
}

train "$out/mlm" recipes/classify_mlm.yaml
for seed in 1 2 3; do
  train "$out/random-$seed" recipes/classify.yaml seed=$seed
  train "$out/mlm-$seed" recipes/classify.yaml seed=$seed \
    init.from="$out/mlm/checkpoints/last.ckpt" init.strict=false
done
for seed in 1 2 3; do
  train "$out/random-small-$seed" recipes/classify.yaml seed=$seed data.train_limit=400
  train "$out/mlm-small-$seed" recipes/classify.yaml seed=$seed data.train_limit=400 \
    init.from="$out/mlm/checkpoints/last.ckpt" init.strict=false
done
for arm in "" "small-"; do
  normzoo compare -b "$out/random-${arm}1" -b "$out/random-${arm}2" -b "$out/random-${arm}3" \
    -s "$out/mlm-${arm}1" -s "$out/mlm-${arm}2" -s "$out/mlm-${arm}3" --json \
    > "$out/compare-${arm:-full-}.json"
done
echo "done: $out"
