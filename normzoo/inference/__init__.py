"""Using a trained model: decoding, whole-split translation, classification, and scoring.

* :mod:`~normzoo.inference.load` — ``normzoo.load``: the one way down from a checkpoint or an
  export folder to a model, through :mod:`normzoo.checkpoints`' reading, plugins and rebuild.
* :mod:`~normzoo.inference.model` — :class:`Loaded`, what ``normzoo.load`` hands back.
* :mod:`~normzoo.inference.device` — the device a user names, checked against this machine.
* :mod:`~normzoo.inference.decoding` — greedy and beam search, with the KV cache.
* :mod:`~normzoo.inference.beams` — beam search's choices as tensor operations over the batch.
* :mod:`~normzoo.inference.step_graphs` — the decoder's step: eager, or a CUDA graph on a GPU.
* :mod:`~normzoo.inference.sampling` — sampling from language models, with the KV cache.
* :mod:`~normzoo.inference.translate` — a whole split translated in token-budget batches.
* :mod:`~normzoo.inference.scoring` — BLEU and chrF with sacreBLEU; the paired bootstrap.
* :mod:`~normzoo.inference.classify` — sentences labelled by a model's ``classifier`` head.
* :mod:`~normzoo.inference.evaluation` — ``normzoo evaluate`` and ``Loaded.evaluate``: what to
  score, and its default, the task's own test step on a split or a file.
"""
