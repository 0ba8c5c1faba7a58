"""``normzoo translate`` of a file prints its translations as they are made (issue 52, item 7):
a 29,000-line file printed nothing until the end, so a Ctrl-C after 7 s left no line."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.cli.translate import CHUNK_LINES


def test_each_chunk_of_lines_is_printed_before_the_next_is_decoded(tiny_checkpoint: Path,
                                                                   tmp_path: Path,
                                                                   monkeypatch):
    from normzoo.inference.model import Loaded

    decode = Loaded.translate
    calls: list[int] = []

    def marked(self, sentences, **options):  # a mark in the output where each decode starts
        calls.append(options["first_line"])
        typer.echo(f"<decoding from line {options['first_line']}>")
        return decode(self, sentences, **options)

    monkeypatch.setattr(Loaded, "translate", marked)
    lines = [f"a b c {i % 7}" for i in range(CHUNK_LINES + 10)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["translate", str(tiny_checkpoint), "--input",
                                      str(tmp_path / "in.txt")])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    assert calls == [1, CHUNK_LINES + 1]
    second = out.index(f"<decoding from line {CHUNK_LINES + 1}>")
    assert second == 1 + CHUNK_LINES  # the first chunk's lines came out before it
    assert len(out) == len(lines) + 2
