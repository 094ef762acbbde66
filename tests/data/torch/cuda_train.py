#!/usr/bin/env python3
"""A plain PyTorch training loop on one GPU, as a user writes one: no Fulcrum annotations, only
the NVTX ranges people add by hand (torch.cuda.nvtx) around each step, micro-batch, forward,
backward and optimizer step. `scripts/gpu-checks foreign` runs it under `fulcrum capture`
to check that the collector traces a program that is not fulcrum-train: PyTorch's own cuBLAS,
cuDNN and elementwise kernels, its copies, and the hand-made ranges on the host lane
(tests/data/README.md, gpu-torch-train.fulcrum).

With --profile FILE the same loop runs under PyTorch's own profiler (Kineto: CPU and CUDA
activities, one profiler step a training step) and writes its Chrome trace there: the same
program traced by PyTorch, for `fulcrum import` (tests/data/torch/cuda-train-kineto.json.gz).

With --timing it prints the mean wall time of its steps after the first five (each step ends
with the loss read back, so the GPU's work is in it): scripts/gpu-checks overhead-torch runs
it plain, under fulcrum capture and under PyTorch's profiler, to compare what each costs.

  python3 tests/data/torch/cuda_train.py [--steps 4] [--microbatches 2] [--profile FILE]
                                         [--timing]
"""
import contextlib
import statistics
import time
import argparse

import torch
import torch.nn.functional as F
from torch.cuda import nvtx


class Model:
    """An embedding, `layers` pre-norm transformer layers and an untied head, with AdamW."""

    def __init__(self, hidden=512, heads=8, layers=4, tokens=1024, vocab=8192, device="cuda"):
        self.tokens, self.vocab, self.device = tokens, vocab, device
        self.embedding = torch.nn.Embedding(vocab, hidden).to(device)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1,
                                             batch_first=True, norm_first=True)
            for _ in range(layers)).to(device)
        self.head = torch.nn.Linear(hidden, vocab, bias=False).to(device)
        parameters = list(self.embedding.parameters()) + list(self.blocks.parameters()) + \
            list(self.head.parameters())
        self.optimizer = torch.optim.AdamW(parameters, lr=1e-4)
        self.mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens, device=device)

    def train_step(self, step, microbatches):
        nvtx.range_push(f"train_step {step}")
        for micro in range(microbatches):
            nvtx.range_push(f"microbatch {micro}")
            # The batch comes from the host, as a data loader's does: a copy up.
            batch = torch.randint(0, self.vocab, (2, self.tokens + 1)).pin_memory().to(
                self.device, non_blocking=True)
            nvtx.range_push("forward")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                x = self.embedding(batch[:, :self.tokens])
                for block in self.blocks:
                    x = block(x, src_mask=self.mask, is_causal=True)
                loss = F.cross_entropy(self.head(x).float().flatten(0, 1),
                                       batch[:, 1:].flatten())
            nvtx.range_pop()
            nvtx.range_push("backward")
            (loss / microbatches).backward()
            nvtx.range_pop()
            nvtx.range_pop()
        nvtx.range_push("optimizer.step")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        nvtx.range_pop()
        loss_value = loss.item()  # a sync and a copy down
        if step < 4:
            print(f"step {step}: loss {loss_value:.4f}", flush=True)
        nvtx.range_pop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--profile", help="write a PyTorch profiler trace of the steps here")
    parser.add_argument("--timing", action="store_true",
                        help="print the mean step time after the first five steps")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Model()
    profiler = contextlib.nullcontext()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    seconds = []
    with profiler as prof:
        for step in range(args.steps):
            start = time.perf_counter()
            model.train_step(step, args.microbatches)
            seconds.append(time.perf_counter() - start)
            if prof is not None:
                prof.step()
    if args.timing and len(seconds) > 5:
        print(f"timing: {len(seconds) - 5} steps, mean {1e3 * statistics.mean(seconds[5:]):.3f} ms",
              flush=True)
    if args.profile:
        prof.export_chrome_trace(args.profile)


if __name__ == "__main__":
    main()
