"""The pairs study (issue 37): the audit's pure functions on hand-made batches, the batches the
trainer draws, the report builder on synthetic records, and the example on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dclr_lab import pairs as study
from dclr_lab.pairs_report import build_report


def _rows(premises: list[str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(premise=p, explicit=f"{p} e", implied=f"{p} i") for p in premises]


def test_pairs_from_rows_groups_entailments_of_one_premise():
    pairs = study.pairs_from_rows(_rows(["A b", "C d", "a  B"]))  # "a  B" = "A b" normalised
    assert pairs.anchors == ["A b", "A b", "C d", "C d", "a  B", "a  B"]
    assert pairs.positives[:2] == ["A b e", "A b i"]
    assert pairs.group.tolist() == [0, 0, 1, 1, 0, 0]


def test_known_false_negatives_are_other_rows_of_the_same_premise():
    known = study.known_false_negatives(np.array([0, 1, 0, 2]))
    expected = np.zeros((4, 4), dtype=bool)
    expected[0, 2] = expected[2, 0] = True
    assert (known == expected).all()


def test_rule_drops_by_hand():
    # anchors x positives; g_ii on the diagonal
    cos = np.array([[0.80, 0.85, 0.30],
                    [0.90, 0.60, 0.55],
                    [0.10, 0.95, 0.50]])  # fmt: skip
    fixed = study.rule_drops(cos, "fixed", 0.9)  # >= 0.9, off the diagonal
    assert fixed.tolist() == [[False, False, False], [True, False, False], [False, True, False]]
    absolute = study.rule_drops(cos, "pair_absolute", 0.1)  # > g_ii - 0.1
    assert absolute.tolist() == [[False, True, False], [True, False, True], [False, True, False]]
    relative = study.rule_drops(cos, "pair_relative", 0.1)  # > 0.9 g_ii: 0.72, 0.54, 0.45
    assert relative.tolist() == [[False, True, False], [True, False, True], [False, True, False]]
    relative = study.rule_drops(cos, "pair_relative", 0.5)  # > 0.5 g_ii: 0.40, 0.30, 0.25
    assert relative.tolist() == [[False, True, False], [True, False, True], [False, True, False]]
    assert not study.rule_drops(cos, "none", 0.0).any()
    gist0 = study.rule_drops(cos, "pair_absolute", 0.0)  # strict >, as GIST
    assert gist0.tolist() == [[False, True, False], [True, False, False], [False, True, False]]


def test_precision_recall_and_audit_on_a_hand_made_batch():
    # 4 pairs; rows 0 and 2 share a premise, so (0, 2) and (2, 0) are the known false negatives
    pairs = study.Pairs(["p", "q", "p", "r"], ["p1", "q1", "p2", "r1"], np.array([0, 1, 0, 2]))
    a = np.eye(4, dtype=np.float32)
    positives = np.eye(4, dtype=np.float32)
    positives[2] = [0.95, 0, np.sqrt(1 - 0.95**2), 0]  # cos(anchor 0, positive 2) = 0.95
    positives[1] = [0, 0.5, 0, np.sqrt(0.75)]  # cos(anchor 3, positive 1) = 0.87; g_11 = 0.5
    result = study.audit_batches([[0, 1, 2, 3]], pairs, a, positives,
                                 {"fixed 0.9": ("fixed", 0.9), "fixed 0.8": ("fixed", 0.8),
                                  "none": ("none", 0.0)})  # fmt: skip
    assert result["negatives"] == 12 and result["known_false_negatives"] == 2
    assert result["false_negative_rate"] == pytest.approx(2 / 12)
    assert result["batches_with_false_negatives"] == 1
    high = result["rules"]["fixed 0.9"]  # drops (0, 2) only: precise, half the known ones
    assert (high["dropped"], high["true_positives"], high["precision"], high["recall"]) == (1, 1, 1.0, 0.5)  # fmt: skip
    low = result["rules"]["fixed 0.8"]  # also (3, 1), an unrelated pair
    assert (low["dropped"], low["true_positives"], low["precision"], low["recall"]) == (2, 1, 0.5, 0.5)  # fmt: skip
    none = result["rules"]["none"]
    assert none["dropped"] == 0 and none["precision"] is None and none["recall"] == 0.0
    assert "gist_blocks" not in high and result["same_anchor_pairs"] == 2
    # GIST's default blocks: the anchors are orthogonal (nothing over g_ii > 0 there); among the
    # positives p2 . p0 = 0.95 > g_22 = 0.31 and p1 . p3 = 0.87 > g_11 = 0.5
    gist = study.audit_batches([[0, 1, 2, 3]], pairs, a, positives,
                               {"gist 0": ("pair_absolute", 0.0)})["rules"]["gist 0"]  # fmt: skip
    assert gist["gist_blocks"] == {"anchor_positive": gist["dropped"], "anchor_anchor": 0,
                                   "positive_positive": 2, "same_anchor_dropped": 0}  # fmt: skip


def test_gist_block_drops_by_hand():
    """GIST's anchor-anchor / positive-positive mask: row i's cut is its own anchor-positive
    cosine g_ii minus the margin (absolute) or |g_ii| * margin (relative); strict `>`; never the
    diagonal."""
    block = np.array([[1.00, 0.75, 0.20],
                      [0.75, 1.00, 0.50],
                      [0.20, 0.50, 1.00]])  # fmt: skip
    g = np.array([0.8, 0.5, 0.65])
    # cuts 0.7, 0.4, 0.55
    absolute = study.gist_block_drops(block, g, "pair_absolute", 0.1)
    assert absolute.tolist() == [[False, True, False], [True, False, True], [False, False, False]]
    # cuts 0.8 - 0.4 = 0.4, 0.5 - 0.25 = 0.25, 0.65 - 0.325 = 0.325
    relative = study.gist_block_drops(block, g, "pair_relative", 0.5)
    assert relative.tolist() == [[False, True, False], [True, False, True], [False, True, False]]
    # identical texts (cosine 1) are dropped whenever g_ii < 1 + margin: at margin 0, always
    same = study.gist_block_drops(np.ones((2, 2)), np.array([0.6, 0.99]), "pair_absolute", 0.0)
    assert same.tolist() == [[False, True], [True, False]]
    with pytest.raises(ValueError, match="pair rules"):
        study.gist_block_drops(block, g, "fixed", 0.9)
    assert study.precision_recall(np.zeros(3, bool), np.zeros(3, bool))["recall"] is None


def _synthetic_records(out: Path) -> None:
    rng = np.random.default_rng(0)
    setup = {"model": "m", "steps": 10, "batch_size": 8, "lr": 3e-5, "max_seq_length": 64,
             "pooling": "mean (no head)", "temperature": 0.05, "corpus": "INLI train"}  # fmt: skip
    base = {t: 70.0 for t in study.STS_TASKS}
    study.write_record(out / "records" / "start.json", {
        "kind": "start", "setup": setup, "sts": {**base, "avg": 70.0},
        "inli": {"ndcg@10": 50.0}, "stsb_dev": 80.0})  # fmt: skip
    shift = {v: k * 0.5 for k, v in enumerate(study.VARIANTS)}
    shift["dclr"] = 3.0  # a clear gain: its interval must exclude 0
    for variant, (label, family, sampler) in study.VARIANTS.items():
        for seed in study.SEEDS:
            noise = 0.0 if variant in ("mnrl", "dclr") else 0.3 * rng.standard_normal()
            sts = {t: 70.0 + shift[variant] + noise + (seed - 42) for t in study.STS_TASKS}
            sts["avg"] = float(np.mean(list(sts.values())))
            options = {"margin": 0.1} if variant in ("gist_tuned", "gist_tuned_plain") else {}
            record = {"kind": "run", "variant": variant, "label": label, "seed": seed,
                      "family": family, "batch_sampler": sampler, "options": options,
                      "setup": setup, "sts": sts, "inli": {"ndcg@10": 50.0 + (seed - 42)}}  # fmt: skip
            if family == "dclr":
                record["dclr_parts"] = {"dropped_fraction": 0.001}
            study.write_record(study.run_record_path(out, variant, seed), record)
    for margin, dev in ((0.0, 80.0), (0.1, 80.5), (0.2, 80.5), (0.4, 80.6)):
        study.write_record(study.tuning_record_path(out, "gist", margin),
                           {"kind": "tuning", "family": "gist", "margin": margin, "seed": 42,
                            "stsb_dev": dev})  # fmt: skip
    rules = {"GIST absolute, margin 0": {"rule": "pair_absolute", "value": 0.0, "dropped": 5,
                                         "known": 4, "true_positives": 2, "precision": 0.4,
                                         "recall": 0.5, "dropped_share": 0.001}}  # fmt: skip
    block = {"batches": 30, "negatives": 1680, "known_false_negatives": 4,
             "false_negative_rate": 4 / 1680, "batches_with_false_negatives": 2, "rules": rules}  # fmt: skip
    study.write_record(out / "records" / "audit.json", {
        "kind": "audit", "pairs": 16000, "calibration": {"phi": 0.6, "sentences": 4000,
                                                         "target": 0.001},
        "guide_cos_positive": {"q10": 0.4, "q50": 0.6, "q90": 0.8},
        "trained_batches": {"default": block, "no_duplicates": {**block, "known_false_negatives": 0}},
        "epoch": {"default": block}})  # fmt: skip


def test_report_builds_from_synthetic_records(tmp_path):
    _synthetic_records(tmp_path)
    md = build_report(tmp_path)
    text = md.read_text()
    assert (tmp_path / "pairs.png").stat().st_size > 1000
    assert "![paired differences against MNRL](pairs.png)" in text
    # the seed offsets cancel in paired differences: dclr is +3 - 0 over MNRL, beyond the noise
    dclr_row = next(line for line in text.splitlines() if line.startswith("| DCLRLoss, φ = 0.9 |"))
    assert "| 3 |" in dclr_row and "**+3.00 [+3.00, +3.00]**" in dclr_row
    assert "DCLRLoss, φ = 0.9 is above MNRL on the 7-task STS avg" in text
    assert "GISTEmbedLoss, margin 0.1 (tuned)" in text
    # the ablations: their own table, paired with their main variant and with MNRL
    assert "| GISTEmbedLoss, margin 0 (default), no extra contrasts | 3 |" in text
    assert "| GISTEmbedLoss, margin 0.1 (tuned), no extra contrasts | 3 |" in text
    assert "| DCLRLoss, φ = 0.9, no noise negatives | 3 |" in text
    assert "Multiple comparisons:" in text and "Bonferroni" in text
    assert "| GISTEmbedLoss absolute | 0.1 | 80.50 ← chosen |" in text  # tie: the smaller margin
    # the wide grid's best (0.4) is shown, not used: the runs choose on GIST_CHOICE_MARGINS
    assert "| GISTEmbedLoss absolute | 0.4 | 80.60 ← best of the wide grid (not used" in text
    assert "still has no interior optimum" in text and "toward the untrained starting" in text
    assert "| starting model | — | 70.00 |" in text
    assert "precision" in text and "40.0" in text  # the audit's precision, in %
    assert study.tuned_margin(tmp_path, "gist") == 0.4
    assert study.tuned_margin(tmp_path, "gist", study.GIST_CHOICE_MARGINS) == 0.1
    assert study.tuned_margin(tmp_path, "relative") is None


def test_report_without_runs_says_so(tmp_path):
    md = build_report(tmp_path)
    assert "no runs yet" in md.read_text() and not (tmp_path / "pairs.png").exists()


def _tiny_data(tmp_path: Path, data_dir: Path) -> Path:
    from inli_data import write_inli_dir

    root = write_inli_dir(tmp_path / "data", n_train=16, n_eval=6)
    (root / "senteval").symlink_to(data_dir / "senteval")
    # one premise twice: rows 0 and 16 share a premise
    return root


def hand_samplers_seed_zero(monkeypatch) -> None:
    """The trainer as sentence-transformers before 6.2 builds a single dataset's batch sampler:
    with `seed=0`, not the trainer's seed."""
    from sentence_transformers import SentenceTransformerTrainer

    original = SentenceTransformerTrainer.get_batch_sampler

    def seed_zero(self, *args, **kwargs):
        kwargs["seed"] = 0
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "get_batch_sampler", seed_zero)


@pytest.mark.slow
@pytest.mark.parametrize("handed", ["trainer seed", "seed 0 (before 6.2)"])
def test_trainer_draws_the_planned_batches_and_runs_write_records(
    tmp_path, data_dir, monkeypatch, handed
):
    pytest.importorskip("datasets")
    from helpers import make_tiny_model_dir
    from sentence_transformers.base.sampler import DefaultBatchSampler, NoDuplicatesBatchSampler

    if handed != "trainer seed":
        hand_samplers_seed_zero(monkeypatch)
    root = _tiny_data(tmp_path, data_dir)
    model = make_tiny_model_dir(tmp_path / "tiny")
    seen: list[list[int]] = []
    for cls in (DefaultBatchSampler, NoDuplicatesBatchSampler):
        original = cls.__iter__

        def spy(self, original=original):
            for batch in original(self):
                seen.append([int(i) for i in batch])
                yield batch

        monkeypatch.setattr(cls, "__iter__", spy)
    setup = study.Setup(model=str(model), data_dir=str(root), steps=2, batch_size=8,
                        sts_tasks=("STSBenchmark",))  # fmt: skip
    out = tmp_path / "out"
    pairs = study.training_pairs(str(root))
    assert len(pairs) == 32
    study.sweep("audit", setup, out, [42], list(study.VARIANTS), lock=str(tmp_path / "lock"))
    audit = json.loads((out / "records" / "audit.json").read_text())
    assert audit["trained_batches"]["no_duplicates"]["known_false_negatives"] == 0
    assert (out / "records" / "samplers.json").is_file()
    planned = {s: study.planned_batches(pairs, 8, 2, 42, s) for s in ("default", "no_duplicates")}
    seen.clear()
    study.sweep("run", setup, out, [42], ["mnrl", "gist", "dclr", "mnrl_nodup"],
                lock=str(tmp_path / "lock"))  # fmt: skip
    # each run draws its 2 batches (plus the sampler's look-ahead); the first two are the plan
    runs = [seen[i : i + 2] for i in range(0, len(seen), len(seen) // 4)]
    assert runs[0] == runs[1] == runs[2] == planned["default"]
    assert runs[3] == planned["no_duplicates"]
    record = json.loads(study.run_record_path(out, "dclr", 42).read_text())
    assert set(record["sts"]) >= {"STSBenchmark", "avg"} and "ndcg@10" in record["inli"]
    assert record["options"] == {"false_negative_threshold": 0.9}
    assert "dropped_fraction" in record["dclr_parts"]
    gist = json.loads(study.run_record_path(out, "gist", 42).read_text())
    assert gist["options"] == {"margin_strategy": "absolute", "margin": 0.0}
    # a second sweep skips every run whose record exists
    before = study.run_record_path(out, "mnrl", 42).stat().st_mtime_ns
    study.sweep("run", setup, out, [42], ["mnrl"], lock=None)
    assert study.run_record_path(out, "mnrl", 42).stat().st_mtime_ns == before


@pytest.mark.slow
def test_pairs_example_prints_the_comparison(tmp_path, data_dir, capfd):
    pytest.importorskip("datasets")
    from helpers import load_example, make_tiny_model_dir

    example = load_example("st_pairs_false_negatives")
    root = _tiny_data(tmp_path, data_dir)
    model = make_tiny_model_dir(tmp_path / "tiny")
    code = example.main(["--model", str(model), "--data-dir", str(root), "--steps", "2",
                         "--batch-size", "8", "--eval-tasks", "STSBenchmark"])  # fmt: skip
    assert code == 0
    printed = capfd.readouterr().out
    for row in ("| starting model |", "| MNRL |", "| GISTEmbedLoss, margin 0 (default) |",
                "| DCLRLoss, φ = 0.9 |"):  # fmt: skip
        assert row in printed
    assert "INLI nDCG@10" in printed


def test_no_duplicates_batches_defer_repeats_of_the_default_permutation():
    pytest.importorskip("datasets")
    pairs = study.pairs_from_rows(_rows([f"premise {k}" for k in range(12)]))  # 24 pairs
    default = study.planned_batches(pairs, 4, 6, 42, "default")
    nodup = study.planned_batches(pairs, 4, 6, 42, "no_duplicates")
    assert len(default) == len(nodup) == 6
    for batch in nodup:  # never the same premise twice
        assert len({pairs.anchors[i] for i in batch}) == len(batch)
    assert default == study.planned_batches(pairs, 4, 6, 42, "default")  # seeded
    overlap = study.sampler_overlap(pairs, 4, 6, [42, 43])
    for seed in ("42", "43"):
        info = overlap["seeds"][seed]
        held = [sorted(a) == sorted(b) for a, b in zip(
            study.planned_batches(pairs, 4, 6, int(seed)),
            study.planned_batches(pairs, 4, 6, int(seed), "no_duplicates"), strict=True)]  # fmt: skip
        assert info["same_batches"] == sum(held)
        assert info["first_different"] == (held.index(False) if False in held else None)


def test_dense_pair_batches_hold_the_density_of_premise_pairs():
    """A share rho of every batch is premise pairs (two rows of one premise: known false
    negatives of each other), every row once per epoch, seeded by (seed, epoch)."""
    groups = np.repeat(np.arange(400), 2)  # 400 premises, two entailments each
    batches = study.dense_pair_batches(groups, 16, 0.25, seed=1)
    rows = [r for b in batches for r in b]
    assert len(batches) == 50 and sorted(rows) == list(range(800))
    counts = []
    for batch in batches:  # 2 premise pairs of 16 rows; random rows add a few more, rarely
        known = study.known_false_negatives(groups[np.asarray(batch)])
        assert known.sum() >= 4 and len(batch) == 16
        counts.append(int(known.sum()))
    assert np.median(counts) == 4  # round(0.25 * 16 / 2) = 2 pairs, not 4 (a share of 0.5)
    assert study.dense_pair_batches(groups, 16, 0.25, seed=1) == batches
    assert study.dense_pair_batches(groups, 16, 0.25, seed=1, epoch=1) != batches
    sparse = study.dense_pair_batches(groups, 16, 0.0, seed=1)
    assert sorted(r for b in sparse for r in b) == list(range(800))
    assert sum(study.known_false_negatives(groups[np.asarray(b)]).sum() for b in sparse) < 20
    with pytest.raises(ValueError, match="density"):
        study.dense_pair_batches(groups, 16, 1.5, seed=1)


def test_dense_sampler_draws_the_planned_batches():
    pytest.importorskip("datasets")
    from datasets import Dataset

    pairs = study.pairs_from_rows(_rows([f"premise {i}" for i in range(40)]))
    data = Dataset.from_dict({"anchor": pairs.anchors, "positive": pairs.positives})
    sampler = study.dense_batch_sampler(0.5)(data, batch_size=8, drop_last=False, seed=7)
    assert len(sampler) == 10
    planned = study.planned_batches(pairs, 8, 20, 7, density=0.5)
    assert list(sampler) == planned[:10]
    sampler.set_epoch(1)
    assert list(sampler) == planned[10:]


@pytest.mark.slow
@pytest.mark.parametrize("handed", ["trainer seed", "seed 0 (before 6.2)"])
def test_a_dense_ablation_run_trains_on_the_dense_batches(tmp_path, data_dir, monkeypatch, handed):
    """--density swaps the trainer's default sampler for dense_pair_batches (the batches the
    audit plans), and an ablation's record holds its main variant's options with its changes."""
    pytest.importorskip("datasets")
    from helpers import make_tiny_model_dir

    if handed != "trainer seed":
        hand_samplers_seed_zero(monkeypatch)
    root = _tiny_data(tmp_path, data_dir)
    model = make_tiny_model_dir(tmp_path / "tiny")
    seen: list[list[list[int]]] = []
    original = study.dense_pair_batches

    def spy(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(study, "dense_pair_batches", spy)
    setup = study.Setup(model=str(model), data_dir=str(root), steps=2, batch_size=8,
                        sts_tasks=("STSBenchmark",), retrieval=False, density=0.5)  # fmt: skip
    out = tmp_path / "out"
    study.sweep("run", setup, out, [42], ["gist_plain"], lock=None)
    record = json.loads(study.run_record_path(out, "gist_plain", 42).read_text())
    assert record["setup"]["density"] == 0.5
    assert record["options"] == {"margin_strategy": "absolute", "margin": 0.0,
                                 "contrast_anchors": False, "contrast_positives": False}  # fmt: skip
    trained = seen[0][:2]
    monkeypatch.setattr(study, "dense_pair_batches", original)
    assert trained == study.planned_batches(study.training_pairs(str(root)), 8, 2, 42, density=0.5)
