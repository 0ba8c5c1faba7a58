"""The precision study (docs/precision.md): does bf16-mixed move BLEU or loss against fp32?"""
