"""Sentence classification on the BERT-style encoder, written against the task contract alone
(:mod:`normzoo.contract.task`), as a third party would write a task: the task object
(:mod:`.task`, light), its data (:mod:`.layout`, :mod:`.corpus`, :mod:`.data`), its head
(:mod:`.model`), its LightningModule (:mod:`.module`), its metrics (:mod:`.metrics`) and
``normzoo evaluate`` (:mod:`.evaluate`)."""
