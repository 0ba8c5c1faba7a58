"""The sentence-classification task's self-contained parts: the built-in labelled corpus, the
file and hub layouts, the classifier head and the metrics."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict

import pytest
import torch

from normzoo.classification.corpus import LABELS, SPLITS, builtin_examples
from normzoo.classification.layout import hub_examples, label_set, parse_lines
from normzoo.classification.metrics import ClassificationMetrics, classification_scores
from normzoo.classification.model import POOLINGS, ClassifierHead
from normzoo.data.builtin import generate
from normzoo.data.sources import DataError

# --------------------------------------------------------------------------------------------
# The built-in corpus.


@pytest.fixture(scope="module")
def splits() -> dict[str, tuple[list[str], list[str]]]:
    return {split: builtin_examples(split) for split in SPLITS}


def test_corpus_is_deterministic_and_a_prefix_under_limits(splits):
    texts, labels = splits["valid"]
    assert builtin_examples("valid") == (texts, labels)
    assert builtin_examples("valid", limit=37) == (texts[:37], labels[:37])
    assert builtin_examples("test", limit=0) == ([], [])
    assert len(splits["train"][0]) == SPLITS["train"] == 20000


def test_corpus_is_the_same_in_another_process_and_needs_no_torch(splits):
    code = ("import sys; from normzoo.classification.corpus import builtin_examples as b;"
            "import normzoo.classification.layout;"
            "assert 'torch' not in sys.modules and 'lightning' not in sys.modules;"
            "t, l = b('test', 50); print(repr((t, l)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    texts, labels = splits["test"]
    assert eval(out) == (texts[:50], labels[:50])


def test_corpus_texts_are_the_toy_corpus_english(splits):
    for split in ("valid", "test"):
        assert splits[split][0] == [source for source, _ in generate(split)]
    assert splits["train"][0][:300] == [source for source, _ in generate("train", 300)]


def test_corpus_splits_are_disjoint_and_unique(splits):
    sets = {split: set(texts) for split, (texts, _) in splits.items()}
    for split, (texts, _) in splits.items():
        assert len(sets[split]) == len(texts)
    assert not sets["train"] & sets["test"]
    assert not sets["train"] & sets["valid"]
    assert not sets["valid"] & sets["test"]


def test_corpus_labels_are_balanced_and_present_in_every_split(splits):
    for split, (_, labels) in splits.items():
        counts = Counter(labels)
        assert set(counts) == set(LABELS), split
        shares = {label: n / len(labels) for label, n in counts.items()}
        assert all(0.10 <= share <= 0.45 for share in shares.values()), (split, shares)
    train = Counter(splits["train"][1])
    assert train.most_common()[-1][1] / train.most_common()[0][1] > 0.35


def test_corpus_label_is_not_a_single_position_word(splits):
    """For each of the first eight positions, predicting the label from that position's word
    alone (the best possible rule: the majority label per word) is far from perfect."""
    texts, labels = splits["train"]
    for position in range(8):
        by_word: dict[str, Counter] = defaultdict(Counter)
        for text, label in zip(texts, labels, strict=True):
            words = text.split()
            by_word[words[position] if position < len(words) else ""][label] += 1
        best = sum(c.most_common(1)[0][1] for c in by_word.values()) / len(labels)
        assert best < 0.8, (position, best)
        if position == 0:
            assert best < 0.55


def test_corpus_label_reads_the_first_clause():
    """Hand-checked examples: number from the subject or agreement, tense from the verb."""
    checked = Counter()
    for text, label in zip(*builtin_examples("valid"), strict=True):
        words = [w.strip(".,").lower() for w in text.split()]
        if "and" in words or "but" in words:
            continue  # one clause only: its copula says both tense and number
        for copula, expected in (("was", "past-singular"), ("were", "past-plural"),
                                 ("is", "present-singular"), ("are", "present-plural")):
            if copula in words:
                assert label == expected, text
                checked[copula] += 1
    assert min(checked[c] for c in ("was", "were", "is", "are")) >= 5, checked


def test_corpus_unknown_split_names_the_splits():
    with pytest.raises(DataError, match=r"'dev'.*train, valid, test"):
        builtin_examples("dev")


# --------------------------------------------------------------------------------------------
# Layouts.


def test_parse_lines_splits_on_the_last_tab_and_drops_cr():
    texts, labels = parse_lines(["a good film\tpos\r", "tab\tinside\tneg", "x\t 3 "], "f.tsv")
    assert texts == ["a good film", "tab\tinside", "x"]
    assert labels == ["pos", "neg", "3"]


@pytest.mark.parametrize(("line", "problem"), [
    ("no tab here", "no tab"), ("\tpos", "empty text"), ("   \tpos", "empty text"),
    ("text\t", "empty label"), ("text\t \r", "empty label"),
])
def test_parse_lines_errors_name_file_and_line(line, problem):
    with pytest.raises(DataError, match=rf"data/train\.tsv, line 3 .*{problem}"):
        parse_lines(["ok\t1", "fine\t0", line], "data/train.tsv")


def test_parse_lines_error_shortens_a_long_line():
    with pytest.raises(DataError) as error:
        parse_lines(["word " * 200], "f.tsv")
    assert "line 1" in str(error.value) and len(str(error.value)) < 200


def test_hub_class_labels_become_names():
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    rows = datasets.Dataset.from_dict({"sentence": ["bad", "good", "fine"], "label": [0, 1, 1]},
                                      features=features)
    assert hub_examples(rows, "sentence", "label") == (["bad", "good", "fine"],
                                                       ["negative", "positive", "positive"])
    plain = datasets.Dataset.from_dict({"text": ["a", "b"], "stars": [5, 1]})
    assert hub_examples(plain, "text", "stars") == (["a", "b"], ["5", "1"])
    with pytest.raises(DataError, match=r"no label column 'labels'.*sentence, label"):
        hub_examples(rows, "sentence", "labels")
    unlabelled = datasets.Dataset.from_dict({"sentence": ["?"], "label": [-1]},
                                            features=features)
    with pytest.raises(DataError, match="-1"):
        hub_examples(unlabelled, "sentence", "label")


def test_label_set_sorts_numbers_numerically():
    assert label_set(["10", "9", "2", "9"]) == ["2", "9", "10"]
    assert label_set(["pos", "neg", "neutral", "neg"]) == ["neg", "neutral", "pos"]
    assert label_set(["1", "x", "10"]) == ["1", "10", "x"]
    assert label_set(["-1", "1", "0"]) == ["-1", "0", "1"]


# --------------------------------------------------------------------------------------------
# The head.


def _head(pooling: str) -> ClassifierHead:
    torch.manual_seed(0)
    return ClassifierHead(8, 3, pooling=pooling, dropout=0.1).eval()


def test_head_shapes_and_bert_init():
    head = ClassifierHead(16, 4).requires_grad_(False)
    assert head(torch.randn(2, 5, 16), torch.zeros(2, 5, dtype=torch.bool)).shape == (2, 4)
    assert float(head.dense.bias.abs().sum()) == 0 and float(head.out.bias.abs().sum()) == 0
    assert 0.01 < float(head.dense.weight.std()) < 0.03
    with pytest.raises(ValueError, match="first, mean"):
        ClassifierHead(16, 4, pooling="max")
    assert POOLINGS == ("first", "mean")


def test_mean_pooling_ignores_padding_exactly():
    head = _head("mean")
    hidden = torch.randn(2, 5, 8)
    padding = torch.tensor([[False, False, False, True, True], [False] * 5])
    logits = head(hidden, padding)
    changed = hidden.clone()
    changed[0, 3:] = torch.tensor(float("inf"))
    assert torch.equal(head(changed, padding), logits)
    alone = head(hidden[:1, :3], torch.zeros(1, 3, dtype=torch.bool))
    assert torch.allclose(alone, logits[:1], atol=1e-6)
    assert torch.allclose(head.pool(hidden, padding)[0], hidden[0, :3].mean(0), atol=1e-6)


def test_first_pooling_reads_position_zero():
    head = _head("first")
    hidden = torch.randn(1, 4, 8)
    padding = torch.zeros(1, 4, dtype=torch.bool)
    logits = head(hidden, padding)
    later = hidden.clone()
    later[0, 1:] += 5.0
    assert torch.equal(head(later, padding), logits)
    first = hidden.clone()
    first[0, 0] += 5.0
    assert not torch.allclose(head(first, padding), logits)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_all_padding_row_is_finite(pooling):
    head = _head(pooling)
    padding = torch.tensor([[True] * 4, [False, False, True, True]])
    assert torch.isfinite(head(torch.randn(2, 4, 8), padding)).all()


# --------------------------------------------------------------------------------------------
# Metrics.

# By hand: class 0 P=1/2 R=1/2 F1=1/2; class 1 P=1 R=1/2 F1=2/3; class 2 P=2/3 R=1 F1=4/5.
_PREDS, _TARGET = torch.tensor([0, 0, 1, 2, 2, 2]), torch.tensor([0, 1, 1, 2, 2, 0])
_MACRO = (1 / 2 + 2 / 3 + 4 / 5) / 3


def test_scores_match_hand_computed_values():
    scores = classification_scores(_PREDS, _TARGET, 3)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["macro_f1"] == pytest.approx(_MACRO)
    logits = torch.nn.functional.one_hot(_PREDS, 3).float()
    assert classification_scores(logits, _TARGET, 3) == scores
    # A fourth class absent from predictions and targets does not drag the average down.
    assert classification_scores(_PREDS, _TARGET, 4)["macro_f1"] == pytest.approx(_MACRO)


def test_metric_module_accumulates_batches_and_resets():
    metrics = ClassificationMetrics(3)
    logits = torch.nn.functional.one_hot(_PREDS, 3).float() * 3.0
    metrics.update(logits[:2], _TARGET[:2])
    metrics.update(logits[2:], _TARGET[2:])
    scores = metrics.compute()
    assert float(scores["accuracy"]) == pytest.approx(4 / 6)
    assert float(scores["macro_f1"]) == pytest.approx(_MACRO)
    metrics.reset()
    metrics.update(logits[:1], _TARGET[:1])
    assert float(metrics.compute()["accuracy"]) == 1.0
