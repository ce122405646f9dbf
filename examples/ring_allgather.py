"""A ring all-gather in one Triton kernel, with NVSHMEM calls from ``triton_raw_ext.nvshmem``.

Every PE owns ``chunk`` int32 values; afterwards every PE holds all of them, PE ``p``'s at
``gathered[p * chunk:(p + 1) * chunk]``. In ``n - 1`` steps, each PE forwards the chunk it has held
longest to the next PE with a put-with-signal (the signal of that chunk's slot is set to the
round's number) and waits for the previous PE's chunk to arrive in the same way. Round numbers only
grow, so signals are never reset; a barrier at the start of each round keeps a PE from writing into
a peer that is still forwarding the previous round.

Run from the repository root (one PE per GPU, or N PEs sharing GPU 0; start MPS first:
``nvidia-cuda-mps-control -d``)::

    torchrun --standalone --nproc-per-node=2 -m examples.ring_allgather
    TRITON_RAW_SHARED_GPU=1 torchrun --standalone --nproc-per-node=4 -m examples.ring_allgather

Every rank prints PASS or FAIL and exits 0 or 1.
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton

import triton_raw_ext.nvshmem as shm
from triton_raw_ext import preload, runtime


@triton.jit(do_not_specialize=["round_number"])  # one kernel for every round (Triton would specialise 1)
def ring_all_gather(gathered, signals, chunk, round_number):
    """``gathered``: symmetric int32 [n_pes * chunk], this PE's chunk already in its slot; ``signals``:
    symmetric uint64 [n_pes], one per slot. Launch with one program."""
    shm.barrier_all_block()  # every PE has finished the previous round
    me = shm.my_pe()
    n = shm.n_pes()
    right = (me + 1) % n
    for step in range(0, n - 1):
        send = (me - step + n) % n  # the chunk received in the previous step (our own at step 0)
        shm.putmem_signal_block(gathered + send * chunk, gathered + send * chunk, chunk * 4, signals + send,
                                round_number, shm.SIGNAL_SET, right)
        receive = (me - step - 1 + n) % n
        shm.signal_wait_until(signals + receive, shm.CMP_GE, round_number)


def chunk_of(pe: int, round_number: int, chunk: int) -> torch.Tensor:
    return torch.arange(chunk, device="cuda", dtype=torch.int32) + 1_000_000 * pe + 1000 * round_number


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunk", type=int, default=4096, help="int32 values per PE")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runtime.init()  # torchrun's environment: torch.distributed, then NVSHMEM
    me, n = runtime.my_pe(), runtime.n_pes()
    gathered = runtime.zeros((n * args.chunk,), torch.int32)
    signals = runtime.zeros((n,), torch.int64)  # uint64 signals; int64 is how torch holds them
    # Compile and load before any PE waits on another, then line the PEs up (triton_raw_ext.preload).
    preload(ring_all_gather, gathered, signals, args.chunk, 1, grid=(1,))
    runtime.host_barrier()
    ok = True
    for round_number in range(1, args.rounds + 1):
        gathered[me * args.chunk:(me + 1) * args.chunk] = chunk_of(me, round_number, args.chunk)
        ring_all_gather[(1,)](gathered, signals, args.chunk, round_number)
        torch.cuda.synchronize()
        expected = torch.cat([chunk_of(pe, round_number, args.chunk) for pe in range(n)])
        ok &= torch.equal(gathered, expected)
    runtime.barrier_all()
    torch.cuda.synchronize()
    print(f"PE {me} of {n}: ring all-gather of {args.chunk} int32 per PE, {args.rounds} rounds: "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    runtime.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
