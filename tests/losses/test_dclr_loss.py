"""DCLR's maths against hand-written formulas, and its reduction to SimCSE."""

import math

import pytest
import torch

from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.dclr import (
    DCLRLoss,
    ascent_gradient,
    dclr_official_loss,
    dclr_paper_loss,
    false_negative_weights,
    noise_negative_weights,
    noise_negatives,
    non_uniformity_loss,
    non_uniformity_noise_grad,
    official_weights,
    released_noise_loss,
)
from dclr.losses.simcse import SimCSELoss, simcse_loss
from dclr.options.dclr import DCLROptions


def cos(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


Z1 = [[1.0, 0.0, 0.5], [0.2, 1.0, -0.3], [-1.0, 0.4, 0.1]]
Z2 = [[0.9, 0.1, 0.4], [0.0, 1.0, 0.0], [-0.5, -0.5, 1.0]]
NOISE = [[0.3, -0.2, 0.9], [-0.7, 0.1, 0.2]]
W = [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]  # two dropped negatives


def hand_paper(z1, z2, noise, w, tau):
    total = 0.0
    for i, a in enumerate(z1):
        den = sum(w[i][j] * math.exp(cos(a, b) / tau) for j, b in enumerate(z2))
        den += sum(math.exp(cos(a, e) / tau) for e in noise)
        total += -math.log(math.exp(cos(a, z2[i]) / tau) / den)
    return total / len(z1)


def hand_paper_weighted_noise(z1, z2, noise, w, anchors_c, phi, tau):
    """Knowl 3 read literally (dclr.txt l.94-97): alpha for every negative, noise included, with
    alpha = 0 iff cos(h_i^C, h^-) >= phi; h_i^C is the complementary model's vector of sentence i."""
    total = 0.0
    for i, a in enumerate(z1):
        den = sum(w[i][j] * math.exp(cos(a, b) / tau) for j, b in enumerate(z2))
        for e in noise:
            alpha = 0.0 if cos(anchors_c[i], e) >= phi else 1.0
            den += alpha * math.exp(cos(a, e) / tau)
        total += -math.log(math.exp(cos(a, z2[i]) / tau) / den)
    return total / len(z1)


def hand_official(z1, z2, noise, w, tau):
    n, total, count = len(z1), 0.0, 0
    for i, a in enumerate(z1):
        logits = [w[i][j] * cos(a, b) / tau for j, b in enumerate(z2)]
        logits += [cos(a, e) / tau for e in noise]
        m = max(logits)
        exps = [math.exp(v - m) for v in logits]
        probs = [e / sum(exps) for e in exps]
        for j, p in enumerate(probs):
            y = 1.0 if j == i else 0.0
            p = min(max(p, 1e-12), 1 - 1e-12)
            total += -(y * math.log(p) + (1 - y) * math.log(1 - p))
            count += 1
    assert count == n * (n + len(noise))
    return total / count


T = torch.tensor


def test_paper_form_equals_hand_formula():
    got = dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.05)
    assert got.item() == pytest.approx(hand_paper(Z1, Z2, NOISE, W, 0.05), rel=1e-5)


def test_paper_form_pinned_value():
    # Pins the equation: a regression changes this number.
    got = dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.1).item()
    assert got == pytest.approx(hand_paper(Z1, Z2, NOISE, W, 0.1), rel=1e-5)
    assert got == pytest.approx(2.198145, abs=2e-6)


def test_official_form_equals_hand_formula():
    got = dclr_official_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.05)
    assert got.item() == pytest.approx(hand_official(Z1, Z2, NOISE, W, 0.05), rel=1e-4)


def test_official_form_pinned_value():
    got = dclr_official_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.1).item()
    assert got == pytest.approx(hand_official(Z1, Z2, NOISE, W, 0.1), rel=1e-4)
    assert got == pytest.approx(0.805717, abs=2e-6)


def test_dropped_negatives_in_each_form():
    # paper: a dropped term leaves the denominator, so dropping lowers the loss
    paper = dclr_paper_loss(T(Z1), T(Z2), None, T(W), 1.0).item()
    full = dclr_paper_loss(T(Z1), T(Z2), None, None, 1.0).item()
    assert paper == pytest.approx(0.514445, abs=2e-6) and full == pytest.approx(0.645368, abs=2e-6)
    # official: a dropped term stays in the denominator as exp(0) = 1
    w = T([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])  # cos(z1_1, z2_0) = 0.16
    z2 = T(Z2)
    assert dclr_official_loss(T(Z1), z2, None, w, 1.0).item() != pytest.approx(
        dclr_official_loss(T(Z1), z2, None, None, 1.0).item()
    )


def test_both_parts_off_equals_simcse_value_and_gradient():
    torch.manual_seed(0)
    a = torch.randn(6, 8, requires_grad=True)
    b = torch.randn(6, 8, requires_grad=True)
    ref = simcse_loss(a, b, 0.05)
    ref.backward()
    ga, gb = a.grad.clone(), b.grad.clone()
    a.grad, b.grad = None, None
    ones = false_negative_weights(torch.randn(6, 6).clamp(-1, 1) * 0.99, threshold=1.0)
    got = dclr_paper_loss(a, b, None, ones, 0.05)
    got.backward()
    assert torch.equal(got, ref)
    assert torch.equal(a.grad, ga) and torch.equal(b.grad, gb)


def test_module_with_both_parts_off_equals_simcse_module():
    torch.manual_seed(0)
    proj = torch.nn.Linear(5, 4)

    def model(input_ids, attention_mask):
        return proj(torch.nn.functional.one_hot(input_ids, 5).float().mean(1))

    features = {
        "input_ids": torch.tensor([[0, 1], [2, 3], [4, 1]]),
        "attention_mask": torch.ones(3, 2, dtype=torch.long),
    }
    ref = SimCSELoss(model, 0.05)(Batch(features))["loss"]
    (g_ref,) = torch.autograd.grad(ref, proj.weight)
    dclr = DCLRLoss.of(model, None, temperature=0.05, noise_mode="none", weighting="none")(
        Batch(features)
    )["loss"]
    (g,) = torch.autograd.grad(dclr, proj.weight)
    assert torch.equal(dclr, ref) and torch.equal(g, g_ref)


def test_weights_compare_raw_cosine_and_keep_the_diagonal():
    teacher = T([[1.0, 0.95, 0.2], [0.95, 1.0, 0.89], [0.2, 0.89, 1.0]])
    w = false_negative_weights(teacher, threshold=0.9)
    assert w.tolist() == [[1, 0, 1], [0, 1, 1], [1, 1, 1]]
    assert false_negative_weights(teacher, None).eq(1).all()


def test_official_threshold_assumes_tau_005():
    teacher = T([[1.0, 0.92], [0.92, 1.0]])
    assert torch.equal(official_weights(teacher, 0.9, 0.05), false_negative_weights(teacher, 0.9))
    # with tau = 0.1 the released rule compares cos/0.1 with 0.9*20, i.e. cos >= 1.8: none dropped
    assert official_weights(teacher, 0.9, 0.1).eq(1).all()


def test_noise_ascent_moves_each_vector_by_beta_and_raises_nonuniformity():
    torch.manual_seed(1)
    h, hp = torch.randn(8, 16), torch.randn(8, 16)
    start = noise_negatives(h, hp, 5, 1.0, 0, 1e-3, 0.05, torch.Generator().manual_seed(3))
    moved = noise_negatives(h, hp, 5, 1.0, 1, 1e-3, 0.05, torch.Generator().manual_seed(3))
    assert torch.allclose((moved - start).norm(dim=1), torch.full((5,), 1e-3), rtol=1e-3)
    big = noise_negatives(h, hp, 5, 1.0, 4, 0.5, 0.05, torch.Generator().manual_seed(3))
    assert non_uniformity_loss(h, hp, big, 0.05) > non_uniformity_loss(h, hp, start, 0.05)


def hand_noise_grad(anchors, noise, tau, positives=()):
    """dL_U/dx_k written out: L_U = mean_i logsumexp_k(cos(a_i, x_k) / tau) - (positive term),
    d cos(a, x) / dx = (a / |a| - cos(a, x) x / |x|) / |x|. With `positives`, the gradient of the
    released code's objective instead: the softmax over each row's in-batch logits
    cos(a_i, b_j) / tau and noise logits together."""
    n, grads = len(anchors), []
    for x in noise:
        nx = math.sqrt(sum(v * v for v in x))
        g = [0.0] * len(x)
        for a in anchors:
            na = math.sqrt(sum(v * v for v in a))
            den = sum(math.exp(cos(a, b) / tau) for b in positives)
            den += sum(math.exp(cos(a, e) / tau) for e in noise)
            p, c = math.exp(cos(a, x) / tau) / den, cos(a, x)
            for j in range(len(x)):
                g[j] += p / (n * tau) * (a[j] / na - c * x[j] / nx) / nx
        grads.append(g)
    return grads


def test_closed_form_noise_gradient_equals_hand_formula_and_autograd():
    unit = torch.nn.functional.normalize(T(Z1, dtype=torch.float64), dim=-1)
    got = non_uniformity_noise_grad(unit, T(NOISE, dtype=torch.float64), 0.1)
    assert torch.allclose(got, T(hand_noise_grad(Z1, NOISE, 0.1), dtype=torch.float64), atol=1e-12)
    torch.manual_seed(0)
    for n, k, d in ((64, 64, 384), (5, 300, 8)):
        a, pos = torch.randn(n, d) * 3, torch.randn(n, d)
        x = torch.randn(k, d).requires_grad_(True)
        (want,) = torch.autograd.grad(non_uniformity_loss(a, pos, x, 0.05), x)
        got = non_uniformity_noise_grad(torch.nn.functional.normalize(a, dim=-1), x.detach(), 0.05)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6 * want.abs().max().item())


def hand_released_noise_loss(anchors, positives, noise, tau):
    """The released code's noise objective (RUCAIBox/DCLR simcse/models.py l.686-690 at e2c3430):
    cross-entropy over [cos(h_i, h_j+) for every j, cos(h_i, noise_k) for every k] / tau, the
    target h_i+; mean over the anchors."""
    total = 0.0
    for i, a in enumerate(anchors):
        logits = [cos(a, b) / tau for b in positives] + [cos(a, e) / tau for e in noise]
        total += -logits[i] + math.log(sum(math.exp(v) for v in logits))
    return total / len(anchors)


def test_released_noise_objective_and_its_closed_form_equal_hand_formulas():
    f64 = {"dtype": torch.float64}
    got = released_noise_loss(T(Z1, **f64), T(Z2, **f64), T(NOISE, **f64), 0.1)
    assert got.item() == pytest.approx(hand_released_noise_loss(Z1, Z2, NOISE, 0.1), rel=1e-12)
    # differs from L_U, whose softmax runs over the noise alone
    assert abs(got - non_uniformity_loss(T(Z1, **f64), T(Z2, **f64), T(NOISE, **f64), 0.1)) > 0.1
    unit = torch.nn.functional.normalize(T(Z1, **f64), dim=-1)
    batch_logits = (
        torch.nn.functional.cosine_similarity(
            T(Z1, **f64).unsqueeze(1), T(Z2, **f64).unsqueeze(0), dim=-1
        )
        / 0.1
    )
    grad = non_uniformity_noise_grad(unit, T(NOISE, **f64), 0.1, batch_logits)
    want = T(hand_noise_grad(Z1, NOISE, 0.1, positives=Z2), **f64)
    assert torch.allclose(grad, want, atol=1e-12)
    assert not torch.allclose(grad, non_uniformity_noise_grad(unit, T(NOISE, **f64), 0.1))


def test_the_released_objective_ascends_alike_by_autograd_and_in_closed_form():
    torch.manual_seed(4)
    h, hp = torch.randn(32, 48), torch.randn(32, 48) * 0.1
    h = h + 0.3 * hp  # positives near their anchors: in-batch logits outweigh the noise's
    runs = {(objective, g): noise_negatives(
                h, hp, 40, 1.0, 4, 0.2, 0.05, torch.Generator().manual_seed(5),
                gradient=g, objective=objective)
            for objective in ("paper", "released") for g in ("autograd", "closed_form")}  # fmt: skip
    for objective in ("paper", "released"):
        assert torch.allclose(runs[objective, "autograd"], runs[objective, "closed_form"],
                              atol=1e-5)  # fmt: skip
    # the two objectives weigh the anchors differently: the noise ends elsewhere
    moved = (runs["paper", "autograd"] - runs["released", "autograd"]).norm(dim=1)
    assert moved.max() > 1e-2


def test_auto_ascends_the_forms_own_objective_and_the_option_overrides_it(monkeypatch):
    import dclr.losses.dclr as dclr_loss

    assert DCLROptions().ascent_objective == "paper"
    assert DCLROptions(dclr_form="official").ascent_objective == "released"
    assert DCLROptions(dclr_form="official", noise_objective="paper").ascent_objective == "paper"
    assert DCLROptions(noise_objective="released").ascent_objective == "released"
    with pytest.raises(ConfigError, match="noise_objective must be one of auto, paper, released"):
        DCLROptions(noise_objective="l_u").check_options()
    seen = []
    real = dclr_loss.noise_negatives
    monkeypatch.setattr(dclr_loss, "noise_negatives",
                        lambda *a, **k: seen.append(k["objective"]) or real(*a, **k))  # fmt: skip
    z = torch.randn(4, 6)
    for form, objective in (("paper", "auto"), ("official", "auto"), ("official", "paper")):
        loss = DCLRLoss.of(lambda **_: None, None, weighting="none", dclr_form=form,
                           noise_objective=objective)  # fmt: skip
        loss.objective(z, z + 0.1)
    assert seen == ["paper", "released", "paper"]


def test_both_ascents_move_the_noise_alike_and_auto_picks_by_device():
    torch.manual_seed(2)
    h, hp = torch.randn(32, 48), torch.randn(32, 48)
    runs = [noise_negatives(h, hp, 40, 1.0, 4, 1e-2, 0.05, torch.Generator().manual_seed(5),
                            gradient=g) for g in ("autograd", "closed_form")]  # fmt: skip
    start = noise_negatives(h, hp, 40, 1.0, 0, 1e-2, 0.05, torch.Generator().manual_seed(5))
    assert (runs[0] - start).abs().max() > 1e-3  # the ascent moved them
    assert torch.allclose(runs[0], runs[1], atol=1e-6)
    assert ascent_gradient(torch.device("cpu")) == "autograd"  # the recorded trajectories
    assert ascent_gradient(torch.device("cuda")) == "closed_form"
    assert ascent_gradient(torch.device("cpu"), "closed_form") == "closed_form"
    assert ascent_gradient(torch.device("cuda"), "autograd") == "autograd"
    assert ascent_gradient(torch.device("cpu"), compiled=True) == "closed_form"
    assert ascent_gradient(torch.device("cpu"), "autograd", compiled=True) == "autograd"


def test_the_module_takes_its_noise_gradient_from_the_option(monkeypatch):
    import dclr.losses.dclr as dclr_loss

    seen = []
    real = dclr_loss.noise_negatives
    monkeypatch.setattr(dclr_loss, "noise_negatives",
                        lambda *a, **k: seen.append(k["gradient"]) or real(*a, **k))  # fmt: skip
    z = torch.randn(4, 6)
    for choice in ("auto", "closed_form", "autograd"):
        loss = DCLRLoss.of(lambda **_: None, None, weighting="none", noise_gradient=choice)
        loss.objective(z, z + 0.1)
    assert seen == ["autograd", "closed_form", "autograd"]  # auto on a CPU: autograd


def test_a_compiled_step_compiles_the_ascent_and_auto_takes_it(monkeypatch):
    """`compile_parts` (the loop calls it when `optimisation.compile` is on) hands the ascent to
    torch.compile; auto then takes the closed form on a CPU too, an explicit autograd does not."""
    import dclr.losses.dclr as dclr_loss

    ran = []

    def fake_compile(fn, **kwargs):
        assert fn is dclr_loss.ascend_closed_form and kwargs == {"dynamic": False}
        return lambda *a: ran.append(a[2]) or fn(*a)

    monkeypatch.setattr(dclr_loss.torch, "compile", fake_compile)
    z = torch.randn(4, 6)
    for choice, expected in (("auto", [4]), ("closed_form", [4]), ("autograd", [])):
        ran.clear()
        loss = DCLRLoss.of(lambda **_: None, None, weighting="none", noise_gradient=choice)
        loss.compile_parts("reduce-overhead")
        loss.objective(z, z + 0.1)
        assert ran == expected, choice  # t = 4 steps through the compiled ascent, or none


def test_noise_is_drawn_from_sigma():
    h = torch.randn(4, 64)
    noise = noise_negatives(h, h, 4000, 2.0, 0, 1e-3, 0.05, torch.Generator().manual_seed(0))
    assert noise.std().item() == pytest.approx(2.0, rel=0.02)


@pytest.mark.parametrize("gradient", ["autograd", "closed_form"])
def test_zero_gradient_does_not_produce_nan(gradient):
    h = torch.zeros(3, 4)  # cosine with a zero vector is 0 everywhere: the gradient is zero
    start = noise_negatives(h, h, 2, 1.0, 0, 1e-3, 0.05, torch.Generator().manual_seed(0))
    noise = noise_negatives(h, h, 2, 1.0, 4, 1e-3, 0.05, torch.Generator().manual_seed(0),
                            gradient=gradient)  # fmt: skip
    assert torch.equal(noise, start)  # left in place


def test_no_gradient_reaches_the_encoder_from_the_noise_loop():
    h = torch.randn(4, 6, requires_grad=True)
    noise = noise_negatives(h, h * 2, 3, 1.0, 2, 1e-3, 0.05)
    assert not noise.requires_grad and h.grad is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"false_negative_threshold": 1.5}, "phi"),
        ({"false_negative_threshold": -1.1}, "phi"),
        ({"noise_ratio": -1}, "noise_ratio"),
        ({"noise_steps": -1}, "noise_steps"),
        ({"noise_std": 0}, "sigma"),
        ({"temperature": 0}, "temperature"),
        (
            {"noise_gradient": "numeric"},
            "noise_gradient must be one of auto, autograd, closed_form",
        ),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DCLRLoss.of(lambda **_: None, None, weighting="none", **kwargs)


def test_complementary_weighting_needs_a_complementary_model():
    with pytest.raises(ConfigError, match="complementary"):
        DCLRLoss.of(lambda **_: None, None, weighting="complementary")


# Complementary vectors h_i^C: row 0 is close to NOISE[0] (cos 0.97), row 2 to NOISE[1] (cos 0.96).
ANCHORS_C = [[0.35, -0.25, 1.0], [0.0, 1.0, 0.0], [-0.8, 0.0, 0.2]]


def test_noise_weights_compare_the_complementary_cosine_with_phi():
    got = noise_negative_weights(T(ANCHORS_C), T(NOISE), 0.9)
    want = [[0.0 if cos(a, e) >= 0.9 else 1.0 for e in NOISE] for a in ANCHORS_C]
    assert got.tolist() == want == [[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]


def test_paper_form_with_weighted_noise_equals_hand_formula():
    alpha = noise_negative_weights(T(ANCHORS_C), T(NOISE), 0.9)
    for tau in (0.05, 0.5):
        got = dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), tau, noise_weights=alpha).item()
        want = hand_paper_weighted_noise(Z1, Z2, NOISE, W, ANCHORS_C, 0.9, tau)
        assert got == pytest.approx(want, rel=1e-5)
    # dropping noise terms lowers the loss; all-ones noise weights change nothing
    assert got < dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.5).item()
    ones = torch.ones(3, 2)
    assert torch.equal(
        dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.5, noise_weights=ones),
        dclr_paper_loss(T(Z1), T(Z2), T(NOISE), T(W), 0.5),
    )
    # noise weights without in-batch weights
    got = dclr_paper_loss(T(Z1), T(Z2), T(NOISE), None, 0.5, noise_weights=alpha).item()
    ones_w = [[1.0] * 3 for _ in range(3)]
    assert got == pytest.approx(
        hand_paper_weighted_noise(Z1, Z2, NOISE, ones_w, ANCHORS_C, 0.9, 0.5), rel=1e-5
    )


def test_noise_weights_need_matching_dimensions():
    with pytest.raises(ConfigError, match="dimension"):
        noise_negative_weights(torch.randn(3, 4), torch.randn(2, 3), 0.9)


class StubComplementary:
    """Fixed teacher similarities and anchor vectors (what a complementary model returns)."""

    def __init__(self, teacher, anchors):
        self.teacher, self.anchors = teacher, anchors

    def similarities(self, indices, sentences):
        return self.teacher

    def anchor_vectors(self, indices, sentences):
        return self.anchors


def test_module_weights_noise_only_when_asked():
    torch.manual_seed(0)
    proj = torch.nn.Linear(5, 4)

    def model(input_ids, attention_mask):
        return proj(torch.nn.functional.one_hot(input_ids, 5).float().mean(1))

    features = {
        "input_ids": torch.tensor([[0, 1], [2, 3], [4, 1]]),
        "attention_mask": torch.ones(3, 2, dtype=torch.long),
    }
    batch = Batch(features, step=3, indices=torch.arange(3), sentences=["a", "b", "c"])
    teacher = torch.eye(3)
    common = dict(noise_ratio=1.0, noise_steps=0, noise_mode="random", seed=1)
    keep = DCLRLoss.of(model, StubComplementary(teacher, None), temperature=0.05, **common)
    out_keep = keep(batch)
    assert "noise_dropped_fraction" not in out_keep
    noise = keep.noise(torch.zeros(3, 4), torch.zeros(3, 4), 3)
    anchors = noise[0].expand(3, 4)  # every h_i^C points at noise 0: cos = 1
    drop = DCLRLoss.of(
        model, StubComplementary(teacher, anchors), temperature=0.05,
        noise_weighting="complementary", false_negative_threshold=0.999, **common,
    )  # fmt: skip
    out = drop(batch)
    assert out["noise_dropped_fraction"].item() == pytest.approx(1 / 3)
    assert out["loss"].item() < out_keep["loss"].item()


def test_noise_weighting_needs_complementary_weighting_and_paper_form():
    with pytest.raises(ConfigError, match="noise_weighting"):
        DCLRLoss.of(lambda **_: None, None, weighting="none", noise_weighting="complementary")
    with pytest.raises(ConfigError, match="noise_weighting"):
        DCLRLoss.of(
            lambda **_: None, StubComplementary(None, None), dclr_form="official",
            noise_weighting="complementary",
        )  # fmt: skip


def test_pair_false_negative_weights_by_hand():
    """GIST's masks, written out: row i drops j != i where g_ij > g_ii - m (absolute) or
    g_ij > g_ii - |g_ii| m (relative); never the diagonal."""
    from dclr.losses.dclr import pair_false_negative_weights

    g = torch.tensor([[0.80, 0.75, 0.10], [0.90, 0.50, 0.44], [0.20, 0.30, -0.40]])
    absolute = pair_false_negative_weights(g, 0.1, relative=False)
    # row 0: cut 0.70 -> drop 0.75; row 1: cut 0.40 -> drop 0.90, 0.44; row 2: cut -0.50 -> all
    assert absolute.tolist() == [[1, 0, 1], [0, 1, 0], [0, 0, 1]]
    relative = pair_false_negative_weights(g, 0.1, relative=True)
    # row 0: cut 0.72 -> drop 0.75; row 1: cut 0.45 -> drop 0.90, keep 0.44;
    # row 2: cut -0.40 - 0.04 = -0.44 -> drop 0.20, 0.30
    assert relative.tolist() == [[1, 0, 1], [0, 1, 1], [0, 0, 1]]


def test_pair_rules_need_complementary_weighting_and_refuse_calibration():
    from dclr.options.dclr import DCLROptions
    from dclr.recipe import load_config

    with pytest.raises(ConfigError, match="weighting: complementary"):
        DCLROptions(false_negative_rule="pair_absolute", weighting="self").check_options()
    with pytest.raises(ConfigError, match="noise_weighting: none"):
        DCLROptions(
            false_negative_rule="pair_relative", noise_weighting="complementary"
        ).check_options()
    with pytest.raises(ConfigError, match="false_negative_rule must be one of"):
        DCLROptions(false_negative_rule="gist").check_options()
    # a calibrated phi is refused: the pair rules do not use phi (the recipe's dclr: section)
    base = dict(model="m", method="dclr", pooler="mean", mlp_head=False)
    for rule in ("pair_absolute", "pair_relative"):
        load_config(None, dict(base, false_negative_rule=rule))  # accepted without calibration
        for mode in ("random_pairs", "paraphrase_recall"):
            with pytest.raises(ConfigError, match=f"false_negative_rule: {rule} does not use"):
                load_config(None, dict(base, false_negative_rule=rule, phi_calibration=mode))


@pytest.mark.parametrize("rule", ["pair_absolute", "pair_relative"])
def test_pair_rules_refuse_the_official_form(rule):
    """The official form's weights come from phi * 20 on the logits: no pair rule there, even
    with the complementary weighting the rule needs."""
    from dclr.options.dclr import DCLROptions

    DCLROptions(false_negative_rule=rule, dclr_form="paper").check_options()
    with pytest.raises(ConfigError, match="dclr_form: paper"):
        DCLROptions(false_negative_rule=rule, dclr_form="official").check_options()


@pytest.mark.parametrize("margin", [-0.01, 2.01, float("nan")])
def test_pair_margin_out_of_range_is_refused(margin):
    from dclr.options.dclr import DCLROptions

    for edge in (0.0, 2.0):  # the range's ends are allowed
        DCLROptions(false_negative_rule="pair_absolute", pair_margin=edge).check_options()
    with pytest.raises(ConfigError, match="pair_margin must be in"):
        DCLROptions(false_negative_rule="pair_absolute", pair_margin=margin).check_options()


class CosineComplementary:
    """A complementary model's cached vectors, scored as `PlannedComplementary.similarities`
    scores them: their cosine matrix, computed when asked."""

    def __init__(self, vectors):
        self.vectors = vectors

    def similarities(self, indices, sentences):
        from dclr.losses.infonce import cosine_matrix

        return cosine_matrix(self.vectors, self.vectors)


@pytest.mark.parametrize(
    ("form", "weighting"),
    [("paper", "self"), ("paper", "complementary"), ("official", "complementary")],
)
def test_false_negatives_are_judged_in_fp32_under_autocast(form, weighting, monkeypatch):
    """A GPU run's objective runs under autocast (bf16 / fp16). The teacher's cosines, the weights
    and the noise are kept out of it, so which negatives are dropped does not depend on the
    training precision. Here, with the CPU's bf16 autocast, against phi = 0.9: a negative at
    cosine 0.9001 is dropped and one at 0.8990 kept, as in fp32; in bf16 both cosines and phi
    round to 0.8984 and both would be dropped. The official form's BCE, which CUDA's autocast
    refuses in half precision, runs outside autocast."""
    e = torch.eye(8)

    def towards(v, c, side):  # a unit vector at cosine c to unit vector v
        return c * v + math.sqrt(1 - c**2) * side

    z1 = e[:3].clone()
    z2 = e[:3].clone()
    z2[1] = towards(z1[0], 0.9001, e[5])  # cos(z1_0, z2_1) = 0.9001: a false negative
    z2[2] = towards(z1[1], 0.8990, e[6])  # cos(z1_1, z2_2) = 0.8990: a true one
    vectors = torch.stack([e[0], towards(e[0], 0.9001, e[5]), towards(e[0], 0.8990, e[6])])
    teacher = CosineComplementary(vectors)  # the same two cosines, (0, 1) and (0, 2)
    loss = DCLRLoss.of(
        lambda **_: None, teacher if weighting == "complementary" else None, temperature=0.05,
        noise_mode="none", weighting=weighting, false_negative_threshold=0.9, dclr_form=form,
    )  # fmt: skip
    in_fp32 = loss.objective(z1, z2)
    real_bce = torch.nn.functional.binary_cross_entropy
    autocast_seen = []

    def bce(*args, **kwargs):
        autocast_seen.append(torch.is_autocast_enabled("cpu"))
        return real_bce(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "binary_cross_entropy", bce)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        in_bf16 = loss.objective(z1, z2)
    dropped = in_fp32["dropped_fraction"].item()
    assert dropped == in_bf16["dropped_fraction"].item()
    assert dropped * 3 * 2 == pytest.approx(2 if weighting == "complementary" else 1)
    assert autocast_seen == ([False] if form == "official" else [])
