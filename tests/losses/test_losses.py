"""SimCSE's InfoNCE against a hand-written formula."""

import math

import pytest
import torch

from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.simcse import SimCSELoss, simcse_loss


def hand_infonce(z1: list[list[float]], z2: list[list[float]], tau: float) -> float:
    """-mean_i log softmax_j(cos(z1_i, z2_j) / tau)[i], written with plain Python floats."""

    def cos(a, b):
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))

    total = 0.0
    for i, a in enumerate(z1):
        logits = [cos(a, b) / tau for b in z2]
        total += -(logits[i] - math.log(sum(math.exp(v) for v in logits)))
    return total / len(z1)


def test_simcse_loss_equals_hand_formula():
    z1 = [[1.0, 0.0, 0.5], [0.2, 1.0, -0.3], [-1.0, 0.4, 0.1]]
    z2 = [[0.9, 0.1, 0.4], [0.0, 1.0, 0.0], [-0.5, -0.5, 1.0]]
    got = simcse_loss(torch.tensor(z1), torch.tensor(z2), temperature=0.05)
    assert got.item() == pytest.approx(hand_infonce(z1, z2, 0.05), rel=1e-5)


def test_simcse_loss_known_value_for_identical_orthogonal_views():
    # cos = 1 on the diagonal, 0 elsewhere: loss = -log(e^{1/t} / (e^{1/t} + (n-1)))
    z = torch.eye(4)
    tau = 0.5
    expected = -math.log(math.exp(2) / (math.exp(2) + 3))
    assert simcse_loss(z, z, tau).item() == pytest.approx(expected, rel=1e-6)


def test_simcse_loss_gradient_matches_finite_difference():
    torch.manual_seed(0)
    z1 = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(5, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a: simcse_loss(a, z2, 0.1), (z1,))


@pytest.mark.parametrize("tau", [0.0, -0.05])
def test_temperature_must_be_positive(tau):
    with pytest.raises(ConfigError, match="temperature"):
        SimCSELoss(lambda **_: None, temperature=tau)


def test_module_encodes_two_views_in_one_forward():
    calls = []

    def model(input_ids, attention_mask):
        calls.append(input_ids.shape)
        return input_ids.float() + torch.arange(input_ids.shape[0])[:, None]  # distinct views

    features = {
        "input_ids": torch.tensor([[1, 2], [3, 4], [5, 6]]),
        "attention_mask": torch.ones(3, 2, dtype=torch.long),
    }
    out = SimCSELoss(model, temperature=0.05)(Batch(features))
    assert calls == [torch.Size([6, 2])]
    z = model(**{k: torch.cat([v, v]) for k, v in features.items()})
    assert out["loss"].item() == pytest.approx(simcse_loss(z[:3], z[3:], 0.05).item())
