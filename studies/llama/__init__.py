"""The schemes-in-a-Llama study (docs/study-llama.md): residual schemes in a Llama-style decoder."""
