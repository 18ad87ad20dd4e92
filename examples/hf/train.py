"""A tiny, real Hugging Face ``Trainer`` job: DDP on CPU (gloo), written the way the Transformers
docs show; nothing in it knows about Revive.

- The model is built from a config with random weights (``BertConfig`` → a few thousand
  parameters); the dataset is synthetic. Nothing is downloaded.
- ``TrainingArguments(save_steps=…, logging_steps=1)``: ``<output_dir>/checkpoint-<step>/`` every
  ``save_steps``; progress from the Trainer's own ``ProgressCallback`` (a tqdm bar ``N/max_steps``)
  and its log dicts (``{'loss': …, 'epoch': …}``, one line per ``logging_steps``).
- On a restart, ``trainer.train(resume_from_checkpoint=get_last_checkpoint(output_dir))`` resumes
  from the highest ``checkpoint-N`` (``None``: a fresh start).
- Under ``srun`` (one task per node) the Slurm variables map to what ``torch.distributed`` reads
  (``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID`` → ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``), as
  the Transformers/Accelerate Slurm docs show; ``MASTER_ADDR``/``MASTER_PORT`` come from the sbatch
  script.

The dataset sleeps ``--sample-seconds`` per sample (a stand-in for data loading), so a step takes a
predictable wall time on any CPU. Run it under ``examples/hf/train.sbatch``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import Dataset


class Synthetic(Dataset):
    """``n`` random token sequences; label = whether the first token is in the upper half."""

    def __init__(self, n: int, seq: int, vocab: int, delay_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)
        self.labels = (self.ids[:, 0] >= vocab // 2).long()
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


def slurm_to_torch_env() -> None:
    """srun sets SLURM_*; torch.distributed (and the Trainer) read RANK/WORLD_SIZE/LOCAL_RANK."""
    for src, dst in (("SLURM_PROCID", "RANK"), ("SLURM_NTASKS", "WORLD_SIZE"), ("SLURM_LOCALID", "LOCAL_RANK")):
        if src in os.environ and dst not in os.environ:
            os.environ[dst] = os.environ[src]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output-dir", required=True, help="TrainingArguments.output_dir (checkpoint-N folders)")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-steps", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--sample-seconds", type=float, default=0.05, help="data-loading delay per sample")
    args = ap.parse_args(argv)
    slurm_to_torch_env()

    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config)
    targs = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, save_steps=args.save_steps, logging_steps=1,
        per_device_train_batch_size=args.batch_size, learning_rate=1e-3, report_to="none", use_cpu=True,
        ddp_backend="gloo", dataloader_num_workers=0, seed=0,
    )
    trainer = Trainer(model=model, args=targs, train_dataset=Synthetic(args.samples, 8, 64, args.sample_seconds))
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
