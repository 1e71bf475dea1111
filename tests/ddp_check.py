"""Run under torchrun (gloo): one DDP SimCSE step on this rank's half of a fixed global batch.

Rank 0 writes the (global) loss and the DDP-averaged gradients to OUT as safetensors, for
tests/test_distributed.py to compare with a single process on the whole batch.
A rank that is still running after HANG_S seconds prints every thread's stack and exits, so a
hang (rendezvous, a collective) fails with a traceback instead of eating the test's timeout.
"""

import faulthandler
import sys

import torch
from safetensors.torch import save_file

from dclr import distributed as dist
from dclr.contract import Batch
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder

SENTENCES = [
    "A man is playing a guitar.",
    "Two dogs run on the beach.",
    "The cat sleeps.",
    "A woman slices an onion on a wooden board.",
    "Kids are playing football in a park.",
    "The stock market fell sharply today.",
    "He reads a book.",
    "Rain is expected tomorrow.",
]


def build(model_dir: str) -> SentenceEncoder:
    torch.manual_seed(0)  # same MLP head on every process
    return SentenceEncoder.build(
        model_dir,
        pooler="cls",
        mlp_head=True,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def main(model_dir: str, out: str) -> None:
    assert dist.init_from_env()
    rank, world = dist.rank(), dist.world_size()
    encoder = build(model_dir).train()
    ddp = torch.nn.parallel.DistributedDataParallel(encoder)
    local = len(SENTENCES) // world
    features = encoder.tokenize(SENTENCES[rank * local : (rank + 1) * local], max_length=32)
    loss = SimCSELoss(ddp, temperature=0.05)(Batch(features))["loss"]
    (loss * world).backward()  # what the trainer does: DDP averages, the loss is global
    if rank == 0:
        save_file({"loss": loss.detach().reshape(1), **grads(encoder)}, out)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


HANG_S = 100

if __name__ == "__main__":
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    main(sys.argv[1], sys.argv[2])
