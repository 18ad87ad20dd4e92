"""A tiny, real PyTorch Lightning job: DDP on CPU (gloo) across the Slurm allocation, written the
way Lightning's docs show; nothing in it knows about Revive.

- ``Trainer(max_steps=…, num_nodes=N, devices=1, strategy="ddp")``: Lightning detects Slurm by itself
  (``SLURMEnvironment``: ``srun`` with ``--ntasks-per-node=1`` sets ``SLURM_NTASKS`` = nodes × devices)
  and registers its SIGUSR1 auto-requeue handler.
- ``ModelCheckpoint(every_n_train_steps=…, save_last=True)`` writes ``epoch=E-step=S.ckpt`` and
  ``last.ckpt``; ``trainer.fit(…, ckpt_path="last")`` resumes from the newest on a restart (and starts
  fresh, with a warning, when there is none).
- Progress comes from Lightning's own ``TQDMProgressBar``; ``leave=True`` keeps one bar per epoch,
  so every (short) epoch ends with a newline in the log file.

The synthetic dataset sleeps ``--sample-seconds`` per batch (a stand-in for data loading), so a
step takes a predictable wall time on any CPU. Run it under ``examples/lightning/train.sbatch``.
"""

from __future__ import annotations

import argparse
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint, TQDMProgressBar
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    """``n`` samples of y = x·w + noise (fixed seed), ``delay_s`` seconds per sample fetched."""

    def __init__(self, n: int, dim: int, delay_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        w = torch.randn(dim, 1, generator=g)
        self.y = self.x @ w + 0.01 * torch.randn(n, 1, generator=g)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


class Regressor(pl.LightningModule):
    def __init__(self, dim: int = 16, hidden: int = 16) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt-dir", required=True, help="ModelCheckpoint dirpath and the Trainer's default_root_dir")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--save-every", type=int, default=10, help="ModelCheckpoint(every_n_train_steps=…)")
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--batches-per-epoch", type=int, default=5)
    ap.add_argument("--sample-seconds", type=float, default=0.05, help="data-loading delay per sample")
    args = ap.parse_args(argv)

    pl.seed_everything(0)
    data = Synthetic(args.batch_size * args.batches_per_epoch, 16, args.sample_seconds)
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=0)
    ckpt = ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.save_every, save_last=True, save_top_k=-1)
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, num_nodes=args.nodes, strategy="ddp",
        max_steps=args.max_steps, default_root_dir=args.ckpt_dir,
        callbacks=[ckpt, TQDMProgressBar(leave=True)],
        logger=False, log_every_n_steps=1, enable_model_summary=False,
    )
    trainer.fit(Regressor(), loader, ckpt_path="last")


if __name__ == "__main__":
    main()
