"""Translation: the task object (:mod:`.task`, light), its LightningModule (:mod:`.module`), its
final test (:mod:`.final_test`) and ``normzoo evaluate`` (:mod:`.evaluate`)."""
