"""``python -m normzoo``: the ``normzoo`` command, for where its launcher is not on the ``PATH``
(a virtual environment not activated, ``python3.11 -m normzoo`` for one interpreter of several).
"""

from normzoo.cli import main

if __name__ == "__main__":
    main()
