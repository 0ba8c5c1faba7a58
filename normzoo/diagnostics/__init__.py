"""Diagnostics: what a residual scheme does to gradients, the residual stream and stability."""
