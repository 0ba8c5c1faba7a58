"""Data sources: local line-aligned files, the built-in corpus, and the hub code path (offline,
on local folders in the hub's layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from normzoo.data import builtin
from normzoo.data.sources import DataError, load_parallel, load_text, parallel_files, read_lines
from normzoo.errors import NormzooError
from normzoo.recipe import DataConfig

# -- files -----------------------------------------------------------------------------------------


def files(directory: Path, **kwargs) -> DataConfig:
    return DataConfig(source="files", dir=str(directory), **kwargs)


def write_pair(directory: Path, split: str, src: list[str], tgt: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{split}.en").write_text("".join(s + "\n" for s in src), encoding="utf-8")
    (directory / f"{split}.de").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")


def test_line_aligned_files(tmp_path: Path):
    src = ["A man in a hat.", "Two dogs, playing!", "", "  spaces kept  "]
    tgt = ["Ein Mann mit Hut.", "Zwei Hunde spielen!", "", "Größe: ÄÖÜ ß"]
    write_pair(tmp_path, "train", src, tgt)
    config = files(tmp_path, src_lang="en", tgt_lang="de")
    assert load_parallel(config, "train") == (src, tgt)
    assert load_parallel(config, "train", limit=2) == (src[:2], tgt[:2])
    assert load_parallel(config, "train", limit=100) == (src, tgt)
    # The languages name the files, so swapping them swaps the sides.
    assert load_parallel(files(tmp_path, src_lang="de", tgt_lang="en"), "train") == (tgt, src)


def test_line_ends(tmp_path: Path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree")  # CRLF, no final newline
    assert read_lines(path) == ["one", "two", "three"]
    # Only LF ends a line: a stray CR or a Unicode line separator stays inside its sentence.
    path.write_bytes("a\rb\nc\u2028d\x0be\nf\x85g\n".encode())
    assert read_lines(path) == ["a\rb", "c\u2028d\x0be", "f\x85g"]
    # A byte-order mark is not part of the first sentence.
    path.write_bytes(b"\xef\xbb\xbffirst\nsecond\n")
    assert read_lines(path) == ["first", "second"]


def test_a_stray_carriage_return_does_not_misalign_parallel_files(tmp_path: Path):
    (tmp_path / "train.en").write_bytes(b"one\rstill one\ntwo\n")
    (tmp_path / "train.de").write_bytes(b"eins\nzwei\n")
    src, tgt = parallel_files(tmp_path, "train", "en", "de")
    assert src == ["one\rstill one", "two"]
    assert tgt == ["eins", "zwei"]


def test_missing_file(tmp_path: Path):
    (tmp_path / "train.en").write_text("a\n", encoding="utf-8")
    with pytest.raises(DataError, match="not found") as info:
        load_parallel(files(tmp_path, tgt_lang="de"), "train")
    assert str(tmp_path / "train.de") in str(info.value)
    with pytest.raises(DataError, match="not found") as info:
        load_text(files(tmp_path), "valid")
    assert str(tmp_path / "valid.txt") in str(info.value)
    with pytest.raises(DataError, match="not found"):
        load_parallel(files(tmp_path / "nowhere", tgt_lang="de"), "train")


def test_a_directory_is_not_a_data_file(tmp_path: Path):
    (tmp_path / "train.txt").mkdir()
    with pytest.raises(DataError, match="not found"):
        load_text(files(tmp_path), "train")


def test_empty_file(tmp_path: Path):
    (tmp_path / "train.en").write_text("", encoding="utf-8")
    (tmp_path / "train.de").write_text("x\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty") as info:
        load_parallel(files(tmp_path, tgt_lang="de"), "train")
    assert str(tmp_path / "train.en") in str(info.value)
    (tmp_path / "test.txt").write_bytes(b"")
    with pytest.raises(DataError, match="empty") as info:
        load_text(files(tmp_path), "test")
    assert str(tmp_path / "test.txt") in str(info.value)


def test_misaligned_files(tmp_path: Path):
    write_pair(tmp_path, "valid", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(DataError, match="line-aligned") as info:
        load_parallel(files(tmp_path, tgt_lang="de"), "valid")
    message = str(info.value)
    assert str(tmp_path / "valid.en") in message and "3 lines" in message
    assert str(tmp_path / "valid.de") in message and "has 2" in message


def test_not_utf8(tmp_path: Path):
    (tmp_path / "train.en").write_text("fine\n", encoding="utf-8")
    (tmp_path / "train.de").write_bytes("Größe\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8") as info:
        load_parallel(files(tmp_path, tgt_lang="de"), "train")
    assert str(tmp_path / "train.de") in str(info.value)
    assert "byte 2" in str(info.value)


def test_data_errors_are_user_errors():
    assert issubclass(DataError, NormzooError)


def test_text_files(tmp_path: Path):
    lines = ["first line", "", "third line with ümlauts"]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert load_text(files(tmp_path), "train") == lines
    assert load_text(files(tmp_path), "train", limit=1) == lines[:1]


def test_a_text_split_may_name_its_file(tmp_path: Path):
    """A language model reads one side of a parallel corpus as it lies (``train_split:
    train.de``); a ``{split}.txt`` beside it still wins, and a missing file names the .txt."""
    (tmp_path / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    assert load_text(files(tmp_path), "train.de") == ["eins", "zwei"]
    (tmp_path / "train.de.txt").write_text("drei\n", encoding="utf-8")
    assert load_text(files(tmp_path), "train.de") == ["drei"]
    with pytest.raises(DataError, match="not found") as info:
        load_text(files(tmp_path), "val.de")
    assert str(tmp_path / "val.de.txt") in str(info.value)


def test_files_written_by_the_builtin_corpus(tmp_path: Path):
    builtin.write_split(tmp_path, "valid", "en", "xx", size=20)
    src, tgt = load_parallel(files(tmp_path), "valid")
    assert list(zip(src, tgt, strict=True)) == builtin.generate("valid", size=20)


# -- builtin ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_builtin_source(split: str):
    config = DataConfig(source="builtin")
    src, tgt = load_parallel(config, split, limit=30)
    assert list(zip(src, tgt, strict=True)) == builtin.generate(split)[:30]
    assert load_text(config, split, limit=30) == src
    assert all(isinstance(s, str) and s for s in src + tgt)


def test_builtin_source_without_limit_is_the_whole_split():
    src, tgt = load_parallel(DataConfig(source="builtin"), "valid")
    assert len(src) == len(tgt) == builtin.SPLITS["valid"]


def test_builtin_source_unknown_split():
    with pytest.raises(DataError, match="no split 'validation'"):
        load_parallel(DataConfig(source="builtin"), "validation", limit=3)
    with pytest.raises(DataError, match="no split 'validation'"):
        load_text(DataConfig(source="builtin"), "validation")


# -- the hub, offline ------------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network and no cache outside tmp_path, even if ``datasets`` is imported already."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants

    home = tmp_path / "hf"
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(home / "datasets"))
    # The libraries read these once, at import.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True, raising=False)
    datasets.disable_progress_bars()


def hub_folder(root: Path, config: str, columns: dict[str, dict[str, list]]) -> Path:
    """A dataset repository as on the hub: README front-matter ``configs`` + parquet files.

    ``columns`` maps split -> column -> values.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = ["---", "configs:", f"- config_name: {config}", "  data_files:"]
    for split, table in columns.items():
        relative = f"{config}/{split}-00000-of-00001.parquet"
        lines += [f"  - split: {split}", f"    path: {relative}"]
        (root / config).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(table), root / relative)
    lines += ["---", "", f"# A local copy of {root.name}", ""]
    (root / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return root


def pairs(split: str, n: int) -> list[dict[str, str]]:
    return [{"de": f"Satz {i} aus {split}: Größe ä!", "en": f"Sentence {i} of {split}."}
            for i in range(n)]


@pytest.fixture
def wmt(tmp_path: Path, offline) -> Path:
    sizes = {"train": 12, "validation": 5, "test": 4}
    return hub_folder(tmp_path / "wmt" / "wmt14", "de-en",
                      {split: {"translation": pairs(split, n)} for split, n in sizes.items()})


def wmt_config(folder: Path, **kwargs) -> DataConfig:
    return DataConfig(**{"source": "hub", "path": str(folder), "name": "de-en",
                         "src_lang": "en", "tgt_lang": "de", **kwargs})


def test_hub_translation_in_order(wmt: Path):
    src, tgt = load_parallel(wmt_config(wmt), "validation")
    want = pairs("validation", 5)
    assert src == [p["en"] for p in want]
    assert tgt == [p["de"] for p in want]
    src, tgt = load_parallel(wmt_config(wmt), "train", limit=3)
    assert src == [p["en"] for p in pairs("train", 3)]
    assert load_parallel(wmt_config(wmt), "test", limit=100)[1] == [p["de"] for p in
                                                                    pairs("test", 4)]
    # Reversed direction.
    src, tgt = load_parallel(wmt_config(wmt, src_lang="de", tgt_lang="en"), "test")
    assert src[0] == "Satz 0 aus test: Größe ä!" and tgt[0] == "Sentence 0 of test."


def test_hub_unknown_split(wmt: Path):
    with pytest.raises(DataError, match="cannot load split 'valid'") as info:
        load_parallel(wmt_config(wmt), "valid")
    assert "validation" in str(info.value)  # the message lists the splits there are
    # the dataset was found, so neither "Offline?" nor local files: the recipe key to set
    assert str(info.value).endswith("['train', 'validation', 'test']; set data.valid_split "
                                    "to one of them")


def test_hub_unknown_config(wmt: Path):
    with pytest.raises(DataError, match="fr-en"):
        load_parallel(wmt_config(wmt, name="fr-en"), "test")


def test_hub_missing_language(wmt: Path):
    with pytest.raises(DataError, match=r"no language\(s\) \['fr'\]"):
        load_parallel(wmt_config(wmt, tgt_lang="fr"), "test")


def test_hub_without_a_translation_column(tmp_path: Path, offline):
    folder = hub_folder(tmp_path / "mono", "default", {"train": {"text": ["a", "b"]}})
    with pytest.raises(DataError, match="no 'translation' column"):
        load_parallel(DataConfig(source="hub", path=str(folder), name="default"), "train")


WIKI = {
    "train": ["", " = Title = ", "", " Some text , with spaces . ", "   ", "Last line"],
    "validation": ["", " = Valid = ", "", " valid text "],
    "test": [" only test "],
}


@pytest.fixture
def wikitext(tmp_path: Path, offline) -> Path:
    return hub_folder(tmp_path / "Salesforce" / "wikitext", "wikitext-2-raw-v1",
                      {split: {"text": lines} for split, lines in WIKI.items()})


def wiki_config(folder: Path, **kwargs) -> DataConfig:
    return DataConfig(source="hub", path=str(folder), name="wikitext-2-raw-v1", **kwargs)


def test_hub_text(wikitext: Path):
    # Blank lines are dropped (raw WikiText separates paragraphs with them); text is unchanged.
    assert load_text(wiki_config(wikitext), "train") == [
        " = Title = ", " Some text , with spaces . ", "Last line"]
    assert load_text(wiki_config(wikitext), "validation") == [" = Valid = ", " valid text "]
    # The limit counts kept lines.
    assert load_text(wiki_config(wikitext), "train", limit=2) == [
        " = Title = ", " Some text , with spaces . "]


def test_hub_text_missing_field(wikitext: Path):
    with pytest.raises(DataError, match="no 'content' column") as info:
        load_text(wiki_config(wikitext, text_field="content"), "test")
    assert "text" in str(info.value)


def test_unreachable_hub_dataset_is_a_data_error(offline):
    config = DataConfig(source="hub", path="wmt/wmt14", name="de-en", src_lang="en",
                        tgt_lang="de")
    with pytest.raises(DataError) as info:
        load_parallel(config, "validation")
    message = str(info.value)
    assert "wmt/wmt14" in message and "de-en" in message and "validation" in message
    assert "data.source=files" in message  # says what to do instead
    with pytest.raises(DataError, match="Salesforce/wikitext"):
        load_text(DataConfig(source="hub", path="Salesforce/wikitext",
                             name="wikitext-103-raw-v1"), "train")


def test_missing_local_hub_folder_is_a_data_error(tmp_path: Path, offline):
    with pytest.raises(DataError, match="cannot load"):
        load_parallel(DataConfig(source="hub", path=str(tmp_path / "no" / "such")), "train")


@pytest.mark.parametrize("error", [OSError("disk full"), RuntimeError("boom"), KeyError("x")])
def test_any_hub_failure_is_a_data_error(offline, monkeypatch: pytest.MonkeyPatch,
                                         error: Exception):
    import datasets

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(DataError, match=type(error).__name__) as info:
        load_text(DataConfig(source="hub", path="some/dataset"), "train")
    assert "some/dataset" in str(info.value)
