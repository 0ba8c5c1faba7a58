"""Language modelling, masked (BERT-style) and causal (GPT-style): the task objects
(:mod:`.task`, light), their LightningModules (:mod:`.module`), the final test
(:mod:`.final_test`), ``normzoo evaluate`` (:mod:`.evaluate`) and streamed corpora
(:mod:`.streaming`)."""
