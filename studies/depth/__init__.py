"""The depth study (docs/study-depth.md): residual schemes at 6+6 and 18+18 layers on Multi30k."""
