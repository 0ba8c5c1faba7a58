"""``python -m normzoo.cli``: the console script without the installed ``normzoo`` launcher, as
multi-node launchers (torchrun, SLURM) and the tests start it."""

from normzoo.cli import main

main()
