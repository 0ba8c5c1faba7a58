"""A run directory moved or copied to another path resumes with its best checkpoint.

Lightning's ``ModelCheckpoint`` records its absolute ``dirpath`` in every checkpoint, beside
the absolute paths of the best checkpoints (``best_model_path``, ``best_k_models``,
``kth_best_model_path``, ``last_model_path``). Resumed from another path (another machine, a
renamed folder), its ``load_state_dict`` sees a different ``dirpath`` and drops all of that
state but ``best_model_path``, which still points into the old, gone, folder. The first
validation after the resume then writes a ``best-<step>.ckpt`` however bad its score (there is
no best score left to beat), and the final test and checkpoint averaging read a best
checkpoint that is not there.

:func:`relocated_state` rewrites that state, in memory (the checkpoint file is left as it
is), to the run's current checkpoint folder: every path under the recorded ``dirpath``
becomes the same name under the new one, with its score. A recorded best checkpoint missing
from the new folder is left out (said on one ``warning:`` line), and the best and k-th best
are taken again among those that remain. The run's callback
:class:`~normzoo.run.callbacks.checkpoints.RelocateCheckpoints` applies it before Lightning
restores the state; here is plain data only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def relocated_state(state: dict[str, Any], checkpoint: Any) -> tuple[dict[str, Any], list[str]]:
    """``state`` (a ``ModelCheckpoint``'s, as a checkpoint holds it) moved to the folder of the
    callback ``checkpoint``, and the paths of the recorded best checkpoints left out because
    they are not there. ``state`` itself is returned where it was written in that folder."""
    old, new = state.get("dirpath"), checkpoint.dirpath
    if not old or not new or old == new:
        return state, []

    def moved(path: str | None) -> str | None:
        if not path:
            return path
        try:
            return str(Path(new) / Path(path).relative_to(old))
        except ValueError:  # not under the recorded folder: left where it was
            return path

    kept: dict[str, Any] = {}
    missing: list[str] = []
    for path, score in (state.get("best_k_models") or {}).items():
        path = moved(path)
        if Path(path).exists():
            kept[path] = score
        else:
            missing.append(path)
    relocated = {**state, "dirpath": new, "best_k_models": kept,
                 "best_model_path": moved(state.get("best_model_path")) or "",
                 "kth_best_model_path": moved(state.get("kth_best_model_path")) or "",
                 "last_model_path": moved(state.get("last_model_path")) or ""}
    if relocated["last_model_path"] and not Path(relocated["last_model_path"]).exists():
        relocated["last_model_path"] = ""
    best = relocated["best_model_path"]
    if best and not Path(best).exists() and best not in missing:
        missing.append(best)
    if missing:  # the best and the k-th best (the one to beat) among those that remain
        best_of, worst_of = (min, max) if checkpoint.mode == "min" else (max, min)
        best = best_of(kept, key=kept.__getitem__) if kept else ""
        kth = worst_of(kept, key=kept.__getitem__) if kept else ""
        relocated |= {"best_model_path": best, "best_model_score": kept.get(best),
                      "kth_best_model_path": kth,
                      "kth_value": kept[kth] if kth else checkpoint.kth_value}
    return relocated, missing

