"""The classifier study (docs/study-classify.md): a classifier from a masked LM's encoder or
from a random initialisation."""
