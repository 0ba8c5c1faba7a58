"""Token tagging on normzoo's encoder: every word of a sentence gets one tag."""
