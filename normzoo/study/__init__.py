"""``normzoo study``: a study file validated (:mod:`.spec`), its parts run as resumable sweeps
(:mod:`.running`), its cells read back (:mod:`.cells`, :mod:`.collect`), its verdicts judged and
its page, figures and ``verdicts.json`` written (:mod:`.report`, :mod:`.page`, :mod:`.figures`)."""
