// Raw CUDA + NVSHMEM device function of tutorial 2's SM push path (push.py): the persistent GEMM's
// programs push this rank's A shard into every peer's workspace, then raise the peers' ready flags,
// with the epoch read from and advanced in device memory so that CUDA graph replays are new calls.
//
// State words (int32, this rank's device memory, layout of push.py's STATE_*): [0] epoch of the last
// completed call, [1] tickets claimed, [2] warps that finished claiming, [3 + j] chunks pushed to the
// j-th destination (push order rank-1, rank-2, ...). Words 1.. are zero between calls.
#include <triton_raw/nvshmem_device.h>

#define AG_PUSH_CHUNK_BYTES 16384  // push.py's PUSH_CHUNK_BYTES
#define AG_STATE_EPOCH 0
#define AG_STATE_TICKETS 1
#define AG_STATE_EXITED 2
#define AG_STATE_DONE 3

// Every thread of the program calls it once, before its GEMM tiles, with the same arguments; returns
// this call's epoch (state[0] + 1), which the caller waits for on the peers' flags and whose parity
// picks the workspace buffer.
//
// Each warp claims chunks of the push (ticket t: destination j = t / chunks, chunk t % chunks) until
// none is left, copying each with 16-byte vectors through nvshmem_ptr (NVLink, or the same GPU in
// shared-GPU mode) into slot `rank` of the destination's buffer epoch % 2. After a chunk, lane 0
// fences at system scope and counts it for its destination; the warp that counts the last chunk of a
// destination fences again and raises that destination's ready[rank] to the epoch (st.release.sys),
// so the consumer's ld.acquire.sys of the flag sees every chunk. Claiming needs no other program to
// run: the shard is pushed as soon as any warp of the kernel runs. The last warp to stop claiming (all
// have read the epoch) resets the counters and stores the epoch: the next call (stream order) reads it.
extern "C" __device__ int ag_push_shard(const void *a, void *workspace_sym, int *ready_sym, int *state, int rank,
                                        int world, long long shard_bytes) {
  volatile int *words = state;
  const int epoch = words[AG_STATE_EPOCH] + 1;
  const unsigned lane = threadIdx.x & 31u;
  const long long chunks = (shard_bytes + AG_PUSH_CHUNK_BYTES - 1) / AG_PUSH_CHUNK_BYTES;
  const long long tickets = chunks * (world - 1);
  const long long slot = ((long long)(epoch & 1) * world + rank) * shard_bytes;
  for (;;) {
    unsigned ticket = 0;
    if (lane == 0) ticket = atomicAdd(reinterpret_cast<unsigned *>(state + AG_STATE_TICKETS), 1u);
    ticket = __shfl_sync(0xffffffffu, ticket, 0);
    if ((long long)ticket >= tickets) break;
    const int j = (int)(ticket / chunks);
    const long long first = (long long)(ticket % chunks) * AG_PUSH_CHUNK_BYTES;
    const long long bytes = min((long long)AG_PUSH_CHUNK_BYTES, shard_bytes - first);
    const int dst = (rank - 1 - j + world) % world;
    const int4 *src = reinterpret_cast<const int4 *>(static_cast<const char *>(a) + first);
    int4 *out = reinterpret_cast<int4 *>(static_cast<char *>(nvshmem_ptr(workspace_sym, dst)) + slot + first);
    for (long long v = lane; v < bytes / 16; v += 32) out[v] = __ldg(src + v);
    __syncwarp();
    if (lane == 0) {
      __threadfence_system();
      if (atomicAdd(state + AG_STATE_DONE + j, 1) == chunks - 1) {
        __threadfence_system();
        int *flag = static_cast<int *>(nvshmem_ptr(ready_sym + rank, dst));
        asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(flag), "r"(epoch) : "memory");
      }
    }
  }
  if (lane == 0) {
    const unsigned warps = gridDim.x * gridDim.y * gridDim.z * ((blockDim.x * blockDim.y * blockDim.z) / 32u);
    if (atomicAdd(reinterpret_cast<unsigned *>(state + AG_STATE_EXITED), 1u) == warps - 1) {
      for (int w = AG_STATE_TICKETS; w < AG_STATE_DONE + world - 1; ++w) words[w] = 0;
      words[AG_STATE_EPOCH] = epoch;
    }
  }
  return epoch;
}
