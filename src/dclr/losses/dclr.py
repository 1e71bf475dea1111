"""DCLR (Zhou et al., ACL 2022): noise-based negatives + complementary-model instance weighting.

Notation: z1, z2 (n, d) are two dropout views of n sentences (h_i, h_i+); tau the temperature.

* Noise-based negatives. Draw k = round(ratio * n) vectors from N(0, sigma^2 I_d) and push each t
  times along its normalised gradient of the non-uniformity loss
      L_U = mean_i -log( exp(cos(h_i, h_i+)/tau_u) / sum_j exp(cos(h_i, noise_j)/tau_u) ),
  noise_j <- noise_j + beta * g_j / ||g_j||_2. The encoder gets no gradient from this loop.
* Instance weighting. A frozen complementary model scores every in-batch negative; alpha_ij = 0
  when its cosine is >= phi (a likely false negative), else 1. Noise negatives keep weight 1 by
  default (`noise_weighting: none`, what the released code does); `noise_weighting: complementary`
  is the paper's reading, alpha applied to "any negative h^- -- either an in-batch negative or a
  noise-based negative" (../shared/papers/dclr.txt l.94): alpha_ik = 0 when
  cos(h_i^C, noise_k) >= phi, h_i^C being the complementary model's vector of sentence i (the
  noise lives in the trained model's space, so both need the same dimension).

Two loss forms, chosen explicitly:
* `paper` (the paper's equation): L = mean_i -log( e^{s_ii/tau} /
  (sum_j alpha_ij e^{s_ij/tau} + sum_k e^{cos(z1_i, noise_k)/tau}) ); alpha = 0 removes the term
  from the denominator. phi is compared with raw cosine similarity.
* `official` (what RUCAIBox/DCLR's released `cl_vat_forward` computes, as documented in
  docs/dclr-loss-forms.md): weights multiply the logits (a dropped negative still adds exp(0) = 1),
  the threshold is applied to teacher *logits* as phi * 20 (i.e. it assumes tau = 0.05), noise
  negatives are never dropped, and the loss is a softmax followed by element-wise binary
  cross-entropy against the one-hot target, averaged over all n * (n + k) entries. Its noise
  ascends the released code's objective, not L_U: the cross-entropy of each row's in-batch and
  noise logits together, the target its positive (`released_noise_loss`; `noise_objective`
  picks either objective with either form).

With no noise (k = 0) and no weighting (all alpha = 1) the paper form is exactly SimCSE.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F

from dclr.contract import Batch
from dclr.distributed import gather_with_grad
from dclr.errors import ConfigError
from dclr.losses.infonce import cosine_matrix, info_nce
from dclr.losses.simcse import TwoViewObjective, check_temperature
from dclr.options.dclr import DCLROptions
from dclr.views.pair import SEED_STRIDE

# The released DCLR code compares teacher logits with `phi * 20`: 20 = 1 / 0.05, a hard-wired tau.
OFFICIAL_LOGIT_SCALE = 20.0


def non_uniformity_loss(
    anchors: torch.Tensor, positives: torch.Tensor, noise: torch.Tensor, temperature: float
) -> torch.Tensor:
    """L_U. anchors, positives: (n, d); noise: (k, d) -> scalar."""
    pos = F.cosine_similarity(anchors, positives, dim=-1) / temperature  # (n,)
    neg = cosine_matrix(anchors, noise) / temperature  # (n, k)
    return (torch.logsumexp(neg, dim=1) - pos).mean()


def released_noise_loss(
    anchors: torch.Tensor, positives: torch.Tensor, noise: torch.Tensor, temperature: float
) -> torch.Tensor:
    """The objective the released code ascends the noise on (RUCAIBox/DCLR `cl_vat_forward`,
    `simcse/models.py` l.686-690 at e2c3430): cross-entropy of each anchor's row of in-batch
    logits cos(h_i, h_j+)/tau followed by its noise logits cos(h_i, noise_k)/tau, the target its
    own positive. L_U (`non_uniformity_loss`) normalises over the noise alone. anchors,
    positives: (n, d); noise: (k, d) -> scalar."""
    logits = torch.cat([cosine_matrix(anchors, positives), cosine_matrix(anchors, noise)], dim=1)
    target = torch.arange(anchors.shape[0], device=anchors.device)
    return F.cross_entropy(logits / temperature, target)


def noise_objective(name: str) -> Callable[..., torch.Tensor]:
    """The loss the noise ascends: "paper" (L_U of Knowl 2) or "released" (the released code's)."""
    return released_noise_loss if name == "released" else non_uniformity_loss


def non_uniformity_noise_grad(
    unit_anchors: torch.Tensor,
    noise: torch.Tensor,
    temperature: float,
    batch_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """dL_U / d noise (k, d) in closed form, `unit_anchors` (n, d) the anchors at unit length.

    With a_i the unit anchors, x_k the noise, u_k = x_k / |x_k|, c_ik = a_i . u_k and
    p_ik = softmax_k(c_ik / tau_u): dL_U/dx_k = 1 / (n tau_u |x_k|) sum_i p_ik (a_i - c_ik u_k)
    (the positives' term of L_U does not depend on the noise). What autograd gives through
    `non_uniformity_loss`, up to float rounding, with no autograd graph.

    `batch_logits` (n, n), the in-batch logits cos(h_i, h_j+)/tau: the gradient of
    `released_noise_loss` instead, whose softmax runs over each row's in-batch and noise logits
    together (p_ik is then the noise column's share of that row; the formula is otherwise the
    same, since the in-batch logits do not depend on the noise)."""
    length = noise.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (k, 1), as F.normalize's eps
    unit = noise / length  # (k, d)
    cos = unit_anchors @ unit.T  # (n, k)
    if batch_logits is None:
        p = torch.softmax(cos / temperature, dim=1)  # (n, k)
    else:
        k = cos.shape[1]
        p = torch.softmax(torch.cat([batch_logits, cos / temperature], dim=1), dim=1)[:, -k:]
    pulled = p.T @ unit_anchors - (p * cos).sum(0).unsqueeze(1) * unit  # (k, d)
    return pulled / (unit_anchors.shape[0] * temperature * length)


def ascent_gradient(device: torch.device, choice: str = "auto", compiled: bool = False) -> str:
    """How the noise's gradient is taken: `choice`, or for auto the closed form on a GPU (~28
    aten calls an ascent step where autograd makes ~68 and builds a graph: benchmarks/step_ops.py)
    or in a `compiled` step, and autograd elsewhere (what the recorded CPU trajectories computed,
    bit for bit)."""
    if choice != "auto":
        return choice
    return "closed_form" if compiled or device.type == "cuda" else "autograd"


def unit_rows(grad: torch.Tensor) -> torch.Tensor:
    """Each row at unit length; a zero (or NaN) row becomes zeros: that vector stays in place."""
    norm = grad.norm(dim=1, keepdim=True)  # (k, 1)
    return torch.where(
        norm > 0, grad / norm.clamp_min(torch.finfo(grad.dtype).tiny), torch.zeros_like(grad)
    )


def ascend_closed_form(
    noise: torch.Tensor,
    unit_anchors: torch.Tensor,
    steps: int,
    step_size: float,
    temperature: float,
    batch_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """`steps` normalised ascent steps of the noise on L_U (or, given `batch_logits`, on the
    released code's objective), by `non_uniformity_noise_grad`: plain tensor arithmetic, no
    autograd graph, so torch.compile can fuse it whole."""
    for _ in range(steps):
        grad = non_uniformity_noise_grad(unit_anchors, noise, temperature, batch_logits)
        noise = noise + step_size * unit_rows(grad)
    return noise


def noise_negatives(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    k: int,
    std: float,
    steps: int,
    step_size: float,
    temperature: float,
    generator: torch.Generator | None = None,
    gradient: str = "autograd",
    ascend: Callable[..., torch.Tensor] = ascend_closed_form,
    objective: str = "paper",
) -> torch.Tensor:
    """k noise vectors (k, d), each moved `steps` times by a normalised ascent step on L_U
    (`objective` "paper") or on the released code's objective ("released": `released_noise_loss`).

    The anchors are detached: nothing here reaches the encoder. A zero gradient (e.g. a noise
    vector orthogonal to everything) leaves that vector in place instead of dividing by zero.
    `gradient`: "autograd" (through the objective's loss) or "closed_form"
    (`non_uniformity_noise_grad`, stepped by `ascend`: `ascend_closed_form` or a compiled copy):
    the same ascent up to float rounding.
    """
    anchors, positives = anchors.detach().float(), positives.detach().float()
    d = anchors.shape[1]
    noise = torch.randn(k, d, generator=generator, device=anchors.device) * std  # (k, d)
    if gradient == "closed_form":
        unit_anchors = F.normalize(anchors, dim=-1)
        batch_logits = None
        if objective == "released":  # constant through the steps: the noise is not in it
            batch_logits = cosine_matrix(anchors, positives) / temperature  # (n, n)
        noise = ascend(noise, unit_anchors, steps, step_size, temperature, batch_logits)
    else:
        loss_of = noise_objective(objective)
        for _ in range(steps):
            noise.requires_grad_(True)
            with torch.enable_grad():
                (grad,) = torch.autograd.grad(
                    loss_of(anchors, positives, noise, temperature), noise
                )
            noise = (noise + step_size * unit_rows(grad)).detach()
    # Never let a NaN reach the loss: a non-finite entry stays non-finite through later steps
    # (a NaN gradient leaves a vector in place, see above), so one check after the last step
    # sees what a check per step would. On a GPU that read would stall every step; there a
    # non-finite noise vector makes the loss non-finite, which the loop's device-side guard
    # stops before anything is saved (`dclr.training.finite`).
    if noise.device.type != "cuda" and not torch.isfinite(noise).all():
        raise FloatingPointError("non-finite noise negatives after an ascent step")
    return noise


def dropped_fraction(weights: torch.Tensor | None, n: int) -> torch.Tensor:
    """Share of the n(n-1) off-diagonal negatives weighted 0, as a float32 scalar left on the
    weights' device (reading it would make the host wait for the GPU every step)."""
    if weights is None:
        return torch.tensor(0.0)
    return ((weights == 0).sum().double() / max(n * (n - 1), 1)).float()


def false_negative_weights(teacher_cos: torch.Tensor, threshold: float | None) -> torch.Tensor:
    """alpha (n, n) in {0, 1}: 0 where the complementary cosine >= threshold, off the diagonal.

    `threshold` is a cosine in [-1, 1]; None disables weighting (all ones).
    """
    n = teacher_cos.shape[0]
    weights = torch.ones_like(teacher_cos)
    if threshold is None:
        return weights
    drop = teacher_cos.clamp(-1, 1) >= threshold
    drop.fill_diagonal_(False)  # the positive is never a false negative
    return weights.masked_fill(drop, 0.0).reshape(n, n)


def pair_false_negative_weights(
    teacher_cos: torch.Tensor, margin: float, relative: bool
) -> torch.Tensor:
    """alpha (n, n) in {0, 1} by each anchor's own positive: teacher_cos (n, n) holds the
    complementary cosines of anchors (rows) and positives (columns), so g_ii is anchor i's
    positive. Off the diagonal, 0 where cos_ij > g_ii - margin (absolute) or
    > g_ii - |g_ii| * margin (relative): sentence-transformers' GISTEmbedLoss mask (strict `>`).
    With g_ii = 1 (two views of one sentence) the absolute rule is the fixed rule at
    phi = 1 - margin, up to ties."""
    n = teacher_cos.shape[0]
    positive = teacher_cos.diagonal().reshape(n, 1)  # (n, 1) g_ii
    cut = positive - (positive.abs() * margin if relative else margin)  # (n, 1)
    drop = teacher_cos > cut
    drop.fill_diagonal_(False)  # the positive is never a false negative
    return torch.ones_like(teacher_cos).masked_fill(drop, 0.0)


def noise_negative_weights(
    complementary_anchors: torch.Tensor, noise: torch.Tensor, threshold: float
) -> torch.Tensor:
    """alpha (n, k) in {0, 1} for noise negatives: 0 where cos(h_i^C, noise_k) >= threshold.

    complementary_anchors: (n, d) the complementary model's vectors of the batch sentences;
    noise: (k, d) the noise negatives (same d). The paper's Knowl 3 applies alpha to "any negative
    representation h^- -- either an in-batch negative or a noise-based negative"
    (../shared/papers/dclr.txt l.94).
    """
    if complementary_anchors.shape[1] != noise.shape[1]:
        raise ConfigError(
            f"noise_weighting 'complementary' compares the complementary model's vectors "
            f"(d = {complementary_anchors.shape[1]}) with the noise negatives (d = "
            f"{noise.shape[1]}): use a complementary model of the trained model's dimension"
        )
    sims = cosine_matrix(complementary_anchors.float(), noise.float())  # (n, k)
    return torch.ones_like(sims).masked_fill(sims.clamp(-1, 1) >= threshold, 0.0)


def dclr_paper_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    noise: torch.Tensor | None,
    weights: torch.Tensor | None,
    temperature: float,
    noise_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """The paper's weighted InfoNCE. z1, z2: (n, d); noise: (k, d) or None; weights: (n, n);
    noise_weights: (n, k) or None (all ones: every noise negative kept).

    Logits (n, n + k): the batch block, then the noise block; alpha = 0 entries of either leave
    the denominator.
    """
    n = z1.shape[0]
    dropped = None if weights is None else weights == 0  # (n, n)
    blocks = [z2]
    if noise is not None and noise.shape[0] > 0:
        blocks.append(noise.to(z1.dtype))  # (k, d)
        if dropped is not None or noise_weights is not None:
            batch_block = (
                dropped
                if dropped is not None
                else torch.zeros(n, n, dtype=torch.bool, device=z1.device)
            )
            noise_block = (
                noise_weights.to(z1.device) == 0
                if noise_weights is not None
                else torch.zeros(n, noise.shape[0], dtype=torch.bool, device=z1.device)
            )
            dropped = torch.cat([batch_block, noise_block], dim=1)  # (n, n + k)
    return info_nce(z1, blocks, temperature, masked=dropped)


def without_autocast(device: torch.device) -> Any:
    """A block run in the tensors' own precision (fp32) under a GPU run's autocast (bf16 / fp16):
    the false-negative and noise decisions do not depend on the training precision (bf16 rounds a
    cosine near phi = 0.9 to a 0.004 grid), and BCE, which CUDA's autocast refuses in half
    precision, runs. Nothing changes where autocast is off (every CPU run)."""
    return torch.autocast(device.type, enabled=False)


def official_weights(teacher_cos: torch.Tensor, phi: float, temperature: float) -> torch.Tensor:
    """The released code's rule: teacher logits (cos / tau) >= phi * 20 -> weight 0, else 1."""
    teacher_logits = teacher_cos / temperature
    drop = teacher_logits >= phi * OFFICIAL_LOGIT_SCALE
    drop.fill_diagonal_(False)
    return torch.ones_like(teacher_cos).masked_fill(drop, 0.0)


def dclr_official_loss(
    z1: torch.Tensor,
    z2: torch.Tensor,
    noise: torch.Tensor | None,
    weights: torch.Tensor | None,
    temperature: float,
) -> torch.Tensor:
    """Softmax + element-wise BCE over (n, n + k) logits whose batch part is multiplied by weights."""
    logits = cosine_matrix(z1, z2) / temperature  # (n, n)
    if weights is not None:
        logits = logits * weights  # a dropped negative becomes logit 0, i.e. exp(0) = 1
    if noise is not None and noise.shape[0] > 0:
        logits = torch.cat([logits, cosine_matrix(z1, noise.to(z1.dtype)) / temperature], dim=1)
    probs = logits.float().softmax(dim=1)  # (n, n + k)
    target = torch.zeros_like(probs)
    target[:, : z1.shape[0]].fill_diagonal_(1.0)
    with without_autocast(probs.device):  # CUDA's autocast refuses BCE in half precision
        return F.binary_cross_entropy(probs, target)


def distillation_loss(
    student_logits: torch.Tensor, teacher_cos: torch.Tensor, temperature: float
) -> torch.Tensor:
    """KL(teacher || student) over each row's in-batch distribution (Table 6's KD ablation)."""
    teacher = F.softmax(teacher_cos / temperature, dim=1)
    return F.kl_div(F.log_softmax(student_logits.float(), dim=1), teacher, reduction="batchmean")


# ---- module -----------------------------------------------------------------------------------


class DCLRLoss(TwoViewObjective):
    """DCLR around an encoder. `forward(batch)`: `batch.features`, the n sentences;
    `batch.indices` / `batch.sentences`, the global batch (what the complementary model scores);
    `batch.step` seeds the noise.

    Args:
        model: maps tokenized features to (n, d) vectors (under DDP, the wrapped model).
        complementary: frozen scorer of in-batch negatives (`dclr.losses.complementary`); needed
            for weighting 'complementary' and 'distill'.
        options: `DCLROptions` (`dclr.options.dclr`, where each is documented): tau,
            the noise (k = ratio x batch, sigma, t, beta, tau_u, mode), phi, the weighting of
            in-batch and of noise negatives, and the loss form. A calibrated phi comes in here,
            as `options.false_negative_threshold`.
        seed: noise is drawn from a generator seeded by (seed, step): reproducible, resumable and
            identical on every rank (noise negatives are global: each rank computes the same
            global loss, see `dclr.distributed`).
        views: positive-view strategies (`dclr.views.PositiveViews`); None: two dropout views.
        start_records: what was measured before step 1 (e.g. the calibration that chose phi),
            logged at step 0.
        derived_settings: the options in `options` that were computed rather than set,
            {flat option name: value} (a calibrated `false_negative_threshold`), for the run to
            report (`dclr.contract.HasDerivedSettings`).
    With noise_mode 'none' and weighting 'none' the paper form equals SimCSE in value and gradient.
    Returns a dict: loss, and its parts (contrastive, distill, dropped_fraction, noise_count).
    """

    def __init__(
        self,
        model: Any,
        complementary: Any = None,
        options: DCLROptions | None = None,
        *,
        seed: int = 0,
        views: Any = None,
        start_records: dict[str, dict[str, Any]] | None = None,
        derived_settings: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        options = (options or DCLROptions()).loss_options()
        options.check_options()
        if options.needs_complementary and complementary is None:
            raise ConfigError(f"weighting {options.weighting!r} needs a complementary model")
        self.options = options
        self.model = model
        self.complementary = complementary  # frozen; never a parameter of this loss
        self.temperature = check_temperature(options.temperature)
        # the options are read from `self.options` under their own names; only derived values here
        self.noise_temperature = options.noise_temperature or options.temperature
        self.seed = seed
        self.views = views
        self.start_records = dict(start_records or {})
        self.derived_settings = dict(derived_settings or {})
        self._ascend: Callable[..., torch.Tensor] | None = None  # compiled (`compile_parts`)

    def compile_parts(self, mode: str) -> None:
        """The step is compiled (`optimisation.compile`): compile the closed-form noise ascent
        too, its t steps fused into a few kernels, and let `noise_gradient: auto` take the closed
        form on any device (a compiled run equals the eager one only to rounding already). It is
        compiled in torch.compile's default mode whatever `mode` is: a CUDA graph of its own
        beside the backbone's would gain little over kernels already fused."""
        self._ascend = torch.compile(ascend_closed_form, dynamic=False)

    @classmethod
    def of(
        cls, model: Any, complementary: Any = None, *, seed: int = 0, views: Any = None,
        **options: Any,
    ) -> DCLRLoss:  # fmt: skip
        """The loss from option keywords (`DCLROptions` field names), for scripts and tests."""
        return cls(model, complementary, DCLROptions(**options), seed=seed, views=views)

    def noise(self, z1: torch.Tensor, z2: torch.Tensor, step: int) -> torch.Tensor | None:
        k = round(self.options.noise_ratio * z1.shape[0])
        if self.options.noise_mode == "none" or k == 0:
            return None
        gen = torch.Generator(device=z1.device).manual_seed(self.seed * SEED_STRIDE + step)
        steps = self.options.noise_steps if self.options.noise_mode == "optimized" else 0
        compiled = self._ascend is not None
        gradient = ascent_gradient(z1.device, self.options.noise_gradient, compiled)
        return noise_negatives(
            z1,
            z2,
            k,
            self.options.noise_std,
            steps,
            self.options.noise_step_size,
            self.noise_temperature,
            generator=gen,
            gradient=gradient,
            ascend=self._ascend or ascend_closed_form,
            objective=self.options.ascent_objective,
        )

    def _negatives(
        self,
        z1: torch.Tensor,
        z2: torch.Tensor,
        indices: Any,
        sentences: Any,
        step: int,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """The noise negatives, the teacher's cosines and the weights they give (in-batch, noise):
        what the loss is told, none of it trained."""
        noise = self.noise(z1, z2, step)
        teacher = None
        if self.options.weighting in ("complementary", "distill"):
            teacher = self.complementary.similarities(indices, sentences).to(z1.device)
        elif self.options.weighting == "self":
            with torch.no_grad():
                teacher = cosine_matrix(z1.detach().float(), z2.detach().float())
        weights = None
        if teacher is not None and self.options.weighting != "distill":
            if self.options.dclr_form == "official":
                weights = official_weights(
                    teacher, self.options.false_negative_threshold, self.temperature
                )
            elif self.options.false_negative_rule == "fixed":
                weights = false_negative_weights(teacher, self.options.false_negative_threshold)
            else:
                relative = self.options.false_negative_rule == "pair_relative"
                weights = pair_false_negative_weights(teacher, self.options.pair_margin, relative)
        noise_weights = None
        if self.options.noise_weighting == "complementary" and noise is not None:
            anchors = self.complementary.anchor_vectors(indices, sentences).to(z1.device)  # (n, d)
            noise_weights = noise_negative_weights(
                anchors, noise, self.options.false_negative_threshold
            )
        return noise, teacher, weights, noise_weights

    def objective(
        self, z1: torch.Tensor, z2: torch.Tensor, batch: Batch | None = None
    ) -> dict[str, torch.Tensor]:
        """The loss from this rank's two views (n_local, d); gathered across ranks here."""
        indices = batch.indices if batch is not None else None
        sentences = batch.sentences if batch is not None else None
        step = batch.step if batch is not None else 0
        z1, z2 = gather_with_grad(z1), gather_with_grad(z2)  # (n_global, d)
        with without_autocast(z1.device):
            noise, teacher, weights, noise_weights = self._negatives(
                z1, z2, indices, sentences, step
            )
        if self.options.dclr_form == "official":
            contrastive = dclr_official_loss(z1, z2, noise, weights, self.temperature)
        else:
            contrastive = dclr_paper_loss(z1, z2, noise, weights, self.temperature, noise_weights)
        parts = {"contrastive": contrastive.detach()}
        loss = contrastive
        if self.options.weighting == "distill":
            kd = distillation_loss(
                cosine_matrix(z1, z2) / self.temperature,
                cast(torch.Tensor, teacher),  # set above: "distill" is a complementary weighting
                self.temperature,
            )
            loss = loss + kd
            parts["distill"] = kd.detach()
        n = z1.shape[0]
        parts["dropped_fraction"] = dropped_fraction(weights, n)
        parts["noise_count"] = torch.tensor(0 if noise is None else noise.shape[0])
        if self.options.noise_weighting == "complementary":
            parts["noise_dropped_fraction"] = (
                torch.tensor(0.0)
                if noise_weights is None
                else (noise_weights == 0).float().mean()  # left on the device, as above
            )
        return {"loss": loss, **parts}
