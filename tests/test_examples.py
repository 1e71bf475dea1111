"""examples/train_st_dclr.py at tiny scale: SentenceTransformerTrainer with dclr.st.DCLRLoss, then
`dclr eval` on the saved model."""

from __future__ import annotations

import pytest
from helpers import load_example, make_tiny_model_dir, write_pseudo_corpus

# On a CPU the examples do not ask the trainer for pinned memory (torch warns that it cannot pin)
NO_PIN_WARNING = pytest.mark.filterwarnings("error:'pin_memory' argument is set as true")


@pytest.mark.slow
@NO_PIN_WARNING
def test_st_dclr_example_trains_and_evaluates(tmp_path, data_dir, capfd):
    pytest.importorskip("datasets")
    example = load_example("train_st_dclr")
    model = make_tiny_model_dir(tmp_path / "tiny")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 40)
    out = tmp_path / "trained"
    code = example.main(
        [
            "--model", str(model), "--corpus", str(corpus), "--data-dir", str(data_dir),
            "--steps", "2", "--batch-size", "8", "--output", str(out),
            "--eval-tasks", "STSBenchmark",
        ]
    )  # fmt: skip
    assert code == 0
    assert (out / "modules.json").is_file()
    from sentence_transformers import SentenceTransformer

    # Trained on 32 tokens, saved with the backbone's own limit (the tiny BERT's 512).
    assert SentenceTransformer(str(out), device="cpu").max_seq_length == 512
    printed = capfd.readouterr()
    assert "STSBenchmark" in printed.out  # the `dclr eval` table


@pytest.mark.slow
@NO_PIN_WARNING
def test_st_dense_example_trains_both_losses_on_dclrs_batches(tmp_path, data_dir, capfd):
    pytest.importorskip("datasets")
    example = load_example("st_dense_false_negatives")
    from dclr.data.sampler import ParaphraseDenseSampler

    seen: list[list[int]] = []
    original = ParaphraseDenseSampler.global_batch

    def spy(self, step):
        batch = original(self, step)
        seen.append(batch.tolist())
        return batch

    model = make_tiny_model_dir(tmp_path / "tiny")
    try:
        ParaphraseDenseSampler.global_batch = spy
        code = example.main(["--model", str(model), "--data-dir", str(data_dir), "--steps", "2",
                             "--batch-size", "8", "--density", "0.5",
                             "--eval-tasks", "STSBenchmark"])  # fmt: skip
    finally:
        ParaphraseDenseSampler.global_batch = original
    assert code == 0
    assert len(seen) == 4 and seen[:2] == seen[2:]  # both losses trained on the same 2 batches
    printed = capfd.readouterr().out
    assert "| MNRL (SimCSE) |" in printed and "| dclr.st.DCLRLoss |" in printed
