"""`optimisation.low_memory` (dclr.training.lean): the word-embedding gradient stays sparse while
backward runs and is made dense once before clipping and AdamW; the run is the default run to
float rounding, with and without GradCache; one process only."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_run_overrides
from transformers import AutoModel

import dclr.training.loop as loop_module
from dclr.driver import trainer_for
from dclr.errors import ConfigError
from dclr.recipe import load_config
from dclr.training.lean import densify_grads, sparse_embedding_grads
from dclr.training.tracking import read_metrics


def run_losses(model_dir, corpus, out, **options) -> dict[int, float]:
    config = load_config(None, tiny_run_overrides(model_dir, corpus, out, max_steps=6, **options))
    trainer_for(config).train()
    return {r["step"]: r["loss"] for r in read_metrics(out, "train")}


def test_densify_sums_the_rows_a_sparse_gradient_repeats():
    param = torch.nn.Parameter(torch.zeros(4, 2))
    indices = torch.tensor([[1, 3, 1]])
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    param.grad = torch.sparse_coo_tensor(indices, values, (4, 2), check_invariants=True)
    dense = torch.nn.Parameter(torch.zeros(3))
    dense.grad = torch.ones(3)
    assert densify_grads([param, dense, torch.nn.Parameter(torch.zeros(1))]) == 1
    expected = torch.tensor([[0.0, 0.0], [6.0, 8.0], [0.0, 0.0], [3.0, 4.0]])  # row 1: 1+5, 2+6
    assert not param.grad.is_sparse and torch.equal(param.grad, expected)
    assert torch.equal(dense.grad, torch.ones(3))


def test_the_word_embedding_gradient_is_sparse_until_densified(model_dir):
    ids = torch.tensor([[2, 5, 7, 5, 3]])

    def grads(sparse: bool) -> torch.Tensor:
        backbone = AutoModel.from_pretrained(model_dir).eval()
        if sparse:
            table = sparse_embedding_grads(backbone)
            assert table is backbone.get_input_embeddings()
        backbone(input_ids=ids).last_hidden_state.square().sum().backward()
        grad = backbone.get_input_embeddings().weight.grad
        assert grad is not None and grad.is_sparse == sparse
        densify_grads(backbone.parameters())
        return backbone.get_input_embeddings().weight.grad

    sparse, dense = grads(True), grads(False)
    assert not sparse.is_sparse
    torch.testing.assert_close(sparse, dense)
    assert sparse_embedding_grads(torch.nn.Linear(2, 2)) is None  # no input table: nothing to do


@pytest.mark.parametrize("chunk", [None, 4])
def test_low_memory_trains_the_default_run_to_rounding(model_dir, corpus_file, tmp_path, chunk):
    base = run_losses(model_dir, corpus_file, tmp_path / "base", grad_cache_chunk=chunk)
    lean = run_losses(
        model_dir, corpus_file, tmp_path / "lean", grad_cache_chunk=chunk, low_memory=True
    )
    assert lean.keys() == base.keys() and len(base) == 6
    for step, loss in base.items():
        assert lean[step] == pytest.approx(loss, rel=1e-4, abs=1e-5)


def test_low_memory_densifies_and_trims_once_a_step_with_fused_adamw(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    calls = {"trim": 0, "densified": 0}

    def densify(parameters):
        calls["densified"] += densify_grads(parameters)
        return 1

    monkeypatch.setattr(loop_module, "densify_grads", densify)
    monkeypatch.setattr(
        loop_module, "trim_heap", lambda s: calls.__setitem__("trim", calls["trim"] + 1)
    )
    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "r", max_steps=3, low_memory=True
    )
    trainer = trainer_for(load_config(None, overrides))
    assert trainer._fused_adamw() is True  # no temporaries of a parameter's size
    trainer.train()
    assert calls == {"trim": 3, "densified": 3}  # the word embeddings' gradient, each step
    off = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "o", low_memory=True, fused_optimizer="off"
    )
    assert trainer_for(load_config(None, off))._fused_adamw() is None


def test_low_memory_refuses_several_processes(model_dir, corpus_file, tmp_path):
    overrides = tiny_run_overrides(model_dir, corpus_file, tmp_path / "r", low_memory=True)
    trainer = trainer_for(load_config(None, overrides))
    trainer.world = 2  # as under torchrun with two ranks (refused before DDP is built)
    with pytest.raises(ConfigError, match="low_memory trains in one process"):
        trainer._setup()


def test_low_memory_refuses_compile_by_name(model_dir, corpus_file, tmp_path):
    """Inductor fails on the sparse embedding backward (aten.nonzero) and breaks the graph on
    every call: the two options are refused together instead of compiling nothing, noisily."""
    overrides = tiny_run_overrides(
        model_dir, corpus_file, tmp_path / "r", low_memory=True, compile="default"
    )
    with pytest.raises(ConfigError, match="low_memory and optimisation.compile"):
        load_config(None, overrides)
