"""The studies: sweeps that produce the science the documentation reports (docs/study-depth.md,
docs/study-llama.md, docs/precision.md), each planned, collected and rendered by its own package
here; README.md says which command does what. The speed and memory benchmarks are benchmarks/'s."""
