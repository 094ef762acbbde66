#!/usr/bin/env python3
"""A plain PyTorch training loop on one GPU, as a user writes one: no Fulcrum annotations, only
the NVTX ranges people add by hand (torch.cuda.nvtx) around each step, micro-batch, forward,
backward and optimizer step. `scripts/gpu-checks foreign` runs it under `fulcrum capture`
to check that the collector traces a program that is not fulcrum-train: PyTorch's own cuBLAS,
cuDNN and elementwise kernels, its copies, and the hand-made ranges on the host lane
(tests/data/README.md, gpu-torch-train.fulcrum).

  python3 tests/data/torch/cuda_train.py [--steps 4] [--microbatches 2]
"""
import argparse

import torch
import torch.nn.functional as F
from torch.cuda import nvtx


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = "cuda"
    hidden, heads, layers, tokens, vocab = 512, 8, 4, 1024, 8192
    embedding = torch.nn.Embedding(vocab, hidden).to(device)
    blocks = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, dropout=0.1,
                                         batch_first=True, norm_first=True)
        for _ in range(layers)).to(device)
    head = torch.nn.Linear(hidden, vocab, bias=False).to(device)
    parameters = list(embedding.parameters()) + list(blocks.parameters()) + \
        list(head.parameters())
    optimizer = torch.optim.AdamW(parameters, lr=1e-4)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens, device=device)
    for step in range(args.steps):
        nvtx.range_push(f"train_step {step}")
        for micro in range(args.microbatches):
            nvtx.range_push(f"microbatch {micro}")
            # The batch comes from the host, as a data loader's does: a copy up.
            batch = torch.randint(0, vocab, (2, tokens + 1)).pin_memory().to(device,
                                                                             non_blocking=True)
            nvtx.range_push("forward")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                x = embedding(batch[:, :tokens])
                for block in blocks:
                    x = block(x, src_mask=mask, is_causal=True)
                loss = F.cross_entropy(head(x).float().flatten(0, 1),
                                       batch[:, 1:].flatten())
            nvtx.range_pop()
            nvtx.range_push("backward")
            (loss / args.microbatches).backward()
            nvtx.range_pop()
            nvtx.range_pop()
        nvtx.range_push("optimizer.step")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        nvtx.range_pop()
        print(f"step {step}: loss {loss.item():.4f}", flush=True)  # a sync and a copy down
        nvtx.range_pop()


if __name__ == "__main__":
    main()
