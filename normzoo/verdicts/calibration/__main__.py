"""``python -m normzoo.verdicts.calibration``: the null simulation."""

from normzoo.verdicts.calibration.report import main

raise SystemExit(main())
