"""``normzoo export``: a self-contained directory that needs neither the run nor Lightning.

Layout (``--format normzoo``, the default)::

    model.safetensors   weights (tied embeddings stored once)
    config.json         the resolved recipe and the vocabulary size
    tokenizer.json      the tokenizer
    metadata.json       normzoo version, plugins (name, distribution, version), provenance
    README.md           the model card (:mod:`normzoo.export.card`)

``--format hf`` writes what ``transformers``' Auto classes load instead (:mod:`normzoo.export.hf`).

``--average N`` averages the parameters of the N most recent checkpoints of the run first, as
fairseq's ``average_checkpoints.py`` does. Either format is written whole or not at all: in a
hidden staging folder beside ``--out``, renamed to it when complete. An export that is killed
leaves that folder; the next export into the same folder removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from normzoo import __version__
from normzoo.checkpoints.averaging import average_state
from normzoo.checkpoints.reading import (
    EXPORT_FILES,
    CheckpointError,
)
from normzoo.checkpoints.rebuild import load_state
from normzoo.checkpoints.rolling import checkpoint_step, step_checkpoints
from normzoo.errors import RuntimeFailure
from normzoo.inference.load import load_checkpoint
from normzoo.io.atomic import (
    fsync_directory,
    not_a_folder,
    os_reason,
    remove_stale_staging,
    staging_folder,
)


def recent_checkpoints(checkpoint: Path, count: int) -> list[Path]:
    """The ``count`` most recent periodic checkpoints (``step-N.ckpt``, one per validation) of
    ``checkpoint``'s run, up to ``checkpoint``'s own step, newest first."""
    newest = checkpoint_step(checkpoint)
    newest = -1 if newest is None else newest
    periodic = [(step, path) for step, path in step_checkpoints(checkpoint.parent)
                if step <= newest][::-1]
    if len(periodic) < count:
        raise CheckpointError(
            f"--average {count} needs {count} periodic checkpoints (step-N.ckpt) up to step "
            f"{newest} in {checkpoint.parent}, found {len(periodic)}; trainer.keep_checkpoints "
            "sets how many a run keeps"
        )
    return [path for _, path in periodic[:count]]


def _refuse_unusable(checkpoint: Path, out: Path) -> None:
    """Mistakes seen without reading anything: an export given as the checkpoint, an --out
    that is a file or a folder that already holds something."""
    if checkpoint.is_dir() and all((checkpoint / name).is_file() for name in EXPORT_FILES):
        raise CheckpointError(
            f"{checkpoint} is an export directory (written by normzoo export), not a checkpoint: "
            "export needs a .ckpt file from a run's checkpoints/ folder (evaluate and "
            "translate read export directories as they are)")
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"--out {out} is a file; export writes a directory: choose "
                              "another --out")
    if out.is_dir() and any(out.iterdir()):
        raise CheckpointError(f"{out} exists and is not empty; choose another --out")
    if (why := not_a_folder(out)) is not None:
        raise CheckpointError(f"--out {out} {why}; choose another --out")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_files(loaded, sources: list[Path], staging: Path) -> None:
    """The normzoo export's files."""
    from safetensors.torch import save_model

    save_model(loaded.model, str(staging / "model.safetensors"))
    config = {"recipe": loaded.recipe.to_dict(), "vocab_size": loaded.tokenizer.vocab_size}
    (staging / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (staging / "tokenizer.json").write_text(loaded.tokenizer.backend.to_str(pretty=True),
                                            encoding="utf-8")
    metadata = {
        "normzoo_version": __version__,
        "plugins": loaded.plugins,
        "averaged": [str(p) for p in sources],
        "task": loaded.recipe.task,
    }
    (staging / "metadata.json").write_text(json.dumps(metadata, indent=2), encoding="utf-8")


def _flush(staging: Path) -> None:
    """Every file flushed to disk, with the permissions the umask gives (safetensors writes
    0600 and mkdtemp makes 0700, whatever the umask)."""
    mask = _umask()
    for path in staging.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(path, 0o666 & ~mask)
    os.chmod(staging, 0o777 & ~mask)


def _write_failure(out: Path, error: BaseException) -> RuntimeFailure:
    return RuntimeFailure(f"could not write the export {out}: {os_reason(error)}; nothing was "
                          "left behind")


FORMATS = ("normzoo", "hf")


def export(checkpoint: str | Path, out: str | Path, average: int = 1,
           fmt: str = "normzoo") -> Any:
    """Write an export of ``checkpoint`` to ``out``: complete, or not there at all.

    ``fmt`` is ``normzoo`` (returns ``out``) or ``hf`` (returns :class:`normzoo.export.hf.HFExport`,
    which says what was exported and how far its logits are from normzoo's). The files are
    written into a hidden folder beside ``out``, flushed, and the folder renamed to ``out``; an
    unwritable or full disk removes it and raises :class:`RuntimeFailure`. Such folders that
    killed exports left beside ``out`` are removed first
    (:func:`~normzoo.io.atomic.remove_stale_staging`).
    """
    from safetensors import SafetensorError

    from normzoo.export.card import model_card

    if fmt not in FORMATS:
        raise CheckpointError(f"unknown export format {fmt!r}; choose one of "
                              + ", ".join(FORMATS))
    checkpoint, out = Path(checkpoint), Path(out)
    _refuse_unusable(checkpoint, out)
    loaded = load_checkpoint(checkpoint)
    sources = [checkpoint]
    if average > 1:
        sources = recent_checkpoints(checkpoint, average)
        load_state(loaded.model, average_state(sources), f"the average of {len(sources)} "
                   f"checkpoints of {checkpoint.parent}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # tidying up is no reason to fail this export
            remove_stale_staging(out.parent)  # what killed exports left, not running ones'
        staging = staging_folder(out)
    except OSError as error:
        raise _write_failure(out, error) from None
    try:
        result: Any = out
        if fmt == "hf":
            from normzoo.export import hf

            result = hf.write(loaded, staging)
        else:
            _write_files(loaded, sources, staging)
        card = model_card(loaded, sources, result if fmt == "hf" else None)
        (staging / "README.md").write_text(card, encoding="utf-8")
        _flush(staging)
        if out.exists():
            out.rmdir()
        staging.rename(out)
    except (OSError, SafetensorError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise _write_failure(out, error) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_directory(out.parent)
    return result
