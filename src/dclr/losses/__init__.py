"""Contrastive objectives: the maths in pure functions, thin modules around them."""

from dclr.losses.simcse import SimCSELoss, simcse_loss

__all__ = ["SimCSELoss", "simcse_loss"]
