"""Shim so ``python cli.py ...`` works from a checkout; the real app is :mod:`normzoo.cli`."""

from normzoo.cli import main

if __name__ == "__main__":
    main()
