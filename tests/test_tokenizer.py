"""Tokenizer: round trips, fixed special ids, the content-hash cache, (de)serialisation, errors.

What a round trip guarantees (see ``normzoo.data.tokenizer``): ``decode(encode(t))`` equals
``NFKC(t)`` for one-line text that does not start with a space and whose characters all occur in
the training text. Runs of spaces, trailing spaces, punctuation, casing and umlauts survive;
the first leading space is dropped; unseen characters (tabs, newlines, other scripts) decode to
nothing.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normzoo.data import builtin
from normzoo.data import tokenizer as tokmod
from normzoo.data.tokenizer import (
    BOS,
    EOS,
    MASK,
    PAD,
    SPECIALS,
    UNK,
    Tokenizer,
    cache_dir,
    train_tokenizer,
)
from normzoo.errors import NormzooError

MULTI30K = Path("/work/shared/data/multi30k")

# Hand-written lines so that umlauts, ß, digits and punctuation are in every training corpus.
EXTRA_TRAIN = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Zwei Hunde spielen im Schnee; einer läuft über die Straße!",
    "Größere Mädchen üben Fußball (draußen) – um 5:30 Uhr?",
    "Ärger, Öl und Übermut: \"Schön\", sagte sie, 'sehr schön'.",
    "Is it 42% or 3.14? Yes/no & maybe - #1 @home [ok] {fine} = 7*6 + 0.",
    "JOHN'S café costs €12; naïve Zoë wasn't sure.",
    "The quick brown fox jumps over the lazy dog: THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
    "Digits 0123456789 and 9876543210.",
]
HELD_OUT = [
    "Die Mädchen laufen über den großen Platz.",
    "Öffnet Ärzte ihre Türen?",
    "Two dogs, three cats & one bird: 12% (roughly)!",
    "The bakers are blue, but Zoë's café is ÜBER-cool.",
    "Schön; Straße - Fußball.",
    "double  spaces   and a trailing space ",
]


def nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "nzcache"
    monkeypatch.setenv("NORMZOO_CACHE", str(root))
    return root


def corpus() -> list[str]:
    pairs = builtin.generate("train", size=2000)
    return [s for s, _ in pairs] + [t for _, t in pairs] + EXTRA_TRAIN


@pytest.fixture(scope="module")
def bpe() -> Tokenizer:
    return train_tokenizer(corpus(), vocab_size=800, use_cache=False)


@pytest.fixture(scope="module")
def unigram() -> Tokenizer:
    return train_tokenizer(corpus(), kind="unigram", vocab_size=800, use_cache=False)


def alphabet(texts: list[str]) -> set[str]:
    return set("".join(nfkc(t) for t in texts))


# -- round trips ---------------------------------------------------------------------------------


def test_cache_dir_follows_the_environment(_cache: Path):
    assert cache_dir() == _cache / "tokenizers"


@pytest.mark.parametrize("text", HELD_OUT)
def test_round_trip_held_out_sentences(bpe: Tokenizer, unigram: Tokenizer, text: str):
    assert text not in corpus()
    assert set(text) <= alphabet(corpus())  # the guarantee's precondition
    for tok in (bpe, unigram):
        ids = tok.encode(text)
        assert UNK not in ids
        assert all(len(SPECIALS) <= i < tok.vocab_size for i in ids)
        assert tok.decode(ids) == nfkc(text)


def test_round_trip_held_out_builtin_split(bpe: Tokenizer):
    test = builtin.generate("test", size=200)
    texts = [s for s, _ in test] + [t for _, t in test]
    assert bpe.decode_batch(bpe.encode_batch(texts)) == texts
    assert bpe.encode_batch(texts[:3]) == [bpe.encode(t) for t in texts[:3]]


def test_round_trip_normalises_to_nfkc(bpe: Tokenizer):
    decomposed = "Mädchen".replace("ä", "a\u0308")  # a + combining diaeresis
    assert decomposed != "Mädchen"
    assert bpe.decode(bpe.encode(decomposed)) == "Mädchen"
    assert bpe.decode(bpe.encode("ﬁne")) == "fine"  # the fi ligature (NFKC compatibility)


def test_what_is_not_guaranteed(bpe: Tokenizer):
    assert bpe.decode(bpe.encode(" leading")) == "leading"  # one leading space is dropped
    assert bpe.decode(bpe.encode("  leading")) == " leading"
    assert UNK in bpe.encode("tab\there")  # never seen in training
    assert bpe.decode(bpe.encode("tab\there")) == "tabhere"
    assert bpe.decode(bpe.encode("Kanji 漢字")) == "Kanji "


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_property(bpe: Tokenizer, data: st.DataObject):
    chars = sorted(alphabet(corpus()) - set("<>▁"))  # '<s>' etc. would read as specials
    text = data.draw(st.text(alphabet=chars, min_size=1, max_size=60))
    text = text.lstrip(" ") or "x"
    assert bpe.decode(bpe.encode(text)) == text


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="no Multi30k data on this machine")
def test_round_trip_multi30k():
    def lines(name: str, n: int) -> list[str]:
        with open(MULTI30K / name, encoding="utf-8") as f:
            return [next(f).rstrip("\n") for _ in range(n)]

    train = corpus() + lines("train.de", 3000) + lines("train.en", 3000)
    tok = train_tokenizer(train, vocab_size=2000, use_cache=False)
    seen = alphabet(train)
    held = [t for t in lines("val.de", 300) + lines("val.en", 300) if t and t[0] != " "]
    covered = [t for t in held if set(nfkc(t)) <= seen]
    assert len(covered) >= 0.9 * len(held)
    assert any(set(t) & set("äöüßÄÖÜ") for t in covered)
    assert [tok.decode(tok.encode(t)) for t in covered] == [nfkc(t) for t in covered]


def test_lowercase_option():
    tok = train_tokenizer(corpus(), vocab_size=500, lowercase=True, use_cache=False)
    assert tok.decode(tok.encode("The Bakers ÄRGERN")) == "the bakers ärgern"


# -- special ids ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["bpe", "unigram"])
def test_special_ids_are_fixed(request: pytest.FixtureRequest, fixture: str):
    tok: Tokenizer = request.getfixturevalue(fixture)
    assert (PAD, BOS, EOS, UNK, MASK) == (0, 1, 2, 3, 4)
    assert SPECIALS == ("<pad>", "<s>", "</s>", "<unk>", "<mask>")
    for i, token in enumerate(SPECIALS):
        assert tok.backend.token_to_id(token) == i
        assert tok.backend.id_to_token(i) == token
    assert tok.vocab_size <= 800


def test_encode_adds_no_specials(bpe: Tokenizer):
    ids = bpe.encode("The bakers are blue.")
    assert not set(ids) & {PAD, BOS, EOS, UNK, MASK}


def test_decode_stops_at_eos_and_drops_specials(bpe: Tokenizer):
    a, b = bpe.encode("The bakers"), bpe.encode("are blue.")
    assert bpe.decode([BOS, *a, EOS, *b]) == "The bakers"
    assert bpe.decode([BOS, *a[:1], MASK, PAD, *a[1:], PAD, PAD]) == "The bakers"
    assert bpe.decode([EOS, *a]) == ""
    assert bpe.decode([]) == ""
    assert bpe.decode_batch([[*a, EOS, *b], b]) == ["The bakers", "are blue."]


# -- the cache -----------------------------------------------------------------------------------


def _count_training(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = tokmod._build

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(tokmod, "_build", counting)
    return calls


def test_second_call_loads_from_the_cache(monkeypatch: pytest.MonkeyPatch, _cache: Path):
    calls = _count_training(monkeypatch)
    texts = corpus()
    first = train_tokenizer(texts, vocab_size=300)
    files = sorted((_cache / "tokenizers").glob("*.json"))
    assert len(files) == 1 and calls == ["bpe"]
    mtime = files[0].stat().st_mtime_ns

    second = train_tokenizer(list(texts), vocab_size=300)
    assert calls == ["bpe"]  # not trained again
    assert files[0].stat().st_mtime_ns == mtime
    assert second.to_str() == first.to_str()
    assert not list((_cache / "tokenizers").glob("*.tmp*"))  # the atomic write left nothing


def test_different_text_or_settings_get_different_cache_files(
    monkeypatch: pytest.MonkeyPatch, _cache: Path
):
    calls = _count_training(monkeypatch)
    texts = corpus()
    train_tokenizer(texts, vocab_size=300)
    train_tokenizer(texts[:-1], vocab_size=300)
    train_tokenizer([*texts[:-1], texts[-1] + "!"], vocab_size=300)
    train_tokenizer(texts, vocab_size=301)
    train_tokenizer(texts, vocab_size=300, lowercase=True)
    train_tokenizer(texts, vocab_size=300, kind="unigram")
    assert len(calls) == 6
    assert len(list((_cache / "tokenizers").glob("*.json"))) == 6
    train_tokenizer(texts, vocab_size=300, kind="unigram")
    assert len(calls) == 6


def test_cache_key_separates_lines():
    settings = {"kind": "bpe"}
    assert tokmod.corpus_key(["a\nb"], settings) != tokmod.corpus_key(["a", "b"], settings)
    assert tokmod.corpus_key(["ab", "c"], settings) != tokmod.corpus_key(["a", "bc"], settings)
    assert tokmod.corpus_key(["a"], settings) != tokmod.corpus_key(["a"], {"kind": "unigram"})
    assert tokmod.corpus_key(["a", "b"], settings) == tokmod.corpus_key(("a", "b"), settings)


def test_no_cache_writes_nothing(_cache: Path):
    train_tokenizer(corpus(), vocab_size=300, use_cache=False)
    assert not (_cache / "tokenizers").exists()


def test_a_damaged_cache_entry_is_trained_again(monkeypatch: pytest.MonkeyPatch, _cache: Path):
    texts = corpus()
    good = train_tokenizer(texts, vocab_size=300)
    (path,) = (_cache / "tokenizers").glob("*.json")
    path.write_text("{ not json", encoding="utf-8")
    calls = _count_training(monkeypatch)
    again = train_tokenizer(texts, vocab_size=300)
    assert calls == ["bpe"]
    assert again.to_str() == good.to_str()
    assert Tokenizer.load(path).to_str() == good.to_str()  # and the entry is repaired


# -- save / load ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["bpe", "unigram"])
def test_save_load_and_str_round_trip(request: pytest.FixtureRequest, tmp_path: Path,
                                      fixture: str):
    tok: Tokenizer = request.getfixturevalue(fixture)
    path = tmp_path / "deep" / "er" / "tokenizer.json"
    tok.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))  # plain JSON
    loaded = Tokenizer.load(path)
    from_str = Tokenizer.from_str(tok.to_str())
    for other in (loaded, from_str):
        if fixture == "bpe":
            assert other.to_str() == tok.to_str()
        # Unigram scores may print differently after a trip; after one trip it is stable.
        assert Tokenizer.from_str(other.to_str()).to_str() == other.to_str()
        assert other.backend.get_vocab() == tok.backend.get_vocab()
        assert other.vocab_size == tok.vocab_size
        for text in HELD_OUT:
            assert other.encode(text) == tok.encode(text)
            assert other.decode(other.encode(text)) == nfkc(text)


def test_load_missing_file(tmp_path: Path):
    with pytest.raises(NormzooError, match="not found") as info:
        Tokenizer.load(tmp_path / "missing.json")
    assert "missing.json" in str(info.value)


@pytest.mark.parametrize("content", ["{ not json", "", '{"version": "1.0"}', "[1, 2, 3]"])
def test_load_corrupt_file(tmp_path: Path, content: str):
    path = tmp_path / "tokenizer.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(NormzooError, match="cannot read tokenizer") as info:
        Tokenizer.load(path)
    assert str(path) in str(info.value)


def test_load_a_tokenizer_with_other_special_ids(tmp_path: Path):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    backend = HFTokenizer(models.BPE(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.train_from_iterator(
        ["a b c"] * 5, trainer=trainers.BpeTrainer(special_tokens=["[UNK]", "[PAD]"],
                                                   show_progress=False))
    path = tmp_path / "other.json"
    backend.save(str(path))
    with pytest.raises(NormzooError, match=r"<pad> \(id 0\) is missing; <s> \(id 1\) is missing"):
        Tokenizer.load(path)
    with pytest.raises(NormzooError, match="does not have normzoo's special tokens"):
        Tokenizer.from_str(backend.to_str())
