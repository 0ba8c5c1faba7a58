"""Files on disk, written whole or not at all (:mod:`~normzoo.io.atomic`): the one writer that
checkpoints, prepared data, tokenizers, summaries, sweep results and figures all go through, so
a kill or a full disk never leaves half a file where a whole one was."""
