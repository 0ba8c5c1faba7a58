"""The Python API checks its arguments before any work: a bad one is a ValueError (bad value) or
TypeError (bad type) whose message names the argument and what it accepts, never pydantic's
text about the internal EvalConfig or torch's about probability tensors (issue 52). Non-finite
floats are refused everywhere."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from test_generate import lm_checkpoint  # noqa: F401  (a fixture)

import normzoo

NAN, INF = math.nan, math.inf
FOREIGN = ("pydantic", "EvalConfig", "validation error", "tensor", "concatenate", "NoneType' "
           "object", "argument should be")

# (model, method, positional arguments, keyword arguments, error, what the message says)
CASES = {
    "translate beam=0": ("mt", "translate", [["the dog ."]], {"beam": 0}, ValueError,
                         "beam must be an integer >= 1, got 0"),
    "translate beam=2.5": ("mt", "translate", [["the dog ."]], {"beam": 2.5}, TypeError,
                           "beam must be an integer >= 1, got 2.5"),
    "translate beam=True": ("mt", "translate", [["the dog ."]], {"beam": True}, TypeError,
                            "beam must be an integer >= 1, got True"),
    "translate lenpen=nan": ("mt", "translate", [["the dog ."]], {"lenpen": NAN}, ValueError,
                             "lenpen must be a finite number >= 0, got nan"),
    "translate lenpen=inf": ("mt", "translate", [["the dog ."]], {"lenpen": INF}, ValueError,
                             "lenpen must be a finite number >= 0, got inf"),
    "translate lenpen=-1": ("mt", "translate", [["the dog ."]], {"lenpen": -1}, ValueError,
                            "lenpen must be a finite number >= 0, got -1"),
    "translate lenpen='0.6'": ("mt", "translate", [["the dog ."]], {"lenpen": "0.6"},
                               TypeError, "lenpen must be a finite number >= 0, got str '0.6'"),
    "translate max_tokens=0": ("mt", "translate", [["the dog ."]], {"max_tokens": 0},
                               ValueError, "max_tokens must be an integer >= 1, got 0"),
    "translate bf16='no'": ("mt", "translate", [["the dog ."]], {"bf16": "no"}, TypeError,
                            "bf16 must be True or False, got str 'no'"),
    "translate first_line=0": ("mt", "translate", [["the dog ."]], {"first_line": 0},
                               ValueError, "first_line must be an integer >= 1, got 0"),
    "translate None": ("mt", "translate", [None], {}, TypeError,
                       "translate takes a list of strings, got NoneType"),
    "eval_config beam=0": ("mt", "eval_config", [], {"beam": 0}, ValueError,
                           "beam must be an integer >= 1, got 0"),
    "generate temperature=nan": ("lm", "generate", [["the dog"]], {"temperature": NAN},
                                 ValueError, "temperature must be a finite number >= 0, got nan"),
    "generate temperature=inf": ("lm", "generate", [["the dog"]], {"temperature": INF},
                                 ValueError, "temperature must be a finite number >= 0, got inf"),
    "generate temperature=-1": ("lm", "generate", [["the dog"]], {"temperature": -1},
                                ValueError, "temperature must be a finite number >= 0, got -1"),
    "generate seed='x'": ("lm", "generate", [["the dog"]], {"seed": "x"}, TypeError,
                          "seed must be an integer >= -9223372036854775808 and <= "
                          "18446744073709551615 or None, got str 'x'"),
    "generate seed=2**64": ("lm", "generate", [["the dog", "a cat"]], {"seed": 2**64},
                            ValueError, "seed must be an integer >= -9223372036854775808 and "
                            "<= 18446744073709551614 or None, got 18446744073709551616"),
    "generate max_new_tokens=-1": ("lm", "generate", [["the dog"]], {"max_new_tokens": -1},
                                   ValueError, "max_new_tokens must be an integer >= 1, got -1"),
    "generate max_new_tokens=0": ("lm", "generate", [["the dog"]], {"max_new_tokens": 0},
                                  ValueError, "max_new_tokens must be an integer >= 1, got 0"),
    "generate top_k=0": ("lm", "generate", [["the dog"]], {"top_k": 0}, ValueError,
                         "top_k must be an integer >= 1 or None, got 0"),
    "generate top_p=nan": ("lm", "generate", [["the dog"]], {"top_p": NAN}, ValueError,
                           "top_p must be a finite number > 0 and <= 1 or None, got nan"),
    "generate top_p=0": ("lm", "generate", [["the dog"]], {"top_p": 0}, ValueError,
                         "top_p must be a finite number > 0 and <= 1 or None, got 0"),
    "generate top_p=1.5": ("lm", "generate", [["the dog"]], {"top_p": 1.5}, ValueError,
                           "top_p must be a finite number > 0 and <= 1 or None, got 1.5"),
    "generate batch_size=0": ("lm", "generate", [["the dog"]], {"batch_size": 0}, ValueError,
                              "batch_size must be an integer >= 1, got 0"),
    "stream temperature=nan": ("lm", "stream", ["the dog"], {"temperature": NAN}, ValueError,
                               "temperature must be a finite number >= 0, got nan"),
    "stream generator=0": ("lm", "stream", ["the dog"], {"generator": 0}, TypeError,
                           "generator must be a torch.Generator (Loaded.generator) or None, "
                           "got int"),
    "generator seed='x'": ("lm", "generator", ["x"], {}, TypeError,
                           "seed must be an integer >= -9223372036854775808 and <= "
                           "18446744073709551615, got str 'x'"),
}


@pytest.fixture(scope="module")
def models(tiny_checkpoint: Path, lm_checkpoint: Path) -> dict[str, Any]:  # noqa: F811
    return {"mt": normzoo.load(tiny_checkpoint), "lm": normzoo.load(lm_checkpoint)}


def _refused(call, error: type[Exception], says: str) -> None:
    """``call()`` raises exactly ``error`` with ``says``, in normzoo's words only."""
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    assert message == says
    assert not any(word in message for word in FOREIGN), message
    assert type(raised.value).__module__.startswith("normzoo"), type(raised.value)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_named_with_what_is_accepted(models: dict[str, Any], case: str):
    model, method, args, kwargs, error, says = CASES[case]
    # The call alone, not its iteration: stream checks before its first piece is asked for.
    _refused(lambda: getattr(models[model], method)(*args, **kwargs), error, says)


def test_load_none_is_a_type_error_naming_path():
    _refused(lambda: normzoo.load(None), TypeError, "path must be a str or os.PathLike naming "
             "a checkpoint file or an export folder, got None")


def test_load_an_empty_path_is_a_value_error():
    _refused(lambda: normzoo.load(""), ValueError,
             "path must name a checkpoint file or an export folder, got ''")


def test_load_an_unknown_device_is_a_value_error(tiny_checkpoint: Path):
    _refused(lambda: normzoo.load(tiny_checkpoint, device="tpu"), ValueError,
             "unknown device 'tpu': use cpu, cuda, cuda:N, mps or auto")


def test_load_a_device_of_the_wrong_type_is_a_type_error(tiny_checkpoint: Path):
    _refused(lambda: normzoo.load(tiny_checkpoint, device=0), TypeError,
             "device must be a str (cpu, cuda, cuda:N, mps or auto) or a torch.device, got "
             "int 0")


def test_good_arguments_still_work(models: dict[str, Any]):
    """The checks let through what the API always took: numpy-free ints and floats, None for
    the recipe's own settings, a tuple of texts."""
    mt, lm = models["mt"], models["lm"]
    assert mt.translate(("the dog .",), beam=2, lenpen=1) == mt.translate(["the dog ."],
                                                                         beam=2, lenpen=1.0)
    assert mt.eval_config(beam=None).beam == mt.recipe.eval.beam
    [text] = lm.generate(["the dog"], max_new_tokens=3, temperature=0.5, top_k=5, top_p=0.9,
                         seed=-1)
    assert isinstance(text, str)
    assert "".join(lm.stream("the dog", max_new_tokens=3, generator=lm.generator(4))) == \
        lm.generate(["the dog"], max_new_tokens=3, seed=4)[0]
