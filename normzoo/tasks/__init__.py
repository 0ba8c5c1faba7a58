"""The machinery every task's LightningModule shares (:mod:`.base`, :mod:`.scored`), the data
module, the optimizer and schedules, the default final test (:mod:`.testing`) and evaluation
(:mod:`.evaluation`), and normzoo's own translation and language-model tasks (``translation/``,
``lm/``). What a task *is* (the contract) and which task a recipe names live below the data, in
:mod:`normzoo.contract`; plugin authors import both from :mod:`normzoo.plugin`.
"""
