# Sourced by the scripts that prepare a lent GPU machine (gpu_check.sh, studies/depth/gpu.sh):
# the packages its image lacks, as wheels for its Python (3.12, manylinux x86-64), pinned to the
# versions a local environment has, so the GPU runs what the CPU ran. A name the environment
# does not have is an error: there would be no version to pin.
#
#   download_wheels DIR "NAMES" [PIP]   # PIP: the environment's pip whose versions to pin
download_wheels() {
  local dir=$1 names=$2 pip=${3:-pip} pins
  pins=$("$pip" freeze | python3 -c "
import sys
norm = lambda name: name.strip().lower().replace('_', '-').replace('.', '-')
wanted = {norm(n) for n in sys.argv[1].split()}
pins = {norm(l.split('==')[0]): l.strip() for l in sys.stdin if '==' in l}
missing = sorted(wanted - set(pins))
if missing:
    sys.exit(f'not installed here, so no version to pin: {\" \".join(missing)}')
print(' '.join(pins[n] for n in sorted(wanted)))
" "$names") || return 1
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$dir" $pins
}
