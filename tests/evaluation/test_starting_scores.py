"""The starting model's STS scores are computed once per (model files, pooler, data) and reused."""

from __future__ import annotations

from pathlib import Path

from dclr.evaluation import scores as driver


def test_starting_scores_cached_and_invalidated_by_new_weights(tmp_path, monkeypatch, data_dir):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights-1")
    calls = []

    def fake_eval(
        path: str, pooler: str, data_dir: str | None, label: str = ""
    ) -> dict[str, float]:
        calls.append((path, pooler))
        return {"STSBenchmark": 10.0 * len(calls)}

    monkeypatch.setattr(driver, "evaluate_model", fake_eval)
    cache = tmp_path / "cache"
    first = driver.starting_scores(str(model), "cls", str(data_dir), cache)
    again = driver.starting_scores(str(model), "cls", str(data_dir), cache)
    assert first == again == {"STSBenchmark": 10.0}
    assert len(calls) == 1
    other_pooler = driver.starting_scores(str(model), "mean", str(data_dir), cache)
    assert other_pooler == {"STSBenchmark": 20.0}
    (model / "model.safetensors").write_bytes(b"weights-2, retrained")
    retrained = driver.starting_scores(str(model), "cls", str(data_dir), cache)
    assert retrained == {"STSBenchmark": 30.0}
    assert len(list(Path(cache).glob("*.json"))) == 3
