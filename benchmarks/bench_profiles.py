"""Throughput of the training-progress extractor (``revive.profiles``) over a mixed job log.

Builds ~200k lines mixing every built-in framework's progress/checkpoint lines with the noise a
real multi-rank log carries (NCCL INFO, warnings, tracebacks, srun/rank prefixes, ANSI colours,
tqdm ``\\r`` redraws), then times ``summarize(lines)`` (prefilter, classify, summary) end to end.
Prints:

    BENCH profiles lines_per_s=<x> lines=<n> events=<e> seconds=<s>

Usage: .venv/bin/python benchmarks/bench_profiles.py [--lines 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revive.profiles import ProgressExtractor, summarize  # noqa: E402

NOISE = [
    "node{n}:4242:4300 [{r}] NCCL INFO Channel 0{r}/0 : 0[0] -> 1[1] via P2P/IPC",
    "[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29500 (errno: 22 - Invalid argument).",
    "[rank{r}]:[W1129 10:10:00.000000 ProcessGroupNCCL.cpp:4115] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS is the default now",
    "  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1736, in _wrapped_call_impl",
    "{r}: /usr/lib/python3/dist-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 16 worker processes",
    "[2026-01-01 10:00:00,123] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step.",
    "wandb: Syncing run lemon-bird-304",
    "{r}: building GPT model ...",
]


def progress_line(rnd: random.Random, it: int, r: int) -> str:
    k = it % 9
    if k == 0:
        return (f"{r}:  [2026-11-30 10:{it // 60 % 60:02d}:{it % 60:02d}.000000] iteration {it:8d}/  500000 | "
                f"consumed samples: {it * 512:12d} | elapsed time per iteration (ms): {900 + rnd.random() * 50:.1f} | "
                f"learning rate: 3.000000E-04 | global batch size:   512 | lm loss: {2 + rnd.random():.6E} | "
                f"loss scale: 1.0 | grad norm: 0.412 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    if k == 1:
        return (f"[rank{r}]:[titan] 2026-11-30 10:00:{it % 60:02d},051 - root - INFO - \x1b[31mstep: {it}  \x1b[32mloss: "
                f" {2 + rnd.random():.5f}  \x1b[33mgrad_norm:  0.5926  memory:  9.46GiB(64.99%)  \x1b[34mtps: 7,094  "
                f"\x1b[36mtflops: 0.51  \x1b[35mmfu: 0.16%\x1b[39m")
    if k == 2:
        return "\r".join(f" {n % 100:2d}%|█▎        | {n}/500000 [57:18<6:03:11,  1.51s/it]" for n in range(it, it + 6))
    if k == 3:
        return f"{{'loss': {2 + rnd.random():.4f}, 'grad_norm': 0.41, 'learning_rate': 4.5e-05, 'epoch': {it / 1e4:.2f}}}"
    if k == 4:
        return f"[2026-11-30 10:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] step={it}, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]"
    if k == 5:
        return (f"I1130 10:00:{it % 60:02d}.000000 140 metric_logger.py:226] completed step: {it}, seconds: 5.667, "
                f"TFLOP/s/device: 134.924, Tokens/s/device: 8672.758, total_weights: 196608, loss: 10.374")
    if k == 6:
        return (f"Training epoch 0, iteration {it}/999999 | lr: 0.0003 | consumed_samples: {it * 32} | "
                f"global_batch_size: 32 | global_step: {it} | reduced_train_loss: 2.05 | train_step_timing in s: 1.5")
    if k == 7:
        return (f"Epoch 3:  45%|████▌     | {it % 1000}/1000 [00:10<00:12, 43.21it/s, v_num=7, train_loss=0.123]")
    return (f"2026-11-29T15:04:{it % 60:02d}.{r:03d}+00:00 [rank {r} host node{r // 4}] iteration {it}/500000 | "
            f"loss {rnd.random():.4f} | compute_ms 12.1 | step_time_ms 25.3")


def generate(n_lines: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    lines: list[str] = []
    it = 0
    while len(lines) < n_lines:
        it += 1
        r = it % 8
        lines.append(progress_line(rnd, it, r))
        for _ in range(rnd.randrange(0, 3)):
            lines.append(rnd.choice(NOISE).format(n=r // 4, r=r))
        if it % 500 == 0:
            lines.append(f"0: [2026-11-30 10:00:00.000000] saving checkpoint at iteration {it:7d} to /ckpt in torch_dist format")
            lines.append(f"0:   [2026-11-30 10:00:09.000000] successfully saved checkpoint from iteration {it:7d} to /ckpt "
                         "[ t 1/1, gtp_remat 1/1, p 1/1 ]")
        if it % 5000 == 0:
            lines.append(f"=== attempt restart={it // 5000} 2026-11-30T10:00:00.000+00:00")
    return lines[:n_lines]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    lines = generate(args.lines)
    ex = ProgressExtractor()
    best = float("inf")
    summary = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        summary = summarize(lines, ex)
        best = min(best, time.perf_counter() - t0)
    assert summary is not None and summary.matched
    events = sum(summary.event_counts.values())
    print(f"BENCH profiles lines_per_s={len(lines) / best:.0f} lines={len(lines)} events={events} "
          f"seconds={best:.3f} profiles={len(summary.profiles)}")


if __name__ == "__main__":
    main()
