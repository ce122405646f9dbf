"""Triton kernels of tutorial 2: the persistent AllGather-GEMM consumer and the all-gather wait.

``ag_gemm_kernel`` computes ``C = A_gathered @ B`` for ``A_gathered`` [world * m_per_rank, K]
(row block ``r`` is rank ``r``'s shard), ``B`` [K, N], ``C`` [world * m_per_rank, N], all
row-major and read/written through host-built TMA descriptors. It is persistent (one program per
SM walking tiles with stride ``NUM_SMS``) and visits tiles in the order of
:func:`schedule.tile_coords`: every tile of the local shard, then ranks ``rank+1, rank+2, ...``.

The walk has two loops. The first covers the local shard and reads it from ``local_desc`` (the
caller's ``a``, ready in stream order: no wait, no copy into the workspace). The second continues
the same strided walk over the peers' shards in ``gathered_desc`` (the workspace the producer fills);
before a tile loads rows of source rank ``src`` it calls the raw CUDA function ``ag_wait_ready`` on
``ready[src]`` (``WAIT=True``), which returns once the producer has raised that flag to ``epoch``, or
traps after ``wait_ms`` milliseconds (``triton_raw_ext.knobs.wait_timeout_ms()``) naming the ranks.
The returned 0 is added to the A row offset, so every TMA load of the tile depends on the wait in
the IR and Triton's pipeliner keeps it after the wait. ``WAIT=False`` is the same GEMM without the
checks (the "GEMM alone" baseline, on an already gathered A).

``ag_gemm_sm_push_kernel`` is the same walk behind the SM push (``push.py``): its programs push the
shard and raise the peers' flags first (raw CUDA ``ag_push_shard``), and the epoch and buffer come
from device memory, so the launch can be captured in a CUDA graph.

Contract: ``m_per_rank % BLOCK_M == 0`` (a tile never spans two ranks); K and N may be ragged
(TMA zero-fills loads and clips stores).
"""

from __future__ import annotations

import triton
import triton.language as tl

import triton_raw_ext.language as raw
from triton_raw_ext import dialect


@dialect(name="cuda", file="ag_gemm-device.cu")
def ag_wait_ready(flag, epoch, rank, src, timeout_ms): ...


@dialect(name="cuda", file="ag_push-device.cu", library="nvshmem")
def ag_push_shard(a, workspace_sym, ready_sym, state, rank, world, shard_bytes): ...


@triton.jit
def _tile_coords(tile, rank, world, m_tiles_per_rank, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n, src) of ``tile``; the Triton twin of ``schedule.tile_coords``."""
    tiles_per_shard = m_tiles_per_rank * num_pid_n
    step = tile // tiles_per_shard
    in_shard = tile % tiles_per_shard
    group_size = GROUP_M * num_pid_n
    first_m = (in_shard // group_size) * GROUP_M
    rows = tl.minimum(m_tiles_per_rank - first_m, GROUP_M)
    in_group = in_shard % group_size
    pid_n = in_group // rows
    src = (rank + step) % world
    pid_m = src * m_tiles_per_rank + first_m + in_group % rows
    return pid_m, pid_n, src


@triton.jit
def _gemm_tile(a_desc, offs_am, b_desc, c_desc, offs_m, offs_n, k_tiles, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr):
    """One output tile: A rows from ``offs_am`` of ``a_desc``, C rows from ``offs_m``."""
    dtype: tl.constexpr = c_desc.dtype
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(k_tiles):
        offs_k = ki * BLOCK_K
        a = a_desc.load([offs_am, offs_k])
        b = b_desc.load([offs_k, offs_n])
        acc = tl.dot(a, b, acc)
    if EPILOGUE_SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(halves)
        c_desc.store([offs_m, offs_n], acc0.to(dtype))
        c_desc.store([offs_m, offs_n + BLOCK_N // 2], acc1.to(dtype))
    else:
        c_desc.store([offs_m, offs_n], acc.to(dtype))


@triton.jit
def _gemm_walk(local_desc, gathered_desc, buffer_rows, b_desc, c_desc, ready_ptr, epoch, rank, world, m_per_rank,
               N, K, wait_ms, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WAIT: tl.constexpr, FLATTEN: tl.constexpr,
               EPILOGUE_SUBTILE: tl.constexpr):  # fmt: skip
    """This program's tiles: the local ones from ``local_desc``, then the peers' from ``gathered_desc``
    at ``buffer_rows`` + their rows, each after its wait for ``ready[src] >= epoch`` (``WAIT``)."""
    m_tiles_per_rank = m_per_rank // BLOCK_M
    num_pid_n = tl.cdiv(N, BLOCK_N)
    local_tiles = m_tiles_per_rank * num_pid_n
    num_tiles = local_tiles * world
    k_tiles = tl.cdiv(K, BLOCK_K)
    pid = tl.program_id(0)
    for tile in tl.range(pid, local_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n, _ = _tile_coords(tile, rank, world, m_tiles_per_rank, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        _gemm_tile(local_desc, offs_m - rank * m_per_rank, b_desc, c_desc, offs_m, pid_n * BLOCK_N, k_tiles,
                   BLOCK_M, BLOCK_N, BLOCK_K, EPILOGUE_SUBTILE)
    # The first tile at or after the local ones on this program's stride: the same walk as one loop.
    # (pid < NUM_SMS and local_tiles >= 1, so the dividend is never negative.)
    first_remote = pid + (local_tiles - pid + NUM_SMS - 1) // NUM_SMS * NUM_SMS
    for tile in tl.range(first_remote, num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n, src = _tile_coords(tile, rank, world, m_tiles_per_rank, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_am = buffer_rows + offs_m
        if WAIT:
            offs_am += raw.call(ag_wait_ready, [ready_ptr + src, epoch, rank, src, wait_ms])
        _gemm_tile(gathered_desc, offs_am, b_desc, c_desc, offs_m, pid_n * BLOCK_N, k_tiles, BLOCK_M, BLOCK_N,
                   BLOCK_K, EPILOGUE_SUBTILE)


@triton.jit(do_not_specialize=["epoch", "rank", "wait_ms"])
def ag_gemm_kernel(
    local_desc, gathered_desc, b_desc, c_desc, ready_ptr, epoch, rank, world, m_per_rank, N, K, wait_ms,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, WAIT: tl.constexpr, FLATTEN: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
):  # fmt: skip
    _gemm_walk(local_desc, gathered_desc, 0, b_desc, c_desc, ready_ptr, epoch, rank, world, m_per_rank, N, K,
               wait_ms, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS, WAIT, FLATTEN, EPILOGUE_SUBTILE)


@triton.jit(do_not_specialize=["rank", "wait_ms"])
def ag_gemm_sm_push_kernel(
    local_desc, gathered_desc, b_desc, c_desc, a_ptr, workspace_ptr, ready_ptr, state_ptr, rank, world, m_per_rank,
    N, K, wait_ms, shard_bytes, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, EPILOGUE_SUBTILE: tl.constexpr,
):  # fmt: skip
    """The SM push path (push.py): every program first takes its part of pushing ``a_ptr`` (this rank's
    shard, ``shard_bytes``) into the peers' symmetric ``workspace_ptr`` and raising their ``ready_ptr``
    flags (raw ``ag_push_shard``, which returns the call's epoch from ``state_ptr`` in device memory),
    then runs the walk of ``ag_gemm_kernel`` with that epoch, reading buffer ``epoch % 2`` of
    ``gathered_desc`` (both buffers, [2 * world * m_per_rank, K])."""
    epoch = raw.call(ag_push_shard, [a_ptr, workspace_ptr, ready_ptr, state_ptr, rank, world, shard_bytes])
    buffer_rows = (epoch % 2) * world * m_per_rank
    _gemm_walk(local_desc, gathered_desc, buffer_rows, b_desc, c_desc, ready_ptr, epoch, rank, world, m_per_rank,
               N, K, wait_ms, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS, True, FLATTEN, EPILOGUE_SUBTILE)


@triton.jit(do_not_specialize=["epoch", "rank", "wait_ms"])
def ag_wait_all_kernel(ready_ptr, epoch, rank, world, wait_ms):
    """One program: returns once every peer's ``ready`` flag has reached ``epoch`` (``all_gather()``)."""
    for step in range(1, world):
        src = (rank + step) % world
        raw.call(ag_wait_ready, [ready_ptr + src, epoch, rank, src, wait_ms])
