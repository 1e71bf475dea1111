"""The evaluation plan (`dclr.evaluation.plan`): `dclr eval`'s options -> the tasks it runs, and
`dclr.evaluate`, which returns what `dclr eval --json` writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dclr
from dclr.data.beir import write_beir
from dclr.data.sts import STS_TASKS
from dclr.data.transfer import TRANSFER_TASKS
from dclr.errors import ConfigError, InputError
from dclr.evaluation.plan import EvalPlan, RetrievalTarget, run_plan, split_tasks
from dclr.indexing.index import FORMAT_VERSION, INDEX_META

BEIR = Path("some/beir")
DEV = ("STSBenchmark", "SICKRelatedness")


@pytest.mark.parametrize(
    ("options", "sts", "transfer", "retrieval"),
    [
        ({}, STS_TASKS, (), ()),
        ({"mode": "dev"}, DEV, (), ()),
        ({"mode": "dev", "tasks": "STS-B"}, ("STSBenchmark",), (), ()),
        ({"mode": "dev", "task_set": "sts"}, STS_TASKS, (), ()),  # refused later: no STS12 dev
        ({"task_set": "transfer"}, (), TRANSFER_TASKS, ()),
        ({"task_set": "full"}, STS_TASKS, TRANSFER_TASKS, ()),
        ({"tasks": "stsb,SST-2, trec"}, ("STSBenchmark",), ("SST2", "TREC"), ()),
        ({"tasks": ["STS12", "mr"]}, ("STS12",), ("MR",), ()),
        ({"tasks": "STS12", "task_set": "transfer"}, (), TRANSFER_TASKS, ()),  # --task-set wins
        ({"retrieval": BEIR}, (), (), (RetrievalTarget("beir", BEIR, "test"),)),
        ({"retrieval": BEIR, "split": "dev", "mode": "dev"}, (), (),
         (RetrievalTarget("beir", BEIR, "dev"),)),
        ({"retrieval": BEIR, "tasks": "STS13"}, ("STS13",), (),
         (RetrievalTarget("beir", BEIR, "test"),)),
        ({"retrieval": BEIR, "task_set": "full"}, STS_TASKS, TRANSFER_TASKS,
         (RetrievalTarget("beir", BEIR, "test"),)),
        ({"task_set": "retrieval", "mode": "dev"}, (), (),
         (RetrievalTarget("paraphrase", None, "dev"), RetrievalTarget("inli", None, "dev"))),
        ({"task_set": "retrieval", "retrieval": BEIR}, (), (),
         (RetrievalTarget("beir", BEIR, "test"),)),  # a folder replaces the built-in tasks
    ],
)  # fmt: skip
def test_the_plan_of_each_option_combination(options, sts, transfer, retrieval):
    plan = EvalPlan.from_options(**options)
    assert (plan.sts_tasks, plan.transfer_tasks, plan.retrieval) == (sts, transfer, retrieval)
    assert plan.mode == options.get("mode", "test") and plan.precision == "fp32"
    assert plan.index is None and plan.transfer_mode == "fasttest"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "train"}, "--mode (mode=) must be test or dev, got 'train'"),
        (
            {"transfer_mode": "slow"},
            "--transfer-mode (transfer_mode=) must be fasttest or test, got 'slow'",
        ),
        ({"index": "idx"}, "--index needs --retrieval DIR"),
        ({"index": "idx", "task_set": "retrieval"}, "--index needs --retrieval DIR"),
        (
            {"task_set": "most"},
            "--task-set (task_set=) must be sts, transfer, full or retrieval, got 'most'",
        ),
        ({"tasks": "STS12,SST5"}, "unknown task 'SST5'; choose from STS12, "),
    ],
)
def test_a_bad_option_is_the_commands_config_error(options, message):
    with pytest.raises(ConfigError) as err:
        EvalPlan.from_options(**options)
    assert str(err.value).startswith(message)


def test_a_plan_built_directly_is_checked_and_frozen():
    with pytest.raises(ConfigError, match=r"--mode \(mode=\) must be test or dev"):
        EvalPlan(mode="train")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--index needs --retrieval"):
        EvalPlan(index=Path("idx"), retrieval=(RetrievalTarget("inli", None, "test"),))
    plan = EvalPlan(sts_tasks=("STS12",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.mode = "dev"  # type: ignore[misc]


def test_split_tasks_keeps_simcses_selection():
    assert split_tasks(None, None) == (list(STS_TASKS), [])
    assert split_tasks("", None) == (list(STS_TASKS), [])
    assert split_tasks("SICK-R MPQA", None) == (["SICKRelatedness"], ["MPQA"])


def test_the_precision_defaults_to_the_indexs(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    meta = {"format": FORMAT_VERSION, "params": {}, "dim": 32, "count": 1, "pooler": "mean",
            "model_fingerprint": "x"}  # fmt: skip  # what read_meta requires of any index.json
    (index / INDEX_META).write_text(json.dumps({**meta, "precision": "int8"}))
    plan = EvalPlan.from_options(retrieval=BEIR, index=index)
    assert plan.precision == "int8" and plan.index == index
    assert EvalPlan.from_options(retrieval=BEIR, index=index, precision="fp32").precision == "fp32"
    (index / INDEX_META).write_text(json.dumps(meta))
    assert EvalPlan.from_options(retrieval=BEIR, index=index).precision == "fp32"
    with pytest.raises(InputError, match="not an index folder"):
        EvalPlan.from_options(retrieval=BEIR, index=tmp_path)


def _without_times(results: dict) -> dict:
    return {k: v for k, v in results.items() if not k.endswith("seconds")}


def _cli_json(args: list[str], out: Path) -> dict:
    from dclr.cli.main import app

    result = CliRunner().invoke(app, ["eval", *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_evaluate_returns_what_dclr_eval_json_writes(tiny_model_dir, data_dir, tmp_path):
    model = str(tiny_model_dir)
    options = ["--data-dir", str(data_dir), "--pooler", "mean", "--mode", "dev"]
    written = _cli_json([model, *options, "--tasks", "STS-B,SICK-R"], tmp_path / "r.json")
    results = dclr.evaluate(model, mode="dev", tasks=["STS-B", "SICK-R"], data_dir=data_dir,
                            pooler="mean")  # fmt: skip
    assert list(results) == list(written)  # the same keys, in the same order
    assert _without_times(results) == _without_times(written)
    assert {"model", "mode", "pooler", *DEV, "avg", "alignment", "uniformity"} <= set(results)
    assert results["model"] == model and results["pooler"] == "mean" and "precision" not in results


def test_evaluate_takes_every_option_of_dclr_eval():
    """`dclr.evaluate` names every option `dclr eval` has (the model and --json aside), so a
    new command-line option cannot be missing from Python."""
    import inspect

    import typer.main

    from dclr.cli.main import app as cli

    command = next(c for c in typer.main.get_command(cli).commands.values() if c.name == "eval")
    options = {p.name for p in command.params} - {"model", "json_out"}
    assert options <= set(inspect.signature(dclr.evaluate).parameters)


def test_evaluate_on_a_beir_folder_is_dclr_evals_retrieval(tiny_model_dir, tmp_path):
    corpus = {f"d{i}": f"passage number {i} is about topic {i % 3}" for i in range(12)}
    queries = {"q0": "topic 0", "q1": "topic 1", "q2": "passage number 5"}
    qrels = {"q0": {"d0": 1, "d3": 1}, "q1": {"d1": 1}, "q2": {"d5": 1}}
    folder = write_beir(tmp_path / "beir", corpus, queries, qrels, "test")
    model = str(tiny_model_dir)
    written = _cli_json(
        [model, "--retrieval", str(folder), "--pooler", "mean"], tmp_path / "r.json"
    )
    results = dclr.evaluate(model, retrieval=folder, pooler="mean")
    assert list(results) == list(written)
    assert _without_times(results) == _without_times(written)
    assert "avg" not in results  # a BEIR folder alone: retrieval only
    assert (
        results["retrieval/beir/ndcg@10"]
        == dclr.evaluate_retrieval(model, folder, pooler="mean")["ndcg@10"]
    )


def test_run_plan_reports_each_part_as_it_finishes(tiny_model_dir, data_dir):
    plan = EvalPlan.from_options(mode="dev", tasks="STSBenchmark")
    seen: list[tuple[str, dict]] = []
    results = run_plan(
        plan, tiny_model_dir, data_dir, "mean", on_part=lambda p, r: seen.append((p, dict(r)))
    )
    assert [part for part, _ in seen] == ["sts"]
    assert seen[0][1] == results and results["model"] == str(tiny_model_dir)


def test_missing_data_fails_before_the_model_loads(tmp_path):
    plan = EvalPlan.from_options(tasks="STSBenchmark")
    with pytest.raises(InputError):  # the model does not exist either: the data is read first
        run_plan(plan, tmp_path / "no-model", tmp_path / "no-data")


def test_evaluation_batches_follow_the_device_unless_given(tiny_model_dir, data_dir, monkeypatch):
    """`dclr eval`, `dclr.evaluate` and `dclr.evaluate_sts` encode 128 sentences per forward on
    a CPU and 512 on a GPU (as `dclr train`'s tables do: 128 short STS sentences leave a GPU
    idle); before, they took 128 everywhere. A given batch size wins."""
    from types import SimpleNamespace

    import torch

    from dclr.evaluation.scores import evaluation_batch_size
    from dclr.models.encoder import SentenceEncoder

    assert evaluation_batch_size(SimpleNamespace(device=torch.device("cuda", 0))) == 512
    assert evaluation_batch_size(SimpleNamespace(device=torch.device("cpu"))) == 128
    seen: list[int] = []
    real = SentenceEncoder.encode

    def spy(self, sentences, batch_size=128, **options):
        seen.append(batch_size)
        return real(self, sentences, batch_size=batch_size, **options)

    monkeypatch.setattr(SentenceEncoder, "encode", spy)
    dclr.evaluate(tiny_model_dir, mode="dev", tasks="STSBenchmark", data_dir=data_dir,
                  pooler="mean", device="cpu")  # fmt: skip
    assert seen == [128]
    # the size a GPU gets, with the CPU's encoder (no GPU here): each call asks for it
    for module in ("dclr.evaluation.plan", "dclr.api"):
        monkeypatch.setattr(f"{module}.evaluation_batch_size", lambda encoder: 512)
    dclr.evaluate(tiny_model_dir, mode="dev", tasks="STSBenchmark", data_dir=data_dir,
                  pooler="mean")  # fmt: skip
    dclr.evaluate_sts(str(tiny_model_dir), data_dir, mode="dev", pooler="mean")
    dclr.evaluate(tiny_model_dir, mode="dev", tasks="STSBenchmark", data_dir=data_dir,
                  pooler="mean", batch_size=32)  # fmt: skip
    assert seen == [128, 512, 512, 32]


def test_a_batch_size_below_one_is_refused_before_the_model_loads():
    """batch_size=0 silently meant the default (`--batch-size 0` too); -1 was refused only
    after loading."""
    import dclr
    from dclr.evaluation.plan import run_plan

    for size in (0, -1):
        with pytest.raises(ConfigError, match="batch_size .* must be >= 1"):
            run_plan(EvalPlan(), "no/such/model", batch_size=size)
        with pytest.raises(ConfigError, match="batch_size .* must be >= 1"):
            dclr.evaluate_sts("no/such/model", batch_size=size)
        with pytest.raises(ConfigError, match="batch_size .* must be >= 1"):
            dclr.evaluate_retrieval("no/such/model", task="inli", batch_size=size)
        with pytest.raises(ConfigError, match="batch_size .* must be >= 1"):
            dclr.encode("no/such/model", ["a"], batch_size=size)
        with pytest.raises(ConfigError, match="batch_size .* must be >= 1"):
            dclr.encode_file("no/such/model", "no/such/file.txt", batch_size=size)


def test_an_unknown_realistic_corpus_is_refused(tmp_path):
    from dclr.data.realistic import build_realistic

    with pytest.raises(ConfigError, match="unknown corpus 'foo'; choose from scraped, clusters"):
        build_realistic("foo", tmp_path)
