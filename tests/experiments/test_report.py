"""The report builder on fixture run folders: expected tables (worked out by hand), plots, HTML."""

import json
from pathlib import Path

import pytest
from experiment_runs import write_run

from dclr_lab.registry import Registry
from dclr_lab.report import build_report
from dclr_lab.stats import Stat

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _table(markdown: str, first_header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header starts with `first_header`."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _cells(**labels: object) -> dict:
    return {"scale": "cpu", "backbone": "minilm", **labels}


def _index(root: Path) -> Registry:
    registry = Registry(root)
    registry.rebuild()
    return registry


def test_paired_difference_and_interval() -> None:
    from dclr_lab.stats import Paired

    # seeds 42, 43, 44: diffs 1, 2, 3 -> mean 2, sd 1, t(0.975, 2) = 4.303, half 4.303 / sqrt 3
    p = Paired.of({42: 10.0, 43: 10.0, 44: 10.0, 45: 9.0}, {42: 11.0, 43: 12.0, 44: 13.0})
    assert (p.n, p.mean, p.std) == (3, 2.0, 1.0)
    assert p.high - p.mean == pytest.approx(4.3027 / 3**0.5, rel=1e-4)
    assert p.fmt() == "+2.00 [-0.48, +4.48]" and not p.beyond_noise
    assert Paired.of({1: 0.0, 2: 0.0}, {1: 1.0, 2: 1.1}).beyond_noise
    drop = Paired.of({1: 1.0, 2: 1.1}, {1: 0.0, 2: 0.0})  # the same gap, the other way
    assert drop.high < 0 and drop.beyond_noise  # a drop beyond the noise is beyond it too
    assert Paired.of({1: 0.0}, {2: 1.0}) is None  # no common seed


def test_stat_mean_and_sample_std() -> None:
    assert Stat.of([70.0, 72.0]).fmt() == "71.00 ± 1.41"  # sample std: sqrt(2)
    assert Stat.of([73.0]).fmt() == "73.00"
    assert Stat.of([]) is None


def test_main_report_table(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for name, method, seed, avg in [
        ("s1", "simcse", 42, 70.0),
        ("s2", "simcse", 43, 72.0),
        ("d1", "dclr", 42, 73.0),
        ("d2", "dclr", 43, 74.0),
        ("d3", "dclr", 44, None),  # incomplete: left out and counted
    ]:
        labels = {"main": [_cells(method=method)]}
        write_run(root, name, method=method, seed=seed, avg=avg, labels=labels)
    with _index(root) as registry:
        md_path = build_report("main", registry, tmp_path / "report", html_out=True)
    md = md_path.read_text()
    # STS12 = avg - 3, ..., SICK-R = avg + 3 (fixture); SimCSE seeds 70, 72; DCLR 73, 74
    assert _table(md, "backbone | method") == [
        ["minilm", "DCLR", "2", "70.50 ± 0.71", "71.50 ± 0.71", "72.50 ± 0.71", "73.50 ± 0.71",
         "74.50 ± 0.71", "75.50 ± 0.71", "76.50 ± 0.71", "73.50 ± 0.71"],
        ["minilm", "SimCSE", "2", "68.00 ± 1.41", "69.00 ± 1.41", "70.00 ± 1.41", "71.00 ± 1.41",
         "72.00 ± 1.41", "73.00 ± 1.41", "74.00 ± 1.41", "71.00 ± 1.41"],
    ]  # fmt: skip
    # MiniLM has no paper row: compared with BERT-base, 76.25 -> 77.22 (+0.97)
    assert _table(md, "backbone | SimCSE") == [
        # paired by seed: diffs 3 and 2 -> mean 2.5, sd 0.707, t(0.975, 1) = 12.706,
        # half-width 12.706 * 0.707 / sqrt(2) = 6.35
        ["minilm", "71.00 ± 1.41", "73.50 ± 0.71", "+2.50 [-3.85, +8.85]", "76.25 (BERT-base)",
         "77.22 (BERT-base)", "+0.97"],
    ]  # fmt: skip
    assert "1 incomplete run(s) left out" in md
    assert "seeds 42, 43" in md
    png = tmp_path / "report" / "main_delta.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    html = (tmp_path / "report" / "report.html").read_text()
    assert "data:image/png;base64," in html and "<img alt" in html
    assert "src='main_delta.png'" not in html  # self-contained


def test_ablation_report_table(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for variant, avg in [("full", 73.0), ("no_noise", 72.0), ("distill", 70.5)]:
        write_run(root, variant, avg=avg, labels={"ablation": [_cells(variant=variant)]})
    with _index(root) as registry:
        md = build_report("ablation", registry, tmp_path / "r").read_text()
    rows = {r[0]: r[1:] for r in _table(md, "variant")}
    # task_scores(avg): STS-B = avg + 2, SICK-R = avg + 3
    # one seed each: the paired difference has no interval and says so
    # last two columns: the paper's Table 6 value and its drop from 77.22
    assert rows["DCLR (full)"] == ["1", "73.00", "—", "75.00", "76.00", "77.22", "—"]
    assert rows["w/o noise-based negatives"] == ["1", "72.00", "-1.00 (1 seed)", "74.00", "75.00",
                                                 "76.17", "-1.05"]  # fmt: skip
    assert rows["knowledge distillation"] == ["1", "70.50", "-2.50 (1 seed)", "72.50", "73.50",
                                              "75.05", "-2.17"]  # fmt: skip
    assert rows["self instance weighting"] == ["0", "—", "—", "—", "—", "73.93", "-3.29"]
    assert "below full DCLR" in md
    assert (tmp_path / "r" / "ablation_delta.png").read_bytes()[:8] == PNG_MAGIC


def test_uniformity_report_reads_metric_curves(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    curves = {
        ("simcse", 42): [(10, -1.0), (20, -2.0)],
        ("simcse", 43): [(10, -2.0), (20, -3.0)],
        ("dclr", 42): [(10, -1.5), (20, -2.5)],
    }
    for (method, seed), curve in curves.items():
        run = write_run(root, f"{method}{seed}", method=method, seed=seed, uniformity=curve,
                        labels={"uniformity": [_cells(method=method)]})  # fmt: skip
        if method == "dclr":  # the starting model's value is the curve's step 0
            (run / "before.json").write_text(json.dumps({"uniformity": -0.25, "avg": 60.0}))
    with _index(root) as registry:
        md = build_report("uniformity", registry, tmp_path / "r").read_text()
    assert _table(md, "method") == [
        ["DCLR", "0", "-0.250"],
        ["DCLR", "10", "-1.500"],
        ["DCLR", "20", "-2.500"],
        ["SimCSE", "10", "-1.500 ± 0.707"],
        ["SimCSE", "20", "-2.500 ± 0.707"],
    ]
    assert (tmp_path / "r" / "uniformity.png").read_bytes()[:8] == PNG_MAGIC


def test_few_shot_and_sensitivity_reports(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for fraction, method, avg in [(1.0, "simcse", 70.0), (1.0, "dclr", 71.0),
                                  (0.003, "simcse", 60.0), (0.003, "dclr", 62.0)]:  # fmt: skip
        write_run(root, f"fs-{method}-{fraction}", method=method, avg=avg,
                  labels={"few-shot": [_cells(method=method, fraction=fraction)]})  # fmt: skip
    shared = [_cells(method="dclr", param="false_negative_threshold", value=0.9),
              _cells(method="dclr", param="noise_ratio", value=1.0)]  # fmt: skip
    write_run(root, "sens-default", avg=71.0, labels={"sensitivity": shared})
    write_run(root, "sens-k2", avg=69.0,
              labels={"sensitivity": [_cells(method="dclr", param="noise_ratio", value=2.0)]})  # fmt: skip
    with _index(root) as registry:
        few = build_report("few-shot", registry, tmp_path / "few").read_text()
        sens = build_report("sensitivity", registry, tmp_path / "sens").read_text()
    # columns: DCLR STS-B, DCLR SICK-R, SimCSE STS-B, SimCSE SICK-R (STS-B = avg+2, SICK-R = avg+3)
    assert _table(few, "fraction") == [
        ["100%", "73.00", "74.00", "72.00", "73.00", "+1.00 (1 seed)", "+1.00 (1 seed)"],
        ["0.3%", "64.00", "65.00", "62.00", "63.00", "+2.00 (1 seed)", "+2.00 (1 seed)"],
    ]
    assert ("0.3% vs 100% of the data (relative change of the mean): DCLR STS-B -12.3 %; "
            "DCLR SICK-R -12.2 %; SimCSE STS-B -13.9 %; SimCSE SICK-R -13.7 %.") in few  # fmt: skip
    assert _table(sens, "parameter") == [
        ["false_negative_threshold", "0.9", "1", "73.00", "74.00", "71.00"],
        ["noise_ratio", "1", "1", "73.00", "74.00", "71.00"],
        ["noise_ratio", "2", "1", "71.00", "72.00", "69.00"],
    ]
    for path in (tmp_path / "few" / "few_shot.png", tmp_path / "sens" / "sensitivity.png"):
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_report_without_runs_says_what_to_do(tmp_path: Path) -> None:
    from dclr.errors import ConfigError

    with Registry(tmp_path) as registry, pytest.raises(ConfigError, match="dclr experiment run"):
        build_report("main", registry, tmp_path / "r")


def test_augmentations_and_search_sections(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for view, method, avg, dev in [("dropout", "simcse", 70.0, 80.0),
                                   ("dropout", "dclr", 71.0, 81.5),
                                   ("token_shuffle", "simcse", 68.0, 78.0)]:  # fmt: skip
        write_run(root, f"{view}-{method}", method=method, avg=avg, dev=dev,
                  labels={"augmentations": [_cells(method=method, view=view)]})  # fmt: skip
    for trial, lr, avg in [(0, 1e-5, 69.0), (1, 3e-5, 72.0)]:
        labels = {
            "search:lr": [{"trial": trial, "params": {"learning_rate": lr}, "scale": "custom"}]
        }
        write_run(root, f"t{trial}", avg=avg, labels=labels, overrides={"learning_rate": lr})
    with _index(root) as registry:
        aug = build_report("augmentations", registry, tmp_path / "aug").read_text()
        search = build_report("search:lr", registry, tmp_path / "search").read_text()
    assert _table(aug, "view") == [
        ["dropout", "80.00", "70.00", "81.50", "71.00", "+1.50 (1 seed)"],
        ["token_shuffle", "78.00", "68.00", "—", "—", "—"],
    ]
    assert (tmp_path / "aug" / "augmentations.png").read_bytes()[:8] == PNG_MAGIC
    assert _table(search, "trial") == [
        ["1", "3e-05", "74.00", "75.00", "72.00"],
        ["0", "1e-05", "71.00", "72.00", "69.00"],
    ]


def test_report_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dclr_lab.cli import app_with_lab

    app = app_with_lab()

    root = tmp_path / "exp"
    write_run(root, "s", method="simcse", avg=70.0, labels={"main": [_cells(method="simcse")]})
    write_run(root, "d", method="dclr", avg=71.0, labels={"main": [_cells(method="dclr")]})
    with Registry(root) as registry:
        registry.rebuild()
    result = CliRunner().invoke(app, ["report", "main", "--root", str(root), "--html"])
    assert result.exit_code == 0, result.output
    assert "| minilm | 70.00 | 71.00 | +1.00 (1 seed) |" in result.stdout
    folder = root / "reports" / "main"
    assert sorted(p.name for p in folder.iterdir()) == [
        "main_delta.png",
        "report.html",
        "report.md",
    ]
    result = CliRunner().invoke(app, ["report", "ablation", "--root", str(root)])
    assert result.exit_code == 2 and "no complete run" in result.output


def test_dense_report_pairs_by_seed(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    # SimCSE / DCLR per seed at rho 0.5; DCLR logs a dropped fraction of 0.01
    for variant, method, seed, avg in [("simcse", "simcse", 42, 70.0), ("simcse", "simcse", 43, 71.0),
                                       ("simcse", "simcse", 44, 72.0), ("dclr", "dclr", 42, 71.0),
                                       ("dclr", "dclr", 43, 72.1), ("dclr", "dclr", 44, 72.9)]:  # fmt: skip
        run = write_run(root, f"{variant}{seed}", method=method, seed=seed, avg=avg,
                        labels={"dense": [_cells(method=method, variant=variant, density=0.5)]})  # fmt: skip
        if method == "dclr":
            (run / "metrics.jsonl").write_text(
                json.dumps({"step": 10, "kind": "train", "loss": 1.0, "dropped_fraction": 0.01})
                + "\n"
            )
    with _index(root) as registry:
        md = build_report("dense", registry, tmp_path / "r").read_text()
    rows = {r[1]: r for r in _table(md, "ρ | variant")}
    # diffs 1.0, 1.1, 0.9: mean 1.0, sd 0.1, half = 4.303 * 0.1 / sqrt(3) = 0.248
    assert rows["DCLR (paper form)"][6:8] == ["1.000", "+1.00 [+0.75, +1.25]"]
    assert rows["SimCSE"][7] == "—"
    assert "ρ = 0.5: DCLR (paper form) is above SimCSE on the 7-task avg" in md
    assert (tmp_path / "r" / "dense.png").read_bytes()[:8] == PNG_MAGIC


def test_dense_report_has_a_table_per_setting_and_deltas_vs_start(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    # every run starts from 60.0 (write_run's "before"); mean setting at rho 0.5
    cells = [("mean", "simcse", 42, 65.0), ("mean", "simcse", 43, 66.0),
             ("mean", "dclr", 42, 69.0), ("mean", "dclr", 43, 70.2),
             ("mean", "simcse_no_dup", 42, 65.0), ("mean", "simcse_no_dup", 43, 66.0),
             ("cls_head", "simcse", 42, 62.0), ("cls_head", "simcse", 43, 62.0)]  # fmt: skip
    for setting, variant, seed, avg in cells:
        method = "dclr" if variant.startswith("dclr") else "simcse"
        write_run(root, f"{setting}-{variant}{seed}", method=method, seed=seed, avg=avg,
                  labels={"dense": [_cells(method=method, variant=variant, density=0.5,
                                           setting=setting)]})  # fmt: skip
    with _index(root) as registry:
        md = build_report("dense", registry, tmp_path / "r").read_text()
    assert md.index("[CLS] + MLP head") < md.index("mean pooling, no head")
    mean_part = md[md.index("## mean pooling, no head") :]
    rows = {r[1]: r for r in _table(mean_part, "ρ | variant")}
    # DCLR - SimCSE: 4.0, 4.2 -> +4.10; vs start: 9.0, 10.2 -> +9.60
    assert rows["DCLR (paper form)"][7].startswith("+4.10 [")
    assert rows["DCLR (paper form)"][10].startswith("+9.60 [")
    assert rows["SimCSE, no duplicates in a batch"][7] == "+0.00 [+0.00, +0.00]"
    assert "DCLR (paper form) is above SimCSE, no duplicates in a batch" in mean_part
    assert (tmp_path / "r" / "dense.png").read_bytes()[:8] == PNG_MAGIC


def test_dup_corpus_report_pairs_by_corpus(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for corpus, variant, seed, avg in [("scraped", "simcse", 42, 70.0), ("scraped", "simcse", 43, 71.0),
                                       ("scraped", "simcse_no_dup", 42, 71.5),
                                       ("scraped", "simcse_no_dup", 43, 72.5)]:  # fmt: skip
        write_run(root, f"{corpus}-{variant}{seed}", method="simcse", seed=seed, avg=avg,
                  labels={"dup-corpus": [_cells(method="simcse", variant=variant, corpus=corpus,
                                                setting="mean")]})  # fmt: skip
    with _index(root) as registry:
        md = build_report("dup-corpus", registry, tmp_path / "r").read_text()
    rows = {r[1]: r for r in _table(md, "corpus | variant")}
    assert rows["SimCSE, no duplicates in a batch"][7] == "+1.50 [+1.50, +1.50]"
    assert rows["SimCSE"][10].startswith("+10.50 [")  # 10.0, 11.0 over the start's 60.0
    assert "scraped: SimCSE, no duplicates in a batch is above SimCSE" in md


def test_noise_mode_report_pairs_against_no_noise(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    for mode, seed, avg in [("none", 42, 70.0), ("none", 43, 71.0), ("random", 42, 70.5),
                            ("random", 43, 71.5), ("optimized", 42, 69.0),
                            ("optimized", 43, 69.5)]:  # fmt: skip
        write_run(root, f"noise-{mode}{seed}", method="dclr", seed=seed, avg=avg,
                  labels={"noise-mode": [_cells(method="dclr", setting="mean",
                                                noise_mode=mode)]})  # fmt: skip
    with _index(root) as registry:
        md = build_report("noise-mode", registry, tmp_path / "r").read_text()
    rows = {r[0]: r for r in _table(md, "noise | seeds")}
    assert list(rows) == ["optimized noise (t = 4 ascent steps)", "random noise (t = 0)",
                          "no noise negatives"]  # fmt: skip
    assert rows["random noise (t = 0)"][5] == "+0.50 [+0.50, +0.50]"
    assert rows["optimized noise (t = 4 ascent steps)"][5].startswith("-1.25 [")  # -1.0, -1.5
    assert rows["no noise negatives"][5] == "—"
    assert "Random noise (t = 0) is above no noise negatives" in md


def test_consert_tables_keep_view_order_and_sort_texts_as_numbers(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    # two seeds per row: avg = 70 + offset + (seed - 42) * 0.5
    for view, offset in [("token_shuffle", 2.0), ("none", 0.0), ("embedding_dropout", -1.0)]:
        for seed in (42, 43):
            write_run(root, f"v-{view}-{seed}", method="consert", seed=seed,
                      avg=70.0 + offset + (seed - 42) * 0.5,
                      labels={"consert-augmentations": [_cells(method="consert", view=view)]})  # fmt: skip
    for texts, avg in [(100, 71.0), (1, 69.0), (1000, 72.0), (10, 70.0)]:
        write_run(root, f"t-{texts}", method="consert", avg=avg,
                  labels={"consert-few-shot": [_cells(method="consert", texts=texts)]})  # fmt: skip
    with _index(root) as registry:
        aug = build_report("consert-augmentations", registry, tmp_path / "aug").read_text()
        few = build_report("consert-few-shot", registry, tmp_path / "few").read_text()
    # rows in CONSERT_VIEW_PAIRS order; paired deltas identical per seed -> zero-width interval
    rows = _table(aug, "view")
    assert [r[0] for r in rows] == ["none", "token_shuffle", "embedding_dropout",
                                    "starting model (untrained)"]  # fmt: skip
    assert [r[5] for r in rows] == ["70.25 ± 0.35", "72.25 ± 0.35", "69.25 ± 0.35", "60.00"]
    assert [r[6] for r in rows] == ["—", "+2.00 [+2.00, +2.00]", "-1.00 [-1.00, -1.00]", ""]
    # write_run starts every run at avg 60 with task offsets -3..+3: STS-B +2, SICK-R +3
    assert rows[3][3:5] == ["62.00", "63.00"]
    assert [r[0] for r in _table(few, "texts")] == ["1", "10", "100", "1000",
                                                    "starting model (untrained)"]  # fmt: skip
    assert "Yan et al., ACL 2021" in aug and "consert.txt" in aug and "Zhou et al." not in aug
    assert "l.89-91" in aug and "l.92" in few
    for path in (tmp_path / "aug" / "consert_views.png", tmp_path / "few" / "consert_few_shot.png"):
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_no_starting_row_when_runs_start_from_different_models(tmp_path: Path) -> None:
    from dclr_lab.stats import RunData
    from dclr_lab.studies.shared import shared_start

    same = [
        RunData({}, {}, tmp_path, 42, {"avg": 60.0}),
        RunData({}, {}, tmp_path, 43, {"avg": 60.0}),
    ]
    assert shared_start(same) == {"avg": 60.0}
    assert shared_start([*same, RunData({}, {}, tmp_path, 44, {"avg": 61.0})]) is None
    assert shared_start([*same, RunData({}, {}, tmp_path, 44)]) is None


def test_dualcse_report_pairs_by_seed_next_to_the_paper(tmp_path: Path) -> None:
    root = tmp_path / "exp"
    kinds = ("explicit", "implied", "neutral", "contradiction")
    for seed, shift in ((42, 0.0), (43, 2.0), (44, 1.0)):
        for method, acc in (("simcse-sup", (90.0, 60.0, 70.0, 80.0)),
                            ("dualcse-cross", (89.0, 66.0, 70.0, 80.0))):  # fmt: skip
            values = {k: a + shift + (1.0 if method == "dualcse-cross" and k == "neutral"
                                      and seed == 43 else 0.0) for k, a in zip(kinds, acc, strict=True)}  # fmt: skip
            values["avg"] = sum(values.values()) / 4
            write_run(root, f"{method}-{seed}", method={"simcse-sup": "simcse_sup"}.get(method, "dualcse"), seed=seed,
                      extra_results={"rte_test": values},
                      labels={"dualcse-inli": [_cells(method=method)]})  # fmt: skip
    with _index(root) as registry:
        md = build_report("dualcse-inli", registry, tmp_path / "d").read_text()
    rows = _table(md, "method")
    assert [r[0] for r in rows] == ["SimCSE-sup (INLI)", "DualCSE-cross", "Δ (paired)",
                                    "paper: SimCSE-sup (INLI)", "paper: DualCSE-cross", "paper: Δ"]  # fmt: skip
    assert rows[0][2:4] == ["91.00 ± 1.00", "61.00 ± 1.00"]
    # implied: +6 every seed; neutral: +0, +1, +0 -> mean 0.33, std 0.577, t(0.975, 2) = 4.303
    assert rows[2][3] == "+6.00 [+6.00, +6.00]"
    assert rows[2][4] == "+0.33 [-1.10, +1.77]"
    assert rows[3][2:] == ["90.60", "69.10", "66.90", "91.00", "79.40"]
    assert rows[5][2:] == ["-0.40", "+4.30", "+1.50", "-2.30", "+0.78"]
    assert "RTE accuracy × 100 on INLI test" in md and "INLI train" in md
    assert (
        "Types where our interval excludes 0 with the paper's sign: explicit, implied, avg." in md
    )
    assert (tmp_path / "d" / "dualcse_rte_delta.png").read_bytes()[:8] == PNG_MAGIC


def test_uniformity_report_prefers_the_released_estimator_when_logged(tmp_path: Path) -> None:
    """Runs trained with run.released_geometry log `uniformity_released`: the curve is drawn
    from it (the estimator of the paper's figure), and the heading says which one it is."""
    root = tmp_path / "exp"
    for method in ("simcse", "dclr"):
        run = write_run(root, method, method=method, seed=42, uniformity=[(10, -1.0)],
                        labels={"uniformity": [_cells(method=method)]})  # fmt: skip
        with (run / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": 10, "kind": "eval", "uniformity_released": -0.5}) + "\n")
    with _index(root) as registry:
        md = build_report("uniformity", registry, tmp_path / "r").read_text()
    assert "released estimator" in md
    assert _table(md, "method") == [["DCLR", "10", "-0.500"], ["SimCSE", "10", "-0.500"]]
    # one method without it: both are drawn from the whole-set values, never a mix
    other = tmp_path / "exp2"
    write_run(other, "simcse", method="simcse", seed=42, uniformity=[(10, -1.0)],
              labels={"uniformity": [_cells(method="simcse")]})  # fmt: skip
    run = write_run(other, "dclr", method="dclr", seed=42, uniformity=[(10, -1.0)],
                    labels={"uniformity": [_cells(method="dclr")]})  # fmt: skip
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 10, "kind": "eval", "uniformity_released": -0.5}) + "\n")
    with _index(other) as registry:
        mixed = build_report("uniformity", registry, tmp_path / "r2").read_text()
    assert "released estimator" not in mixed
    assert _table(mixed, "method") == [["DCLR", "10", "-1.000"], ["SimCSE", "10", "-1.000"]]
