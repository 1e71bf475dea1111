"""STS evaluator: equal to an independent SentEval re-implementation, known answers on hand-built
data, geometry against hand-written formulas, and clear errors on malformed data."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from senteval_reference import senteval_sts

from dclr.data.sts import STS_SUBSETS, STS_TASKS
from dclr.errors import ConfigError, InputError
from dclr.evaluation.geometry import alignment, released_geometry, uniformity
from dclr.evaluation.sts import StsEvaluator

# Per task and avg, the evaluator must match SentEval to the second decimal SimCSE prints.
TASK_TOLERANCE = 0.01
# Per subset the two may differ a little more: identical sentence pairs (52 in STS12
# SMTeuroparl, 9 in surprise.SMTnews, all gold 5) have cosine 1 up to float rounding, and the
# rounding (float32 per batch in SentEval, float64 here) breaks those ties differently.
SUBSET_TOLERANCE = 0.1
STSB_LEADING_COLUMNS = ("main-captions", "MSRvid", "2012test", "0001")  # genre, file, year, id
SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"

Row = tuple[str, str, str]  # sentence1, sentence2, gold ("" = unscored)


# ------------------------------------------------------------------ against the SentEval reference


@pytest.fixture(scope="module")
def sts_test_evaluator(data_dir: Path) -> StsEvaluator:
    return StsEvaluator(data_dir, mode="test", geometry=False)


@pytest.mark.parametrize("pooler", ["mean", "cls_before_pooler", "avg_first_last"])
def test_matches_senteval_test_mode(tiny_encoder, sts_test_evaluator, data_dir, pooler):
    encoder = tiny_encoder(pooler)
    got = sts_test_evaluator(encoder.encode)
    want = senteval_sts(encoder.backbone, encoder.tokenizer, pooler, data_dir, mode="test")
    for task in (*STS_TASKS, "avg"):
        assert got[task] == pytest.approx(want[task], abs=TASK_TOLERANCE), task
    subsets = [f"{task}/{name}" for task, names in STS_SUBSETS.items() for name in names]
    for key in subsets:
        assert got[key] == pytest.approx(want[key], abs=SUBSET_TOLERANCE), key


def test_matches_senteval_dev_mode(tiny_encoder, data_dir):
    encoder = tiny_encoder("mean")
    got = StsEvaluator(data_dir, mode="dev", geometry=False)(encoder.encode)
    want = senteval_sts(encoder.backbone, encoder.tokenizer, "mean", data_dir, mode="dev")
    assert set(want) == {"STSBenchmark", "SICKRelatedness", "avg"}
    for key, value in want.items():
        assert got[key] == pytest.approx(value, abs=TASK_TOLERANCE), key


# ------------------------------------------------------------------ fake SentEval folders


def write_sts_year(root: Path, task: str, subsets: dict[str, list[Row]]) -> Path:
    """STS.input / STS.gs files for every subset of `task`; returns the task folder."""
    folder = root / "senteval" / "STS" / f"{task}-en-test"
    folder.mkdir(parents=True, exist_ok=True)
    for name in STS_SUBSETS[task]:
        rows = subsets[name]
        (folder / f"STS.input.{name}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in rows))
        (folder / f"STS.gs.{name}.txt").write_text("".join(f"{g}\n" for _, _, g in rows))
    return folder


def write_stsb(root: Path, split: str, rows: list[Row]) -> None:
    folder = root / "senteval" / "STS" / "STSBenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join((*STSB_LEADING_COLUMNS, g, a, b)) for a, b, g in rows]
    lines[0] += "\tsource-a\tsource-b"  # some real rows carry extra trailing columns
    (folder / f"sts-{split}.csv").write_text("".join(line + "\n" for line in lines))


def write_sick(root: Path, split: str, rows: list[Row]) -> None:
    folder = root / "senteval" / "SICK"
    folder.mkdir(parents=True, exist_ok=True)
    name = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    body = "".join(f"{i}\t{a}\t{b}\t{g}\tNEUTRAL\n" for i, (a, b, g) in enumerate(rows, start=1))
    (folder / name[split]).write_text(SICK_HEADER + body)


class StubEncoder:
    """Maps each sentence to a fixed 2-d vector and records every sentence it is asked for."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors
        self.calls: list[list[str]] = []

    def __call__(self, sentences: list[str]) -> np.ndarray:
        self.calls.append(list(sentences))
        return np.array([self.vectors[s] for s in sentences], dtype=np.float32)

    @property
    def seen(self) -> Counter[str]:
        return Counter(s for call in self.calls for s in call)


ANCHOR = "the anchor sentence"  # sentence 1 of every pair, vector (1, 0)
Placed = list[tuple[float, float]]  # (cosine with ANCHOR, gold score) for each pair of a group


def at_cosine(c: float) -> list[float]:
    """The unit vector whose cosine with ANCHOR's (1, 0) is c."""
    return [c, math.sqrt(1.0 - c * c)]


def pairs_at(group: str, placed: Placed) -> list[Row]:
    """Rows (ANCHOR, "<group> <i>", gold): sentence 2 of pair i is named after its group."""
    return [(ANCHOR, f"{group} {i}", str(g)) for i, (_, g) in enumerate(placed)]


def stub_for(groups: dict[str, Placed]) -> StubEncoder:
    vectors = {ANCHOR: [1.0, 0.0]}
    for group, placed in groups.items():
        vectors.update({f"{group} {i}": at_cosine(c) for i, (c, _) in enumerate(placed)})
    return StubEncoder(vectors)


def monotone(golds: list[float]) -> Placed:
    """Cosine = gold / 5: similarity strictly increasing in the gold score."""
    return [(g / 5.0, g) for g in golds]


def write_sts13(root: Path, groups: dict[str, Placed]) -> Path:
    """STS13 with one group per subset (FNWN, headlines, OnWN)."""
    return write_sts_year(
        root, "STS13", {name: pairs_at(name, groups[name]) for name in STS_SUBSETS["STS13"]}
    )


# ------------------------------------------------------------------ known answers


def test_monotone_similarities_score_100(tmp_path):
    groups = {
        "FNWN": monotone([0.0, 1.5, 4.0]),
        "headlines": monotone([0.5, 2.0, 3.0, 5.0]),
        "OnWN": monotone([1.0, 4.5]),
        "stsb": monotone([0.2, 2.6, 3.8]),
        "sick": monotone([1.0, 3.3, 4.9]),
    }
    write_sts13(tmp_path, groups)
    write_stsb(tmp_path, "test", pairs_at("stsb", groups["stsb"]))
    write_sick(tmp_path, "test", pairs_at("sick", groups["sick"]))
    tasks = ["STS13", "STSBenchmark", "SICKRelatedness"]
    results = StsEvaluator(tmp_path, tasks=tasks, geometry=False)(stub_for(groups))
    for key in ("STS13/FNWN", "STS13/headlines", "STS13/OnWN", *tasks, "avg"):
        assert results[key] == pytest.approx(100.0), key


def test_all_setting_is_one_spearman_over_the_concatenation(tmp_path):
    # Each subset is perfectly ordered, but the subsets sit at different similarity levels:
    # gold ranks 1..6 against similarity ranks 5 6 | 1 2 | 3 4, so d = -4 -4 2 2 2 2,
    # sum d^2 = 48 and Spearman = 1 - 6 * 48 / (6 * (36 - 1)) = -78/210.
    groups = {
        "FNWN": [(0.5, 0.0), (0.6, 1.0)],
        "headlines": [(0.1, 2.0), (0.2, 3.0)],
        "OnWN": [(0.3, 4.0), (0.4, 5.0)],
    }
    write_sts13(tmp_path, groups)
    results = StsEvaluator(tmp_path, tasks=["STS13"], geometry=False)(stub_for(groups))
    per_subset = [results[f"STS13/{name}"] for name in STS_SUBSETS["STS13"]]
    assert per_subset == pytest.approx([100.0, 100.0, 100.0])
    assert results["STS13"] == pytest.approx(-78 / 210 * 100)
    assert results["STS13"] != pytest.approx(np.mean(per_subset))


def test_unscored_pairs_are_skipped(tmp_path):
    groups = {name: monotone([1.0, 2.0, 3.0]) for name in STS_SUBSETS["STS13"]}
    folder = write_sts13(tmp_path, groups)
    # A blank gold line between scored pairs. Its sentences have no stub vector, so encoding
    # them would raise KeyError; had the pair been kept, the scores would read 1, ?, 2, 3.
    source, gold = folder / "STS.input.FNWN.txt", folder / "STS.gs.FNWN.txt"
    lines, golds = source.read_text().splitlines(), gold.read_text().splitlines()
    source.write_text("\n".join([lines[0], "unscored left\tunscored right", *lines[1:]]) + "\n")
    gold.write_text("\n".join([golds[0], "", *golds[1:]]) + "\n")
    evaluator = StsEvaluator(tmp_path, tasks=["STS13"], geometry=False)
    fnwn = evaluator.pairs["STS13"][0]
    assert fnwn.scores.tolist() == [1.0, 2.0, 3.0]
    assert fnwn.sentences2 == ["FNWN 0", "FNWN 1", "FNWN 2"]
    stub = stub_for(groups)
    assert evaluator(stub)["STS13/FNWN"] == pytest.approx(100.0)
    assert not {"unscored left", "unscored right"} & set(stub.seen)


def test_each_distinct_sentence_is_encoded_once(tmp_path):
    groups = {name: monotone([1.0, 2.0]) for name in STS_SUBSETS["STS13"]}
    groups["stsb"] = monotone([1.0, 4.5, 5.0])
    folder = write_sts13(tmp_path, groups)
    # SentEval's tokenisation round trip (split on whitespace, join with one space) makes this
    # pair ANCHOR / "FNWN 1" again.
    with (folder / "STS.input.FNWN.txt").open("a") as f:
        f.write(f"  {ANCHOR.replace(' ', '   ')} \tFNWN  1\n")
    with (folder / "STS.gs.FNWN.txt").open("a") as f:
        f.write("2.0\n")
    write_stsb(tmp_path, "test", pairs_at("stsb", groups["stsb"]))
    write_stsb(tmp_path, "dev", pairs_at("stsb", groups["stsb"]))  # read again for geometry
    stub = stub_for(groups)
    StsEvaluator(tmp_path, tasks=["STS13", "STSBenchmark"], geometry=True)(stub)
    assert len(stub.calls) == 1
    assert set(stub.seen) == set(stub.vectors)  # ANCHOR and every "<group> <i>"
    assert set(stub.seen.values()) == {1}


# ------------------------------------------------------------------ geometry


E1, E2 = [1.0, 0.0], [0.0, 1.0]
MINUS_E1 = [-1.0, 0.0]
# Three unit vectors e1, e2, -e1: squared distances 2 (e1, e2), 4 (e1, -e1), 2 (e2, -e1), so
# uniformity = log((e^-4 + e^-8 + e^-4) / 3) with t = 2.
THREE_POINT_UNIFORMITY = math.log((2 * math.exp(-4.0) + math.exp(-8.0)) / 3)


def test_alignment_is_mean_squared_distance_of_normalised_pairs():
    x = torch.tensor([[3.0, 0.0], [0.0, 2.0]])  # normalises to e1, e2
    y = torch.tensor([[0.0, 1.0], [0.0, 5.0]])  # normalises to e2, e2
    # ||e1 - e2||^2 = 2, ||e2 - e2||^2 = 0
    assert alignment(x, y) == pytest.approx(1.0)


def test_uniformity_on_three_hand_placed_vectors():
    assert uniformity(torch.tensor([E1, E2, MINUS_E1]) * 7.0) == pytest.approx(
        THREE_POINT_UNIFORMITY
    )
    with pytest.raises(ValueError, match="two"):
        uniformity(torch.tensor([E1]))


def test_evaluator_geometry_uses_stsb_dev_pairs_above_4(tmp_path):
    vectors = {"east": E1, "north": E2, "west": MINUS_E1}
    rows = [("east", "north", "4.5"), ("east", "west", "4.0"), ("north", "north", "5.0")]
    write_stsb(tmp_path, "dev", rows)
    results = StsEvaluator(tmp_path, mode="dev", tasks=["STSBenchmark"])(StubEncoder(vectors))
    # Positive pairs: gold > 4 only, so (east, north) = 2 and (north, north) = 0, mean 1;
    # the 4.0 pair (distance 4) would make it 2.
    assert results["alignment"] == pytest.approx(1.0)
    # Uniformity over the distinct dev sentences: east, north, west.
    assert results["uniformity"] == pytest.approx(THREE_POINT_UNIFORMITY)
    # Cosines 0, -1, 1 against gold 4.5, 4.0, 5.0: the same order.
    assert results["STSBenchmark"] == pytest.approx(100.0)


def test_released_geometry_averages_per_batch_values_over_the_splits():
    """DCLR's released estimator by hand: batches of 2 pairs, positives at gold >= 4, each
    batch's 2b vectors with duplicates kept, then the plain mean over the batches."""
    t = torch.tensor
    train = (t([E1, E2, E1]) * 3.0, t([E1, MINUS_E1, E2]), np.array([5.0, 4.0, 4.5]))
    dev = (t([E2]), t([E2]), np.array([4.0]))
    # batch 1: pairs (e1, e1) 0 and (e2, -e1) 2 -> 1; vectors e1, e2, e1, -e1: squared distances
    # 2, 0, 4, 2, 2, 4. batch 2: (e1, e2) 2; one pair at 2. dev: (e2, e2) 0; distance 0.
    first = math.log((3 * math.exp(-4.0) + 1 + 2 * math.exp(-8.0)) / 6)
    out = released_geometry([train, dev], batch=2)
    assert out["alignment"] == pytest.approx((1.0 + 2.0 + 0.0) / 3)
    assert out["uniformity"] == pytest.approx((first - 4.0 + 0.0) / 3)
    # a batch with no pair >= 4 has no alignment: NaN, as the released code's empty mean
    below = (t([E1]), t([E2]), np.array([3.9]))
    assert math.isnan(released_geometry([below])["alignment"])


def test_evaluator_reports_the_released_estimator_apart(tmp_path):
    vectors = {"east": E1, "north": E2, "west": MINUS_E1}
    write_stsb(tmp_path, "train", [("east", "west", "4.0"), ("north", "north", "5.0")])
    write_stsb(tmp_path, "dev", [("east", "north", "4.5")])
    results = StsEvaluator(tmp_path, mode="dev", tasks=["STSBenchmark"], released_geometry=True)(
        StubEncoder(vectors)
    )
    # one batch of train (both pairs >= 4: distances 4 and 0; vectors e1, e2, -e1, e2: squared
    # distances 2, 4, 2, 2, 0, 2), one of dev
    train_uniformity = math.log((4 * math.exp(-4.0) + math.exp(-8.0) + 1.0) / 6)
    assert results["alignment_released"] == pytest.approx((2.0 + 2.0) / 2)
    assert results["uniformity_released"] == pytest.approx((train_uniformity - 4.0) / 2)
    assert results["alignment"] == pytest.approx(2.0)  # ours: dev pairs > 4 only
    assert "alignment_released" not in StsEvaluator(tmp_path, mode="dev", tasks=["STSBenchmark"])(
        StubEncoder(vectors)
    )


def test_senteval_text_is_what_the_encoder_sees(tmp_path):
    """text="senteval": STS-B (and the geometry's STS-B dev) reach the encoder Moses-tokenised
    and lower-cased; SICK as written."""
    pytest.importorskip("sacremoses")
    write_stsb(tmp_path, "dev", [("East's", "North.", "4.5"), ("East's", "West!", "1.0")])
    write_sick(tmp_path, "dev", [("East's", "North.", "4.5"), ("East's", "West!", "1.0")])
    vectors = {"east 's": E1, "north .": E2, "west !": MINUS_E1}
    vectors.update({"East's": E1, "North.": E2, "West!": MINUS_E1})
    stub = StubEncoder(vectors)
    results = StsEvaluator(tmp_path, mode="dev", text="senteval")(stub)
    assert set(stub.seen) == {"east 's", "north .", "west !", "East's", "North.", "West!"}
    assert results["STSBenchmark"] == pytest.approx(100.0)
    with pytest.raises(ConfigError, match="raw or senteval"):
        StsEvaluator(tmp_path, mode="dev", text="lower")  # type: ignore[arg-type]


# ------------------------------------------------------------------ malformed input


@pytest.fixture
def sts13(tmp_path: Path) -> Path:
    """A valid STS13 folder with three scored pairs per subset; returns the folder."""
    rows = [("a b", "c d", "1.0"), ("e f", "g h", "2.0"), ("i j", "k l", "3.0")]
    return write_sts_year(tmp_path, "STS13", {name: rows for name in STS_SUBSETS["STS13"]})


def load_sts13(folder: Path) -> StsEvaluator:
    return StsEvaluator(folder.parents[2], tasks=["STS13"], geometry=False)


def assert_names(err: InputError, path: Path, line: int) -> None:
    text = str(err)
    assert f"{path}:{line}" in text
    assert "fix" in text


def test_line_count_mismatch_is_an_error(sts13):
    gold = sts13 / "STS.gs.headlines.txt"
    gold.write_text("1.0\n2.0\n")
    with pytest.raises(InputError) as err:
        load_sts13(sts13)
    assert_names(err.value, gold, 3)
    assert "2 gold lines for 3 sentence pairs" in str(err.value)


def test_non_numeric_score_is_an_error(sts13):
    gold = sts13 / "STS.gs.OnWN.txt"
    gold.write_text("1.0\nfour\n3.0\n")
    with pytest.raises(InputError, match="'four' is not a number") as err:
        load_sts13(sts13)
    assert_names(err.value, gold, 2)


@pytest.mark.parametrize("score", ["nan", "inf", "-Infinity"])
def test_non_finite_score_is_an_error(sts13, score):
    """float() parses these, so only the finiteness check stops a NaN from reaching Spearman."""
    gold = sts13 / "STS.gs.OnWN.txt"
    gold.write_text(f"1.0\n2.0\n{score}\n")
    with pytest.raises(InputError, match=f"{score!r} is not finite") as err:
        load_sts13(sts13)
    assert_names(err.value, gold, 3)
    assert "replace it with a finite number" in str(err.value)


def test_non_utf8_bytes_are_an_error(sts13):
    source = sts13 / "STS.input.FNWN.txt"
    source.write_bytes(b"a b\tc d\ne f\tg h\ncaf\xe9 latin-1\tk l\n")
    with pytest.raises(InputError, match="not valid UTF-8") as err:
        load_sts13(sts13)
    assert_names(err.value, source, 3)


def test_three_fields_on_an_input_line_is_an_error(sts13):
    source = sts13 / "STS.input.FNWN.txt"
    source.write_text("a b\tc d\ne f\tg h\textra\ni j\tk l\n")
    with pytest.raises(InputError, match="found 3 fields") as err:
        load_sts13(sts13)
    assert_names(err.value, source, 2)


@pytest.mark.parametrize("source", ["argument", "environment", "default cache"])
def test_missing_data_folder_says_how_to_get_it(tmp_path, monkeypatch, source):
    missing = tmp_path / "nowhere"
    monkeypatch.delenv("DCLR_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(missing))  # the default cache lives under it
    if source == "environment":
        monkeypatch.setenv("DCLR_DATA_DIR", str(missing))
    with pytest.raises(InputError, match="no evaluation data found") as err:
        StsEvaluator(missing if source == "argument" else None, geometry=False)
    assert "dclr data download" in str(err.value)
    assert str(missing) in str(err.value)
