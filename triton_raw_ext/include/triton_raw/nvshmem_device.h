/* triton-raw-ext: prototypes of NVSHMEM's public device API for raw CUDA functions.
 *
 * The light option for a `.cu` registered with @dialect(..., library="nvshmem"): no NVSHMEM header
 * is read. NVSHMEM's own <nvshmem.h> and <nvshmemx.h> work too (the plugin precompiles them once);
 * include one or the other. The functions are only declared here; the plugin links NVSHMEM's
 * device bitcode into the kernel after Triton has inlined your code.
 * Semantics are NVSHMEM's (see its documentation). Written for NVSHMEM 3.4 - 3.8.
 */
#ifndef TRITON_RAW_NVSHMEM_DEVICE_H
#define TRITON_RAW_NVSHMEM_DEVICE_H

#include <stddef.h>
#include <stdint.h>

/* Comparison operators (nvshmem_*_wait_until, nvshmem_signal_wait_until). */
enum { NVSHMEM_CMP_EQ = 0, NVSHMEM_CMP_NE, NVSHMEM_CMP_GT, NVSHMEM_CMP_LE, NVSHMEM_CMP_LT, NVSHMEM_CMP_GE };
/* Signal operators (put-with-signal, nvshmemx_signal_op). */
enum { NVSHMEM_SIGNAL_SET = 9, NVSHMEM_SIGNAL_ADD = 10 };

extern "C" {
/* Query. */
__device__ int nvshmem_my_pe(void);
__device__ int nvshmem_n_pes(void);
__device__ void *nvshmem_ptr(const void *ptr, int pe);

/* Single-element remote access. */
__device__ void nvshmem_int_p(int *dest, int value, int pe);
__device__ int nvshmem_int_g(const int *source, int pe);
__device__ void nvshmem_float_p(float *dest, float value, int pe);
__device__ float nvshmem_float_g(const float *source, int pe);
__device__ void nvshmem_longlong_p(long long *dest, long long value, int pe);
__device__ void nvshmem_uint64_p(uint64_t *dest, uint64_t value, int pe);

/* Contiguous transfers (thread, warp and block variants). */
__device__ void nvshmem_putmem(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmem_getmem(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmem_putmem_nbi(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmem_getmem_nbi(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_putmem_warp(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_getmem_warp(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_putmem_block(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_getmem_block(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_putmem_nbi_warp(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_putmem_nbi_block(void *dest, const void *source, size_t bytes, int pe);
__device__ void nvshmemx_getmem_nbi_block(void *dest, const void *source, size_t bytes, int pe);

/* Put with signal, signals. */
__device__ void nvshmem_putmem_signal(void *dest, const void *source, size_t bytes, uint64_t *sig_addr,
                                      uint64_t signal, int sig_op, int pe);
__device__ void nvshmem_putmem_signal_nbi(void *dest, const void *source, size_t bytes, uint64_t *sig_addr,
                                          uint64_t signal, int sig_op, int pe);
__device__ void nvshmemx_putmem_signal_warp(void *dest, const void *source, size_t bytes, uint64_t *sig_addr,
                                            uint64_t signal, int sig_op, int pe);
__device__ void nvshmemx_putmem_signal_block(void *dest, const void *source, size_t bytes, uint64_t *sig_addr,
                                             uint64_t signal, int sig_op, int pe);
__device__ void nvshmemx_putmem_signal_nbi_warp(void *dest, const void *source, size_t bytes,
                                                uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
__device__ void nvshmemx_putmem_signal_nbi_block(void *dest, const void *source, size_t bytes,
                                                 uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
__device__ void nvshmemx_signal_op(uint64_t *sig_addr, uint64_t signal, int sig_op, int pe);
__device__ uint64_t nvshmem_signal_fetch(uint64_t *sig_addr);
__device__ uint64_t nvshmem_signal_wait_until(uint64_t *sig_addr, int cmp, uint64_t cmp_value);
__device__ void nvshmem_int_wait_until(int *ivar, int cmp, int cmp_value);
__device__ void nvshmem_uint64_wait_until(uint64_t *ivar, int cmp, uint64_t cmp_value);

/* Atomics. */
__device__ int nvshmem_int_atomic_fetch_add(int *dest, int value, int pe);
__device__ void nvshmem_int_atomic_add(int *dest, int value, int pe);
__device__ uint64_t nvshmem_uint64_atomic_fetch_add(uint64_t *dest, uint64_t value, int pe);
__device__ void nvshmem_uint64_atomic_add(uint64_t *dest, uint64_t value, int pe);

/* Ordering and synchronisation. */
__device__ void nvshmem_fence(void);
__device__ void nvshmem_quiet(void);
__device__ void nvshmem_barrier_all(void);
__device__ void nvshmemx_barrier_all_warp(void);
__device__ void nvshmemx_barrier_all_block(void);
__device__ void nvshmem_sync_all(void);
__device__ void nvshmemx_sync_all_warp(void);
__device__ void nvshmemx_sync_all_block(void);
}

#endif /* TRITON_RAW_NVSHMEM_DEVICE_H */
