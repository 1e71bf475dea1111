"""Run under torchrun (gloo, 2 ranks) by tests/training/test_distributed.py.

    ddp_more_checks.py teacher MODEL_DIR OUT      each rank writes OUT.<rank>.safetensors: the
        two-view complementary model's cosines of a global batch, each rank's dropout stream
        seeded differently (as the ranks' trained-model forwards leave them)
    ddp_more_checks.py train OPTIONS_JSON STOP_AT [resume]
        trains the run the flat options describe, stopping after step STOP_AT (0: the end),
        resuming its folder with `resume`; what the run announces goes to stderr

A rank still running after HANG_S seconds prints every thread's stack and exits.
"""

import faulthandler
import json
import sys

import torch
from ddp_check import HANG_S, SENTENCES
from safetensors.torch import save_file

from dclr import distributed as dist


def teacher(model_dir: str, out: str) -> None:
    from dclr.losses.complementary import OnTheFlyComplementary, TwoViewComplementary
    from dclr.models.encoder import SentenceEncoder

    assert dist.init_from_env()
    rank = dist.rank()
    encoder = SentenceEncoder.build(model_dir, pooler="cls", hidden_dropout_prob=0.1)
    scorer = TwoViewComplementary(encoder, max_length=32)
    torch.manual_seed(1000 + rank)  # the ranks' streams differ
    cosines = scorer.similarities(torch.arange(len(SENTENCES)), SENTENCES)
    plain = SentenceEncoder.build(model_dir, pooler="cls")
    anchors = OnTheFlyComplementary(plain, max_length=32).anchor_vectors(None, SENTENCES)
    save_file(
        {"cosines": cosines.contiguous(), "anchors": anchors.contiguous()},
        f"{out}.{rank}.safetensors",
    )
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def train(options: str, stop_at: str, resume: bool) -> None:
    from dclr.driver import trainer_for
    from dclr.progress import listening
    from dclr.recipe import load_config

    config = load_config(None, json.loads(options))
    with listening(lambda text: print(f"» {text}", file=sys.stderr)):  # as `dclr train` says it
        trainer_for(config).train(resume=resume, stop_at_step=int(stop_at) or None)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    if sys.argv[1] == "teacher":
        teacher(sys.argv[2], sys.argv[3])
    else:
        train(sys.argv[2], sys.argv[3], sys.argv[4:] == ["resume"])
