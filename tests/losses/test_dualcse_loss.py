"""DualCSE's loss against a value worked out by hand and against a loop over the paper's formula."""

from __future__ import annotations

import math

import pytest
import torch

from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.dualcse import DUALCSE_TERMS, DualCSELoss, DualEmbeddings, dualcse_loss
from dclr.losses.supervised import SupervisedNLILoss, supervised_simcse_loss
from dclr.options.dualcse import DualCSEOptions, DualCSESection

PAPER_TAU = 0.05
E1, E2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])


def stack(*rows: torch.Tensor) -> torch.Tensor:
    return torch.stack(rows)


def test_equals_the_value_worked_out_by_hand():
    """Two premises, unit vectors on the axes, tau = 1, so every v(a, b) is e, 1 or 1/e.

    premise r = (e1, e2), u = (e2, e1); explicit hypothesis r = u = (e1, e2); implied r = u =
    (e2, e1); contradiction r = u = (-e1, -e2).
    explicit term, premise 0: v(e1, e1) = e over [e + 1] (explicit) + [1/e + 1] (contradictions)
    + [1 + e] (u_j)  ->  -log(e / (2e + 3 + 1/e)); premise 1 and the implicit term are the same by
    symmetry. Each intra term: -log(e / (e + 1)). Total: 2(log(2e + 3 + 1/e) - 1) + 3(log(1 + e) - 1).
    """
    e = math.e
    premise = DualEmbeddings(stack(E1, E2), stack(E2, E1))
    explicit = DualEmbeddings(stack(E1, E2), stack(E1, E2))
    implied = DualEmbeddings(stack(E2, E1), stack(E2, E1))
    contradiction = DualEmbeddings(stack(-E1, -E2), stack(-E1, -E2))
    parts = dualcse_loss(premise, explicit, implied, contradiction, temperature=1.0)
    inter = math.log(2 * e + 3 + 1 / e) - 1  # 1.17526...
    intra = math.log(1 + e) - 1  # 0.31326...
    assert parts["explicit"].item() == pytest.approx(inter, abs=1e-6)
    assert parts["implicit"].item() == pytest.approx(inter, abs=1e-6)
    for name in ("intra_explicit", "intra_implied", "intra_contradiction"):
        assert parts[name].item() == pytest.approx(intra, abs=1e-6)
    assert parts["loss"].item() == pytest.approx(2 * inter + 3 * intra, abs=1e-5)
    assert parts["loss"].item() == pytest.approx(3.290305, abs=1e-5)


def reference(emb: dict[str, torch.Tensor], tau: float, contradiction=True, intra=True) -> float:
    """The issue's formula, term by term, with Python floats and explicit sums over j."""

    def v(a, b):
        return math.exp(torch.nn.functional.cosine_similarity(a, b, dim=0).item() / tau)

    r, u = emb["r"], emb["u"]
    r1, u1, r2, u2, rn, un = (emb[k] for k in ("r1", "u1", "r2", "u2", "rn", "un"))
    n = r.shape[0]
    total = 0.0
    for i in range(n):
        den = sum(v(r[i], r1[j]) + (v(r[i], rn[j]) if contradiction else 0) + v(r[i], u[j]) for j in range(n))  # fmt: skip
        total -= math.log(v(r[i], r1[i]) / den)
        den = sum(v(u[i], r2[j]) + (v(u[i], rn[j]) if contradiction else 0) + v(u[i], r[j]) for j in range(n))  # fmt: skip
        total -= math.log(v(u[i], r2[i]) / den)
        if intra:
            pairs = [(r1, u1), (r2, u2)] + ([(rn, un)] if contradiction else [])
            for a, b in pairs:
                total -= math.log(v(a[i], b[i]) / sum(v(a[i], b[j]) for j in range(n)))
    return total / n


def random_embeddings(n=5, d=8, seed=0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(n, d, generator=gen) for k in ("r", "u", "r1", "u1", "r2", "u2", "rn", "un")}  # fmt: skip


def call(emb, tau, **flags):
    return dualcse_loss(
        DualEmbeddings(emb["r"], emb["u"]),
        DualEmbeddings(emb["r1"], emb["u1"]),
        DualEmbeddings(emb["r2"], emb["u2"]),
        DualEmbeddings(emb["rn"], emb["un"]),
        tau,
        **flags,
    )


@pytest.mark.parametrize("tau", [PAPER_TAU, 0.5])
@pytest.mark.parametrize(
    "flags",
    [{}, {"intra_sentence": False}, {"contradiction_negatives": False}],
    ids=["full", "no-intra", "no-contradiction"],
)
def test_equals_the_formula_on_random_tensors(tau, flags):
    emb = random_embeddings()
    parts = call(emb, tau, **flags)
    expected = reference(
        emb,
        tau,
        contradiction=flags.get("contradiction_negatives", True),
        intra=flags.get("intra_sentence", True),
    )
    assert parts["loss"].item() == pytest.approx(expected, rel=1e-5)
    assert parts["loss"].item() == pytest.approx(sum(parts[k].item() for k in parts if k != "loss"))


def test_parts_are_named_and_switched_off():
    emb = random_embeddings()
    assert list(call(emb, PAPER_TAU)) == ["loss", *DUALCSE_TERMS]
    assert list(call(emb, PAPER_TAU, intra_sentence=False)) == ["loss", "explicit", "implicit"]
    assert "intra_contradiction" not in call(emb, PAPER_TAU, contradiction_negatives=False)


def test_own_implicit_embedding_is_a_negative():
    """v(r_i, u_i) is in the denominator: moving u_i onto r_i raises the explicit term."""
    emb = random_embeddings()
    before = call(emb, PAPER_TAU)["explicit"].item()
    emb["u"] = emb["r"].clone()
    assert call(emb, PAPER_TAU)["explicit"].item() > before


class StubDual(torch.nn.Module):
    """`model(semantics, **features)`: a fixed linear map per semantics of the float features."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.maps = torch.nn.ParameterDict(
            {
                s: torch.nn.Parameter(torch.randn(6, 4, generator=gen))
                for s in ("explicit", "implicit")
            }  # fmt: skip
        )

    def forward(self, semantics: str, x: torch.Tensor) -> torch.Tensor:
        return x @ self.maps[semantics]


def test_module_embeds_four_blocks_and_calls_the_pure_function():
    """Each semantics embeds its own features: the cross encoder tokenises a sentence with
    another prompt word per semantics, so the two batches differ (with one tensor for both, u
    from the explicit features would give the same loss)."""
    model, n = StubDual(), 3
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(4 * n, 6, generator=gen), torch.randn(4 * n, 6, generator=gen)
    parts = DualCSELoss(model, DualCSEOptions(temperature=PAPER_TAU))(
        Batch({"explicit": {"x": x}, "implicit": {"x": y}})
    )
    r, u = model("explicit", x), model("implicit", y)
    blocks = [DualEmbeddings(r[k * n : (k + 1) * n], u[k * n : (k + 1) * n]) for k in range(4)]
    expected = dualcse_loss(*blocks, PAPER_TAU)
    assert parts["loss"].item() == pytest.approx(expected["loss"].item())
    parts["loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_bad_temperature_is_rejected():
    with pytest.raises(ConfigError, match="temperature"):
        DualCSELoss(StubDual(), DualCSEOptions(temperature=0))


def test_the_loss_takes_the_recipe_section_as_its_options():
    """`dualcse:`'s section extends the loss's options: each is declared once, with one default,
    and the loss keeps just its own (not the encoder kind or the RTE evaluation)."""
    import dataclasses

    section = DualCSESection(temperature=0.1, intra_sentence=False, encoder="bi", rte_eval=False)
    loss = DualCSELoss(StubDual(), section)
    assert loss.options == DualCSEOptions(temperature=0.1, intra_sentence=False)
    assert loss.temperature == 0.1
    defaults = {f.name: f.default for f in dataclasses.fields(DualCSEOptions)}
    assert {k: getattr(DualCSESection(), k) for k in defaults} == defaults
    assert DualCSELoss(StubDual()).options == DualCSEOptions() == DualCSEOptions(PAPER_TAU)
    x = torch.randn(12, 6, generator=torch.Generator().manual_seed(2))
    parts = loss(Batch({"explicit": {"x": x}, "implicit": {"x": x}}))
    assert list(parts) == ["loss", "explicit", "implicit"]  # intra_sentence off


def test_supervised_simcse_equals_its_formula():
    """Gao et al.: -log e^{s(h_i,h+_i)/t} / sum_j (e^{s(h_i,h+_j)/t} + e^{s(h_i,h-_j)/t})."""
    gen = torch.Generator().manual_seed(3)
    h, pos, neg = (torch.randn(4, 8, generator=gen) for _ in range(3))

    def v(a, b):
        return math.exp(torch.nn.functional.cosine_similarity(a, b, dim=0).item() / PAPER_TAU)

    expected = (
        -sum(
            math.log(v(h[i], pos[i]) / sum(v(h[i], pos[j]) + v(h[i], neg[j]) for j in range(4)))
            for i in range(4)
        )
        / 4
    )
    assert supervised_simcse_loss(h, pos, neg, PAPER_TAU).item() == pytest.approx(
        expected, rel=1e-5
    )
    features = torch.cat([h, pos, neg])
    module = SupervisedNLILoss(lambda x: x, "simcse", temperature=PAPER_TAU)
    assert module(Batch({"x": features}))["loss"].item() == pytest.approx(expected, rel=1e-5)
