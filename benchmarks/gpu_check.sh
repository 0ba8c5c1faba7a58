#!/bin/bash
# The GPU in one prepared call: what a lent GPU machine runs first, within 8 minutes.
#
#   bash benchmarks/gpu_check.sh prepare     # here: normzoo and the packages the GPU image lacks,
#                                            # as wheels in .gpu-check/ (PyPI; once a session)
#   bash benchmarks/gpu_check.sh run         # there, .gpu-check carried: the checks below
#   bash benchmarks/gpu_check.sh dry-run     # here: every step's arguments checked, nothing timed
#
# The steps, each under its own time limit (seconds) so one that hangs cannot take the others:
#   1. the gpu-marked tests (pytest -m gpu): the final test on the training device, MFU logged,
#      every residual scheme's bf16 training step and cached decoding on CUDA          (150)
#   2. benchmarks/peers.py, Transformer-base (~25k tokens a step), bf16: normzoo against
#      x-transformers, mBART and nn.Transformer, training tokens/s with MFU, greedy and beam-5
#      decoding against Hugging Face generate                                           (240)
#   3. the same for normzoo's training with torch.compile (trainer.compile's path)          (90)
# Each step's output goes to $OUT/gpu_check.log and the peers' results, named by the device, to
# $OUT/benchmarks/results/ (peers-<device>.md/.json, peers-compile-<device>.md/.json); copy
# them into benchmarks/results/ here. A step that fails is reported and the rest still run; the
# exit status is that of the first failure.
set -u
# shellcheck source=benchmarks/gpu_wheels.sh
. "$(dirname "$0")/gpu_wheels.sh"
CHECK=.gpu-check
OUT=${OUT:-/tmp/out}
# What the GPU image lacks (it has torch, numpy, transformers' dependencies): pinned to the
# versions installed here, so the GPU runs what the CPU tests ran.
WHEELS="pydantic pydantic_core annotated-types typing-inspection typing_extensions typer click
annotated-doc sacrebleu tokenizers tensorboardX x-transformers einops einx loguru frozendict
torch-einops-utils lightning lightning-utilities torchmetrics pytorch-lightning"
PYTEST="-q -m gpu -p no:cacheprovider"
PEERS="--size base --max-tokens 25000 --reps 3 --warmup 2 --precision bf16"
COMPILED="--size base --max-tokens 25000 --reps 3 --warmup 3 --precision bf16 --compile
--frameworks normzoo --jobs train"

prepare() {
  grep -qsx "/$CHECK/" .git/info/exclude || echo "/$CHECK/" >> .git/info/exclude
  mkdir -p $CHECK/whl || return 1
  download_wheels $CHECK/whl "$WHEELS" || return 1
  pip wheel -q --no-deps --no-build-isolation -w $CHECK/whl . || return 1
  du -sh $CHECK
}

step() {  # step NAME SECONDS COMMAND...: run it under a limit, log it, remember a failure
  local name=$1 limit=$2 rc
  shift 2
  echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/gpu_check.log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/gpu_check.log"
  rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc" | tee -a "$OUT/gpu_check.log"
  [ "$rc" -eq 0 ] || [ "$FAILED" -ne 0 ] || FAILED=$rc
}

checks() {  # the steps; $1 "run" or "dry-run"
  local results=$OUT/benchmarks/results dry=()
  mkdir -p "$results"
  FAILED=0
  [ "$1" = dry-run ] && dry=(--dry-run)
  nvidia-smi -L 2>/dev/null | tee -a "$OUT/gpu_check.log"
  # shellcheck disable=SC2086
  if [ "$1" = dry-run ]; then
    step tests 150 python3 -m pytest $PYTEST --collect-only tests
  else
    step tests 150 python3 -m pytest $PYTEST tests
  fi
  # shellcheck disable=SC2086
  step peers 240 python3 benchmarks/peers.py $PEERS --out "$results/peers-$(slug).md" "${dry[@]}"
  # shellcheck disable=SC2086
  step compile 90 python3 benchmarks/peers.py $COMPILED \
    --out "$results/peers-compile-$(slug).md" "${dry[@]}"
  return "$FAILED"
}

slug() {  # the device's name as a file name, as benchmarks/common.py names results
  python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from common import device_slug; print(device_slug())"
}

run() {
  mkdir -p "$OUT"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $CHECK/whl/*.whl || return 1
  export PYTHONPATH=/tmp/site:$(pwd)/benchmarks PATH=/tmp/site/bin:$PATH
  export PYTHONUNBUFFERED=1 NORMZOO_CACHE=/tmp/normzoo-cache
  checks run
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  dry-run) mkdir -p "$OUT" && checks dry-run ;;
  *) echo "usage: $0 prepare|run|dry-run" >&2; exit 2 ;;
esac
