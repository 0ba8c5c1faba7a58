"""The shipped studies' own code: what a study's page says beyond the generic report of
``normzoo study report`` (its ``sections``), and the depth study's eval-gap measurement. The
studies themselves are the ``*.yaml`` study files beside this package; README.md lists them."""
