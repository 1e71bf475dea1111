"""NLI data readers (SentEval layout, SimCSE CSV) and the supervised losses."""

import math
from pathlib import Path

import pytest
import torch

from dclr.data.nli import NliPair, NliTriple, nli_triples, read_senteval_nli, read_simcse_csv
from dclr.errors import InputError
from dclr.losses.infonce import info_nce
from dclr.losses.simcse import simcse_loss
from dclr.losses.supervised import (
    NLIHead,
    joint_loss,
    nli_classification_loss,
    pair_features,
    supervised_simcse_loss,
)


def write_senteval(folder: Path, split: str, s1, s2, labels) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in (("s1", s1), ("s2", s2), ("labels", labels)):
        (folder / f"{name}.{split}").write_text("".join(f"{x}\n" for x in lines))
    return folder


PREMISES = ["A dog runs .", "A dog runs .", "A dog runs .", "Two men talk .", "Two men talk ."]
HYPOTHESES = ["An animal moves .", "A cat sleeps .", "It is hungry .", "People talk .", "Noone."]
LABELS = ["entailment", "contradiction", "neutral", "entailment", "neutral"]


def test_senteval_layout_reads_aligned_pairs(tmp_path):
    folder = write_senteval(tmp_path / "SNLI", "train", PREMISES, HYPOTHESES, LABELS)
    pairs = read_senteval_nli(folder, "train")
    assert [p.label_name for p in pairs] == LABELS
    assert pairs[1] == NliPair("A dog runs .", "A cat sleeps .", 2, line=2)


def test_triples_take_entailment_as_positive_and_contradiction_as_hard_negative(tmp_path):
    folder = write_senteval(tmp_path / "SNLI", "train", PREMISES, HYPOTHESES, LABELS)
    triples = nli_triples(read_senteval_nli(folder, "train"))
    # "Two men talk ." has no contradiction: skipped
    assert triples == [NliTriple("A dog runs .", "An animal moves .", "A cat sleeps .")]


def test_nli_files_whose_lines_do_not_line_up_are_an_error(tmp_path):
    folder = write_senteval(tmp_path / "SNLI", "dev", PREMISES, HYPOTHESES[:-1], LABELS)
    with pytest.raises(InputError, match="do not line up.*s2.dev has 4 lines"):
        read_senteval_nli(folder, "dev")


def test_unknown_label_and_missing_file_name_the_place(tmp_path):
    bad = [*LABELS[:3], "maybe", LABELS[4]]
    folder = write_senteval(tmp_path / "SNLI", "dev", PREMISES, HYPOTHESES, bad)
    with pytest.raises(InputError, match=r"labels.dev:4: unknown label 'maybe'"):
        read_senteval_nli(folder, "dev")
    with pytest.raises(InputError, match="missing NLI file"):
        read_senteval_nli(folder, "train")


def test_shipped_snli_dev_reads(data_dir):
    pairs = read_senteval_nli(data_dir / "senteval" / "SNLI", "dev")
    assert len(pairs) == 9842
    assert {p.label_name for p in pairs} == {"entailment", "neutral", "contradiction"}
    assert len(nli_triples(pairs)) > 3000


def test_simcse_csv_reads_triples_and_pairs(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text('sent0,sent1,hard_neg\n"A man, tall",A person,A woman\nx,y,z\n')
    assert read_simcse_csv(path) == [
        NliTriple("A man, tall", "A person", "A woman"),
        NliTriple("x", "y", "z"),
    ]
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sent0,sent1\na,b\n")
    assert read_simcse_csv(pairs) == [NliTriple("a", "b", None)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("premise,hypothesis\na,b\n", ":1: unexpected header"),
        ("sent0,sent1,hard_neg\na,b,c\nd,e\n", ":3: 2 fields, the header has 3"),
        ("sent0,sent1,hard_neg\na,,c\n", ":2: empty sent1"),
        ("", "empty"),
        ("sent0,sent1,hard_neg\n", "no examples"),
    ],
)
def test_bad_simcse_csv_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "nli.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_simcse_csv(path)


# ---- losses -------------------------------------------------------------------------------------
def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def hand_supervised(h, pos, neg, tau):
    total = 0.0
    for i, a in enumerate(h):
        terms = [math.exp(cos(a, p) / tau) for p in pos] + [math.exp(cos(a, q) / tau) for q in neg]
        total += -math.log(math.exp(cos(a, pos[i]) / tau) / sum(terms))
    return total / len(h)


H = [[1.0, 0.0, 0.5], [0.2, 1.0, -0.3], [-1.0, 0.4, 0.1]]
P = [[0.9, 0.1, 0.4], [0.0, 1.0, 0.0], [-0.5, -0.5, 1.0]]
N = [[0.5, 0.5, 0.5], [1.0, -1.0, 0.0], [0.0, 0.3, -0.8]]


def test_supervised_simcse_equals_hand_formula():
    got = supervised_simcse_loss(torch.tensor(H), torch.tensor(P), torch.tensor(N), 0.05)
    assert got.item() == pytest.approx(hand_supervised(H, P, N, 0.05), rel=1e-5)
    same = info_nce(torch.tensor(H), [torch.tensor(P), torch.tensor(N)], 0.05)  # the one InfoNCE
    assert torch.equal(got, same)


def test_supervised_simcse_without_hard_negatives_is_simcse():
    h, p = torch.tensor(H), torch.tensor(P)
    assert torch.equal(supervised_simcse_loss(h, p, None, 0.05), simcse_loss(h, p, 0.05))


def test_nli_head_uses_u_v_and_their_absolute_difference():
    u, v = torch.tensor([[1.0, -2.0]]), torch.tensor([[3.0, 1.0]])
    assert pair_features(u, v).tolist() == [[1.0, -2.0, 3.0, 1.0, 2.0, 3.0]]
    head = NLIHead(hidden_size=2)
    with torch.no_grad():
        head.classifier.weight.zero_()
        head.classifier.bias.zero_()
        head.classifier.weight[0, 4] = 1.0  # entailment logit = |u - v|_0 = 2
    logits = head(u, v)
    assert logits.tolist() == [[2.0, 0.0, 0.0]]
    expected = -math.log(math.exp(2) / (math.exp(2) + 2))
    got = nli_classification_loss(head, u, v, torch.tensor([0]))
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert joint_loss(torch.tensor(1.0), torch.tensor(2.0), 0.5).item() == 2.0
