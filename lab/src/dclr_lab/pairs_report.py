"""report.md and pairs.png of the pairs study (`dclr_lab.pairs`), from its records alone.

    python -m dclr_lab.pairs_report -o docs/results/cpu-scale/pairs

Reads `records/start.json`, `records/audit.json`, `records/tuning/*.json` and
`records/runs/*.json` (any may be missing: its section says so) and writes report.md and
pairs.png beside `records/`. Scores: Spearman x 100 (STS test) and nDCG@10 x 100 (INLI retrieval
test); mean ± sample std over seeds; Δ: paired by seed, mean [95 % t-interval]
(`dclr_lab.stats.Paired`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dclr.lab_api import write_text
from dclr_lab.pairs import (
    ABLATIONS,
    GIST_CHOICE_MARGINS,
    GIST_MARGINS,
    RELATIVE_MARGINS,
    RETRIEVAL_METRIC,
    SHORT,
    STS_TASKS,
    VARIANTS,
    runs_dir,
    tuned_margin,
    tuning_dir,
)
from dclr_lab.stats import Paired, Stat

BASELINES = ("mnrl", "gist")  # the paired comparisons of the main table
REPORT = "report.md"
NEGLIGIBLE = 0.05  # points: a difference this small is reported as no practical difference
PLOT = "pairs.png"


def load_records(out: Path) -> dict[str, Any]:
    """{'start', 'audit': dict | None, 'tuning': [records], 'runs': {variant: {seed: record}}}."""
    records = out / "records"

    def maybe(path: Path) -> dict[str, Any] | None:
        return json.loads(path.read_text()) if path.is_file() else None

    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(runs_dir(out).glob("*.json")) if runs_dir(out).is_dir() else []:
        record = json.loads(path.read_text())
        runs.setdefault(record["variant"], {})[int(record["seed"])] = record
    tuning = [json.loads(p.read_text()) for p in sorted(tuning_dir(out).glob("*.json"))] \
        if tuning_dir(out).is_dir() else []  # fmt: skip
    return {"start": maybe(records / "start.json"), "audit": maybe(records / "audit.json"),
            "samplers": maybe(records / "samplers.json"),
            "tuning": tuning, "runs": runs}  # fmt: skip


def score(record: dict[str, Any], key: str) -> float | None:
    """'avg' / an STS task name / 'inli' (nDCG@10)."""
    if key == "inli":
        value = record.get("inli", {}).get(RETRIEVAL_METRIC)
    else:
        value = record.get("sts", {}).get(key)
    return None if value is None else float(value)


def by_seed(runs: dict[int, dict[str, Any]], key: str) -> dict[int, float]:
    out = {}
    for seed, record in runs.items():
        value = score(record, key)
        if value is not None:
            out[seed] = value
    return out


def stat_of(runs: dict[int, dict[str, Any]], key: str) -> Stat | None:
    return Stat.of(by_seed(runs, key).values())


def delta(runs: dict[str, dict[int, dict[str, Any]]], base: str, variant: str,
          key: str) -> Paired | None:  # fmt: skip
    if base == variant or base not in runs or variant not in runs:
        return None
    return Paired.of(by_seed(runs[base], key), by_seed(runs[variant], key))


def _fmt(x: Stat | Paired | None, digits: int = 2) -> str:
    if x is None:
        return "—"
    text = x.fmt(digits)
    return f"**{text}**" if isinstance(x, Paired) and x.beyond_noise else text


def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f}"


def verdict(name: str, base: str, d: Paired | None, what: str) -> str | None:
    """One plain sentence: above / below / inside the noise, with the interval."""
    if d is None:
        return None
    if d.n < 2:
        return f"{name} vs {base} on {what}: {d.fmt()} (one seed: no interval)."
    where = ("above" if d.low > 0 else "below") if d.beyond_noise else "inside the noise of"
    small = ""
    if d.beyond_noise and abs(d.mean) < NEGLIGIBLE:
        small = f"; beyond the seed noise but under {NEGLIGIBLE:g} points: no practical difference"
    return f"{name} is {where} {base} on {what}: Δ {d.fmt()} ({d.n} seeds{small})."


def _setup_line(setup: dict[str, Any]) -> str:
    return (f"{setup['model']} (mean pooling, no head), {setup['steps']} steps of batch "
            f"{setup['batch_size']} (= {setup['steps'] * setup['batch_size']:,} pairs), lr "
            f"{setup['lr']:g}, max length {setup['max_seq_length']} tokens, τ = "
            f"{setup['temperature']:g} for every loss, {setup['corpus']}")  # fmt: skip


def main_table(data: dict[str, Any]) -> list[str]:
    runs = data["runs"]
    head = ["variant", "seeds", "STS avg", "STS-B", "SICK-R", "INLI nDCG@10", "dropped %",
            "Δ avg vs MNRL", "Δ avg vs GIST m=0", "Δ nDCG vs MNRL", "Δ nDCG vs GIST m=0"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    start = data["start"]
    if start:
        lines.append(
            f"| starting model | — | {score(start, 'avg'):.2f} | "
            f"{score(start, 'STSBenchmark'):.2f} | {score(start, 'SICKRelatedness'):.2f} | "
            + (f"{score(start, 'inli'):.2f}" if score(start, "inli") is not None else "—")
            + " | — | — | — | — | — |"
        )
    for variant, (label, _, _) in VARIANTS.items():
        if variant not in runs or variant in ABLATIONS:  # the ablations: their own table
            continue
        r = runs[variant]
        seeds = len(r)
        dropped = _dropped(r)
        cells = [_label(variant, label, r), str(seeds), _fmt(stat_of(r, "avg")),
                 _fmt(stat_of(r, "STSBenchmark")), _fmt(stat_of(r, "SICKRelatedness")),
                 _fmt(stat_of(r, "inli")), dropped,
                 _fmt(delta(runs, "mnrl", variant, "avg")), _fmt(delta(runs, "gist", variant, "avg")),
                 _fmt(delta(runs, "mnrl", variant, "inli")),
                 _fmt(delta(runs, "gist", variant, "inli"))]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _dropped(runs: dict[int, dict[str, Any]]) -> str:
    """DCLR's logged dropped share in %, mean over steps and seeds ('—' for other losses)."""
    drops = [rec.get("dclr_parts", {}).get("dropped_fraction") for rec in runs.values()]
    drops = [d for d in drops if d is not None]
    return f"{100 * sum(drops) / len(drops):.3f}" if drops else "—"


ABLATION_SUFFIX = {"gist": ", no extra contrasts", "dclr": ", no noise negatives"}


def _label(variant: str, label: str, runs: dict[int, dict[str, Any]]) -> str:
    options = next(iter(runs.values())).get("options", {})
    main = ABLATIONS[variant][0] if variant in ABLATIONS else variant
    suffix = ABLATION_SUFFIX[VARIANTS[variant][1]] if variant in ABLATIONS else ""
    if main == "gist_tuned":
        text = f"GISTEmbedLoss, margin {options.get('margin', float('nan')):g} (tuned)"
    elif main == "dclr_calibrated":
        phi = options.get("false_negative_threshold", float("nan"))
        text = f"DCLRLoss, calibrated φ = {phi:.3f}"
    elif main == "dclr_relative":
        margin = options.get("pair_margin", float("nan"))
        text = f"DCLRLoss, pair_relative margin {margin:g} (tuned)"
    else:
        text = VARIANTS[main][0] if variant in ABLATIONS else label
    return text + suffix


def task_table(data: dict[str, Any]) -> list[str]:
    runs = data["runs"]
    head = ["variant", *(SHORT.get(t, t) for t in STS_TASKS), "avg"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    if data["start"]:
        lines.append("| starting model | " + " | ".join(
            f"{score(data['start'], t):.2f}" for t in (*STS_TASKS, "avg")) + " |")  # fmt: skip
    for variant, (label, _, _) in VARIANTS.items():
        if variant in runs:
            cells = [_fmt(stat_of(runs[variant], t)) for t in (*STS_TASKS, "avg")]
            lines.append(f"| {_label(variant, label, runs[variant])} | " + " | ".join(cells) + " |")
    return lines


def delta_task_table(data: dict[str, Any], base: str) -> list[str]:
    runs = data["runs"]
    head = ["variant", *(SHORT.get(t, t) for t in STS_TASKS), "avg", "INLI nDCG@10"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for variant, (label, _, _) in VARIANTS.items():
        if variant in runs and variant != base:
            cells = [_fmt(delta(runs, base, variant, t)) for t in (*STS_TASKS, "avg", "inli")]
            lines.append(f"| {_label(variant, label, runs[variant])} | " + " | ".join(cells) + " |")
    return lines


def tuning_table(data: dict[str, Any], out: Path) -> list[str]:
    if not data["tuning"]:
        return ["No tuning records."]
    lines = ["| rule | margin | STS-B dev (seed 42) |", "|---|---:|---:|"]
    chosen = {"gist": tuned_margin(out, "gist", GIST_CHOICE_MARGINS),
              "relative": tuned_margin(out, "relative")}  # fmt: skip
    best = {family: tuned_margin(out, family) for family in ("gist", "relative")}
    for record in sorted(data["tuning"], key=lambda r: (r["family"], r["margin"])):
        name = ("GISTEmbedLoss absolute" if record["family"] == "gist"
                else "DCLRLoss pair_relative")  # fmt: skip
        mark = " ← chosen" if chosen[record["family"]] == record["margin"] else ""
        if best[record["family"]] == record["margin"] != chosen[record["family"]]:
            mark = " ← best of the wide grid (not used: see above)"
        lines.append(f"| {name} | {record['margin']:g} | {record['stsb_dev']:.2f}{mark} |")
    return lines


def tuning_curve(data: dict[str, Any], out: Path) -> list[str]:
    """Whether GIST's wide grid has an interior optimum, and which margin the runs use."""
    gist = sorted((r["margin"], r["stsb_dev"]) for r in data["tuning"] if r["family"] == "gist")
    if len(gist) <= len(GIST_CHOICE_MARGINS):
        return []
    best = tuned_margin(out, "gist")
    chosen = tuned_margin(out, "gist", GIST_CHOICE_MARGINS)
    start = (data["start"] or {}).get("stsb_dev")
    rising = all(b[1] >= a[1] for a, b in zip(gist, gist[1:], strict=False))
    if best != gist[-1][0]:
        return [f"On the wide grid the best margin is {best:g}, inside the grid."]
    start_text = f" ({start:.2f})" if start is not None else ""
    return [
        f"Widened to {gist[-1][0]:g} (issue 48), the grid still has no interior optimum: the dev "
        f"score {'rises with every step of' if rising else 'is highest at the end of'} the margin, "
        f"from {gist[0][1]:.2f} at 0 to {gist[-1][1]:.2f} at {gist[-1][0]:g}, toward the untrained "
        f"starting model's{start_text}. Every run of this study ends below the starting model, "
        "and a wider mask drops more negatives, so the model moves less: on this dev set "
        '"best" means "train least", and widening further would only approach the starting '
        f"model. The runs keep the margin chosen on 0–{max(GIST_CHOICE_MARGINS):g} "
        f"({chosen:g}, the issue-37 choice); a margin with an interior optimum needs the longer, "
        "denser runs of the separating experiment.",
    ]


def samplers_line(data: dict[str, Any]) -> list[str]:
    """How far NO_DUPLICATES's batches differ from the default sampler's."""
    info = data.get("samplers")
    if not info:
        return []
    per_seed = ", ".join(
        f"seed {seed}: {v['same_batches']} of {v['steps']}" for seed, v in info["seeds"].items()
    )
    return [
        "NO_DUPLICATES: sentence-transformers' `NoDuplicatesBatchSampler` walks the same seeded "
        "permutation as the default sampler and defers a row whose text the batch already holds, "
        "so its batches equal the default ones except around each deferred row. Batches holding "
        f"exactly the default batch's rows: {per_seed}. Where all of them match, MNRL and "
        "MNRL + NO_DUPLICATES are the same run.",
        "",
    ]


def audit_section(data: dict[str, Any]) -> list[str]:
    audit = data["audit"]
    if not audit:
        return ["No audit record."]
    cal = audit["calibration"]
    q = audit["guide_cos_positive"]
    lines = [
        f"Guide: the frozen starting model. Its anchor–positive cosine g_ii over the "
        f"{audit['pairs']:,} training pairs: 10 / 50 / 90 % quantiles {q['q10']:.3f} / "
        f"{q['q50']:.3f} / {q['q90']:.3f}. Calibrated φ (random pairs of "
        f"{cal['sentences']:,} training texts, q = {cal['target']:g}): {cal['phi']:.3f}.",
        "",
        "Negatives are the ordered (anchor i, positive j ≠ i) cells of every batch, the block "
        "MNRL, DCLRLoss and GIST's anchor–positive term share. A *known* false negative: positive "
        "j is an entailment of anchor i's own premise (the two rows share a premise). GIST's "
        "default also contrasts anchor–anchor and positive–positive; there a premise met twice is "
        "an identical text (guide cosine 1), which its mask always drops. Precision counts only "
        "the known pairs: a dropped positive of another premise that the anchor does entail "
        "counts as an error, so precision is a lower bound.",
        "",
        "| batches | negatives | known false negatives | FN rate % | batches holding one |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {"default": "the runs' batches (default sampler, all seeds)",
             "no_duplicates": "the NO_DUPLICATES runs' batches (all seeds)"}  # fmt: skip
    blocks = [(names[k], v) for k, v in audit["trained_batches"].items()]
    blocks += [("one full epoch, seed 42 (default sampler)", audit["epoch"]["default"])]
    for name, block in blocks:
        lines.append(f"| {name}: {block['batches']} | {block['negatives']:,} | "
                     f"{block['known_false_negatives']} | "
                     f"{_pct(block['false_negative_rate'], 4)} | "
                     f"{block['batches_with_false_negatives']} |")  # fmt: skip
    for name, block in blocks:
        if "NO_DUPLICATES" in name:
            continue
        lines += ["", f"What each rule drops, {name}:", "",
                  "| rule | dropped | dropped % of negatives | known FN dropped | precision % | "
                  "recall % |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for label, row in block["rules"].items():
            lines.append(f"| {label} | {row['dropped']:,} | {_pct(row['dropped_share'], 3)} | "
                         f"{row['true_positives']} / {row['known']} | {_pct(row['precision'])} | "
                         f"{_pct(row['recall'])} |")  # fmt: skip
    for name, block in blocks:
        if "NO_DUPLICATES" not in name:
            lines += gist_blocks_table(name, block)
    return lines


def gist_blocks_table(name: str, block: dict[str, Any]) -> list[str]:
    """Every block GISTEmbedLoss's default masks: anchor-positive (the block the table above
    counts), anchor-anchor and positive-positive, each of the same number of cells."""
    rows = [(label, row["gist_blocks"]) for label, row in block["rules"].items()
            if "gist_blocks" in row and label.startswith("GIST")]  # fmt: skip
    if not rows:
        return []
    n = block["negatives"]
    lines = ["", f"Every block GISTEmbedLoss's default masks, {name} (each block {n:,} cells; "
             "default = all three blocks, no extra contrasts = the anchor–positive block only; "
             f"identical anchors: {block.get('same_anchor_pairs', 0)} cells of the "
             "anchor–anchor block):", "",
             "| rule | anchor–positive | anchor–anchor | positive–positive | default: dropped % "
             "of its negatives | identical anchors dropped |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for label, b in rows:
        total = b["anchor_positive"] + b["anchor_anchor"] + b["positive_positive"]
        lines.append(f"| {label} | {b['anchor_positive']:,} | {b['anchor_anchor']:,} | "
                     f"{b['positive_positive']:,} | {_pct(total / (3 * n), 3)} | "
                     f"{b['same_anchor_dropped']} / {block.get('same_anchor_pairs', 0)} |")  # fmt: skip
    return lines


def statements(data: dict[str, Any]) -> list[str]:
    runs = data["runs"]
    out = []
    for base in BASELINES:
        base_label = VARIANTS[base][0]
        for variant, (label, _, _) in VARIANTS.items():
            if variant not in runs or variant == base or variant in ABLATIONS:
                continue
            name = _label(variant, label, runs[variant])
            for key, what in (("avg", "the 7-task STS avg"), ("inli", "INLI nDCG@10")):
                line = verdict(name, base_label, delta(runs, base, variant, key), what)
                if line:
                    out.append(f"- {line}")
    return out


def ablation_pairs(runs: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(ablation, base, key) of every interval the ablation table shows: against its own main
    variant and against MNRL, on the STS avg and INLI nDCG@10."""
    out = []
    for variant, (main, _) in ABLATIONS.items():
        if variant in runs:
            out += [(variant, base, key) for base in (main, "mnrl") for key in ("avg", "inli")]
    return out


def ablation_section(data: dict[str, Any]) -> list[str]:
    """What GIST's extra negatives and DCLR's noise negatives do: each ablation paired by seed
    with its main variant (same batches, same dropout stream) and with MNRL."""
    runs = data["runs"]
    present = [v for v in ABLATIONS if v in runs]
    if not present:
        return ["No ablation runs yet."]
    head = ["ablation", "seeds", "STS avg", "INLI nDCG@10", "dropped %", "its main variant",
            "Δ avg vs main", "Δ nDCG vs main", "Δ avg vs MNRL", "Δ nDCG vs MNRL"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * 4 + "---|" + "---:|" * 4]
    said = []
    for variant in present:
        main = ABLATIONS[variant][0]
        r = runs[variant]
        name = _label(variant, VARIANTS[variant][0], r)
        main_name = _label(main, VARIANTS[main][0], runs[main]) if main in runs else main
        main_cell = f"{main_name}: {_fmt(stat_of(runs[main], 'avg'))}" if main in runs else "—"
        cells = [name, str(len(r)), _fmt(stat_of(r, "avg")), _fmt(stat_of(r, "inli")),
                 _dropped(r), main_cell,
                 _fmt(delta(runs, main, variant, "avg")), _fmt(delta(runs, main, variant, "inli")),
                 _fmt(delta(runs, "mnrl", variant, "avg")),
                 _fmt(delta(runs, "mnrl", variant, "inli"))]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
        for base, base_name in ((main, main_name), ("mnrl", "MNRL")):
            line = verdict(name, base_name, delta(runs, base, variant, "avg"), "the 7-task STS avg")
            if line:
                said.append(f"- {line}")
    return [*lines, "", "In plain words (STS avg; INLI in the table):", "", *said]


def multiplicity(data: dict[str, Any]) -> list[str]:
    """How the many intervals are read: unadjusted, and which survive a Bonferroni correction
    over the main table's and the ablation table's intervals."""
    from scipy.stats import t

    runs = data["runs"]
    tests = [(v, base, key) for v in VARIANTS if v in runs and v not in ABLATIONS
             for base in BASELINES if base != v for key in ("avg", "inli")]  # fmt: skip
    tests += ablation_pairs(runs)
    shown = [(v, b, k, d) for v, b, k in tests for d in [delta(runs, b, v, k)]
             if d is not None and d.n > 1]  # fmt: skip
    if not shown:
        return []
    count = len(shown)
    survivors = []
    for variant, base, key, d in shown:
        half = float(t.ppf(1 - 0.025 / count, d.n - 1)) * d.std / d.n**0.5
        if abs(d.mean) > half:
            base_name = _label(base, VARIANTS[base][0], runs[base])
            what = "STS avg" if key == "avg" else "INLI nDCG@10"
            survivors.append(
                f"{_label(variant, VARIANTS[variant][0], runs[variant])} vs {base_name} on "
                f"{what} ({d.mean:+.2f} ± {half:.2f})"
            )
    beyond = sum(d.beyond_noise for *_, d in shown)
    n = min(d.n for *_, d in shown)
    widen = float(t.ppf(1 - 0.025 / count, n - 1) / t.ppf(0.975, n - 1))
    kept = "; ".join(survivors) if survivors else "none"
    return [
        f"Multiple comparisons: the main table and the ablation table show {count} paired "
        f"intervals (Δ columns, STS avg and INLI), each a 95 % interval for that comparison alone, "
        f"not adjusted for multiplicity; {beyond} of them exclude 0. Were no variant different, "
        f"about {count / 20:.1f} would exclude 0 by chance. With a Bonferroni correction over "
        f"all {count} (each interval at 1 − 0.05 / {count}, so the family is wrong with "
        f"probability ≤ 5 %) and {n} seeds, the intervals widen {widen:.1f}-fold; those still "
        f"excluding 0: {kept}. The per-task tables below are descriptive and not corrected.",
    ]


def resolve_design(data: dict[str, Any]) -> list[str]:
    """How small a difference the seeds here can resolve, from the paired spread measured."""
    from scipy.stats import t

    runs = data["runs"]
    out = []
    for key, what in (("avg", "STS avg"), ("inli", "INLI nDCG@10")):
        spreads = [d.std for v in VARIANTS if v != "mnrl"
                   for d in [delta(runs, "mnrl", v, key)] if d is not None and d.n > 1]  # fmt: skip
        if not spreads:
            continue
        s = max(spreads)
        widths = {n: float(t.ppf(0.975, n - 1)) * s / n**0.5 for n in (3, 5, 10)}
        out.append(
            f"{what}: the paired spread against MNRL (std of the per-seed difference) is at most "
            f"{s:.2f} points, so a 95 % interval is ± {widths[3]:.2f} with 3 seeds, "
            f"± {widths[5]:.2f} with 5 and ± {widths[10]:.2f} with 10."
        )
    return [" ".join(out)] if out else []


def cost(data: dict[str, Any]) -> list[str]:
    """The wall time the records report (one process at a time, under the heavy lock)."""
    runs = [r for v in data["runs"].values() for r in v.values()]
    parts = {
        "training runs": sum(r.get("train_seconds", 0) + r.get("eval_seconds", 0) for r in runs),
        "tuning": sum(
            r.get("train_seconds", 0) + r.get("eval_seconds", 0) for r in data["tuning"]
        ),  # fmt: skip
        "audit": (data["audit"] or {}).get("seconds", 0),
        "starting model": (data["start"] or {}).get("eval_seconds", 0),
    }
    total = sum(parts.values())
    if not total:
        return []
    listed = ", ".join(f"{k} {v / 60:.1f}" for k, v in parts.items())
    return [f"Cost on the 2-core VM, minutes of wall time (one process at a time): {listed}; "
            f"total {total / 60:.1f}.", ""]  # fmt: skip


def reproduce(data: dict[str, Any], setup: dict[str, Any] | None, seeds: list[int]) -> list[str]:
    """The commands that rebuild the records and this report (each skips what exists)."""
    steps = setup["steps"] if setup else "STEPS"
    flags = f"--data-dir ../shared/data --steps {steps}"
    if setup and setup["batch_size"] != 64:
        flags += f" --batch-size {setup['batch_size']}"
    if seeds and seeds != [42, 43, 44]:
        flags += f" --seeds {','.join(map(str, seeds))}"
    return [
        *cost(data),
        "```bash",
        "OUT=docs/results/cpu-scale/pairs",
        "for step in start audit tune run; do  # each run takes /tmp/dclr-heavy.lock by itself",
        f"  python -m dclr_lab.pairs $step -o $OUT {flags}",
        "done",
        "python -m dclr_lab.pairs_report -o $OUT   # report.md + pairs.png from records/",
        "```",
        "",
        "A record that exists is not run again (delete it to redo the run). The report reads "
        "only `records/`.",
    ]


def design(data: dict[str, Any]) -> list[str]:
    """Why this scale cannot separate the false-negative rules, and what would."""
    audit, runs = data["audit"], data["runs"]
    if not audit or not runs:
        return []
    trained, epoch = audit["trained_batches"]["default"], audit["epoch"]["default"]
    setup = next(r["setup"] for v in runs.values() for r in v.values())
    per_run = trained["known_false_negatives"] / max(trained["batches"] / setup["steps"], 1)
    gist0 = epoch["rules"].get("GIST absolute, margin 0", {})
    ratio = ""
    if gist0.get("precision"):
        ratio = (
            f", and its mask at margin 0 drops {1 / gist0['precision'] - 1:.0f} unlabelled "
            "pairs for every labelled false negative it drops (audit below)"
        )
    lines = [
        f"Why the false-negative rules can hardly differ here: the runs' {trained['batches']} "
        f"batches (all seeds) hold {trained['known_false_negatives']} known false negatives in "
        f"{trained['negatives']:,} negatives ({_pct(trained['false_negative_rate'], 4)} %), "
        f"about {per_run:.0f} per run of {setup['steps']} steps; a full epoch "
        f"({epoch['batches']} batches) holds {epoch['known_false_negatives']} (in "
        f"{epoch['batches_with_false_negatives']} batches). A rule that removes every one of "
        "them changes a handful of the softmax terms of a whole run. Differences between the "
        "GIST rows and the MNRL / DCLR rows then come from what else the losses do: "
        "GISTEmbedLoss's default also contrasts anchor–anchor and positive–positive (about "
        f"three times the negatives of MNRL and DCLRLoss){ratio}."
    ]
    lines += [
        "",
        "An experiment that would separate the rules: (1) false negatives dense enough to matter: "
        "batches in which a share ρ of the rows are premise pairs, two entailments of one premise "
        "(`--density ρ`, `dense_pair_batches`: the pairs version of dclr's paraphrase-dense "
        "sampler, where φ-weighting moved the STS avg by points, not hundredths); (2) at least one "
        "epoch (250 steps of 64) per run; (3) GIST with and without its extra contrasts and DCLR "
        "with and without noise negatives (the ablation below, at this study's scale); (4) 5 or "
        "more seeds, since the seed spread here is of the size of the differences. Its command "
        "and cost: docs/experiments.md (pairs study).",
    ]
    return lines


def plot(data: dict[str, Any], path: Path) -> Path | None:
    from dclr_lab.plots import _pyplot, _save

    runs = data["runs"]
    variants = [v for v in VARIANTS if v in runs and v != "mnrl"]
    if not variants or "mnrl" not in runs:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(variants) + 1.8), sharey=True)
    labels = [_label(v, VARIANTS[v][0], runs[v]) for v in variants]
    for ax, (key, title) in zip(axes, (("avg", "Δ 7-task STS avg vs MNRL"),
                                       ("inli", "Δ INLI nDCG@10 vs MNRL")), strict=True):  # fmt: skip
        deltas = [delta(runs, "mnrl", v, key) for v in variants]
        y = list(range(len(variants)))[::-1]
        means = [d.mean if d else 0.0 for d in deltas]
        low = [d.mean - d.low if d and d.n > 1 else 0.0 for d in deltas]
        high = [d.high - d.mean if d and d.n > 1 else 0.0 for d in deltas]
        colors = ["#2ca02c" if d and d.beyond_noise and d.low > 0 else
                  "#d62728" if d and d.beyond_noise else "#7f7f7f" for d in deltas]  # fmt: skip
        ax.barh(y, means, xerr=[low, high], capsize=3, color=colors, edgecolor="black",
                linewidth=0.5)  # fmt: skip
        ax.axvline(0, color="black", linewidth=0.7)
        ax.set_yticks(y, labels)
        ax.set_title(f"{title} (paired, 95 % t-interval)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def build_report(out: Path) -> Path:
    """Write out/report.md and out/pairs.png from out/records; returns the Markdown path."""
    out = Path(out)
    data = load_records(out)
    runs = data["runs"]
    setup = next((r["setup"] for v in runs.values() for r in v.values()), None)
    seeds = sorted({s for v in runs.values() for s in v})
    lines = [
        "# DCLRLoss, GISTEmbedLoss, MNRL and NO_DUPLICATES on (anchor, positive) pairs",
        "",
        "Issue 37. Every variant trains through sentence-transformers' `SentenceTransformerTrainer`"
        " from the same starting model; GIST and MNRL are sentence-transformers' own classes. "
        "Setting: "
        + (_setup_line(setup) if setup else "(no run records yet)")
        + ". Seeds: "
        + (", ".join(map(str, seeds)) or "none")
        + ". Same seed, same batches and dropout stream "
        "in every variant, except MNRL + NO_DUPLICATES, whose sampler changes the batches by "
        "design (it defers a row whose text the batch already holds; how many batches that "
        "changed: the audit section). Guide of GIST and DCLR: a frozen copy of the starting model. GIST and DCLR's "
        "relative margin were tuned on STS-B dev with seed 42 only (grid below), never on a test "
        "set. DCLRLoss keeps its defaults otherwise (paper form, optimized noise negatives, "
        "k = batch size), except in the no-noise ablations.",
        "",
        "Scores: Spearman × 100 on the STS test sets (dclr's SentEval-exact evaluation, mean "
        "pooling, max length of the backbone) and nDCG@10 × 100 on the built-in `inli` retrieval "
        "task (INLI test premises as queries, every test hypothesis as a passage, the explicit "
        "entailment graded 2, the implied one 1). mean ± std over seeds; Δ: paired by seed, mean "
        "[95 % t-interval], **bold** when the interval excludes 0. dropped %: DCLR's logged share "
        "of in-batch negatives dropped, mean over steps and seeds.",
        "",
        "## Results",
        "",
        *main_table(data),
        "",
        f"![paired differences against MNRL]({PLOT})",
        "",
        "In plain words:",
        "",
        *(statements(data) or ["- no runs yet"]),
        "",
        *resolve_design(data),
        "",
        *multiplicity(data),
        "",
        *design(data),
        "",
        "### Every STS task (mean ± std)",
        "",
        *task_table(data),
        "",
        "### Paired Δ per task against MNRL",
        "",
        *delta_task_table(data, "mnrl"),
        "",
        "### Paired Δ per task against GISTEmbedLoss at its default margin 0",
        "",
        *delta_task_table(data, "gist"),
        "",
        "## Ablation: GIST's extra negatives, DCLR's noise negatives (issue 48)",
        "",
        "GISTEmbedLoss's default adds two blocks of negatives to MNRL's anchor–positive one "
        "(`contrast_anchors=True`: anchor–anchor; `contrast_positives=True`: positive–positive), "
        "both masked by its guide. With both off, what remains is MNRL's loss with GIST's mask. "
        "DCLRLoss's default adds noise negatives (`noise_mode: optimized`, k = batch size); with "
        "`noise_mode: none` what remains is MNRL's loss with DCLR's rule. Each ablation runs the "
        "same seeds, batches and dropout stream as its main variant, so Δ vs main isolates the "
        "switched-off part. Same setting as above.",
        "",
        *ablation_section(data),
        "",
        "## Reproduce",
        "",
        *reproduce(data, setup, seeds),
        "",
        "## Tuning (STS-B dev, seed 42, one run per margin)",
        "",
        f"GIST absolute margins {', '.join(f'{m:g}' for m in GIST_MARGINS)}; DCLR pair_relative "
        f"margins {', '.join(f'{m:g}' for m in RELATIVE_MARGINS)}; best dev score chosen (ties: "
        "the smaller margin). One seed: the choice is itself noisy.",
        "",
        *tuning_table(data, out),
        "",
        *tuning_curve(data, out),
        "",
        "## Audit: false negatives in the batches and what each rule drops",
        "",
        *samplers_line(data),
        *audit_section(data),
        "",
    ]
    png = plot(data, out / PLOT)
    if png is None:
        lines = [line for line in lines if PLOT not in line]
    md = out / REPORT
    write_text(md, "\n".join(lines))
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dclr_lab.pairs_report", description=__doc__)
    p.add_argument("-o", "--out", type=Path, default=Path("docs/results/cpu-scale/pairs"))
    print(build_report(p.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
