"""PyTorch SymmetricMemory's one-shot and two-shot all-reduce, fp32, on the ranks of one GPU (the same-GPU
peer of bench/gpu/bench_peer_allreduce; docs/PERFORMANCE.md). Under torchrun with MPS started:

    TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        torchrun --nproc-per-node=2 bench/torch/bench_symm_mem.py --max-bytes 64M

Rank 0 prints bytes and microseconds per call (median of --reps batches of --iters calls), eager and inside
a CUDA graph, for one_shot_all_reduce and two_shot_all_reduce_, and the two-shot of an ordinary tensor
(two_shot_copied_us: the tensor copied into the symmetric buffer, reduced in place there, copied back; what a
caller whose tensor is not allocated in the buffer pays, and what ringguard's all-reduce of any tensor does).
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def time_us(fn, iters: int, reps: int) -> float:
    out = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(iters)
        b.record()
        b.synchronize()
        out.append(1000.0 * a.elapsed_time(b) / iters)
    return sorted(out)[len(out) // 2]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", default="1K")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.cuda.set_device(0)
    rank, world = dist.get_rank(), dist.get_world_size()
    max_bytes = parse_size(args.max_bytes)
    buf = symm_mem.empty(max_bytes // 4, device="cuda", dtype=torch.float32)
    handle = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    assert handle is not None
    name = dist.group.WORLD.group_name
    if rank == 0:
        print(f"# torch {torch.__version__} SymmetricMemory, {world} ranks on one GPU, fp32, us per call")
        print(f"{'bytes':>12} {'one_shot_us':>12} {'one_shot_graph_us':>18} {'two_shot_us':>12} {'two_shot_copied_us':>19}")
    nbytes = parse_size(args.min_bytes)
    stream = torch.cuda.Stream()
    while nbytes <= max_bytes:
        n = nbytes // 4
        x = buf[:n]
        x.fill_(1.0)
        user = torch.ones(n, device="cuda", dtype=torch.float32)  # an ordinary tensor, not in the buffer
        iters = args.iters if nbytes < (16 << 20) else max(1, args.iters // 10)

        def one_shot(k):
            for _ in range(k):
                torch.ops.symm_mem.one_shot_all_reduce(x, "sum", name)

        def two_shot(k):
            for _ in range(k):
                torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", name)

        def two_shot_copied(k):
            for _ in range(k):
                x.copy_(user)
                torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", name)
                user.copy_(x)

        one_shot(3)
        one = time_us(one_shot, iters, args.reps)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            one_shot(1)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, stream=stream):
                one_shot(iters)
        one_graph = time_us(lambda k: graph.replay(), iters, args.reps)
        try:
            two_shot(1)
            two = time_us(two_shot, iters, args.reps)
            two_shot_copied(1)
            copied = time_us(two_shot_copied, iters, args.reps)
        except RuntimeError:  # not every size/world is supported by the two-shot kernel
            two = copied = float("nan")
        if rank == 0:
            print(f"{nbytes:>12} {one:>12.2f} {one_graph:>18.2f} {two:>12.2f} {copied:>19.2f}", flush=True)
        nbytes *= 4
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES", "1")
    main()
