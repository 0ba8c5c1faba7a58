"""``normzoo.load``: a trained model from a Lightning checkpoint or an export folder, safely.

One pass downward, each module entered once:

1. :mod:`~normzoo.checkpoints.reading` reads the file and checks each part (never running code
   from it: ``torch.load(weights_only=True)``, safetensors);
2. :mod:`~normzoo.checkpoints.plugins` checks that the plugins that built the model are here;
3. :mod:`~normzoo.checkpoints.rebuild` validates the saved recipe, assembles the model and loads
   the weights;
4. the model is moved to the device and handed back as :class:`~normzoo.inference.model.Loaded`.

Everything needed to rebuild the model (resolved recipe, tokenizer, the plugins that built it)
travels inside the checkpoint, so a checkpoint is usable on a machine that never saw the run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from normzoo.checkpoints.plugins import check_plugins
from normzoo.checkpoints.reading import (  # noqa: F401  (public here: normzoo.checkpoint's names)
    EXPORT_FILES,
    CheckpointError,
    SavedModel,
    read_checkpoint_file,
    read_export_folder,
)
from normzoo.checkpoints.rebuild import rebuild
from normzoo.inference import arguments
from normzoo.inference.device import inference_device
from normzoo.inference.model import Loaded


def _loaded(saved: SavedModel, where: torch.device) -> Loaded:
    recipe, model = rebuild(saved, check_plugins(saved.plugins, saved.source))
    model.eval().to(where)
    return Loaded(model, saved.tokenizer, recipe, saved.plugins, saved.source)


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """A model from a Lightning checkpoint written by ``normzoo train``, on ``device``
    (:func:`~normzoo.inference.device.inference_device`)."""
    path = arguments.path("path", path)
    where = inference_device(device)  # before reading: a device this machine lacks is refused
    return _loaded(read_checkpoint_file(path), where)


def load_export(directory: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """A model from a directory written by ``normzoo export``, on ``device``."""
    directory = arguments.path("directory", directory)
    where = inference_device(device)
    return _loaded(read_export_folder(directory), where)


def load(path: str | Path, device: str | torch.device = "cpu") -> Loaded:
    """Load a checkpoint file or an export directory (``normzoo.load``) onto ``device``:
    ``cpu`` (the default), ``cuda``, ``cuda:1``, ``mps`` or ``auto`` (a GPU if there is one).
    A ``path`` or ``device`` of the wrong type or value is a TypeError or ValueError that says
    what is accepted (:mod:`~normzoo.inference.arguments`)."""
    path = arguments.path("path", path)
    return load_export(path, device) if path.is_dir() else load_checkpoint(path, device)
