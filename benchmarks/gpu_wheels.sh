# Sourced by the scripts that prepare a lent GPU machine (gpu_check.sh, study_depth_gpu.sh):
# the packages its image lacks, as wheels for its Python (3.12, manylinux x86-64), pinned to the
# versions a local environment has, so the GPU runs what the CPU ran.
#
#   download_wheels DIR "NAMES" [PIP]   # PIP: the environment's pip whose versions to pin
download_wheels() {
  local dir=$1 names=$2 pip=${3:-pip} pins
  pins=$("$pip" freeze | python3 -c "
import sys
wanted = {n.lower().replace('_', '-') for n in sys.argv[1].split()}
print(' '.join(l.strip() for l in sys.stdin if l.split('==')[0].lower().replace('_', '-') in wanted))
" "$names")
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$dir" $pins
}
