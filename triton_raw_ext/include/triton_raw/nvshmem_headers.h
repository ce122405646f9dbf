/* triton-raw-ext: NVSHMEM's own headers as a raw `.cu` sees them; the plugin precompiles this file.
 *
 * A `.cu` registered with library="nvshmem" that includes <nvshmem.h> or <nvshmemx.h> is compiled
 * with this header precompiled in front of it (the includes in the source then find it done).
 * NVSHMEM's headers define its whole device API inline; here every function they define through
 * NVSHMEM's linkage macros becomes an `extern inline` GNU-inline, noinline function, which clang
 * never emits: the source's calls stay declarations, resolved when the plugin links NVSHMEM's
 * device bitcode into the kernel. Built with -fpch-codegen, so that NVSHMEM's out-of-line
 * definitions (explicit template instantiations) are left to the precompiled header's own object,
 * which is never built, and not emitted into the source's bitcode either.
 */
#ifndef TRITON_RAW_NVSHMEM_HEADERS_H
#define TRITON_RAW_NVSHMEM_HEADERS_H

/* NVSHMEM's device code calls assert() without including it (nvcc's headers bring it). */
#include <assert.h>

/* The host API is then declared __host__ only: as __host__ __device__ (NVSHMEM's default under
   __CUDA_ARCH__) it clashes in clang with the __device__ definitions of the same names. */
#define NVSHMEMI_HOST_ONLY 1

/* Raw functions are relocatable device code (clang's -fgpu-rdc does not define this): NVSHMEM then
   declares its device state `extern __constant__`; its branch for clang adds an address space that
   clang rejects on a __constant__ variable. Undefined again below, for the source. */
#ifndef __CUDACC_RDC__
#define __CUDACC_RDC__ 1
#define TRITON_RAW_DEFINED_CUDACC_RDC
#endif

/* NVSHMEM's linkage macros, replaced before its headers use them. NVSHMEMI_STATIC is empty as in
   NVSHMEM's own clang build of its bitcode: the functions keep their C names, and the collectives
   its host headers declare `__device__` are not redeclared static. */
#include <device/nvshmem_device_macros.h>
#undef NVSHMEMI_STATIC
#undef NVSHMEMI_DEVICE_INLINE
#undef NVSHMEMI_DEVICE_ALWAYS_INLINE
#undef NVSHMEMI_DEVICE_ALWAYS_FORCE_INLINE
#define NVSHMEMI_STATIC
#define NVSHMEMI_DEVICE_INLINE extern inline __attribute__((gnu_inline, noinline))
#define NVSHMEMI_DEVICE_ALWAYS_INLINE NVSHMEMI_DEVICE_INLINE
#define NVSHMEMI_DEVICE_ALWAYS_FORCE_INLINE NVSHMEMI_DEVICE_INLINE

#include <nvshmem.h>
#include <nvshmemx.h>

#ifdef TRITON_RAW_DEFINED_CUDACC_RDC
#undef __CUDACC_RDC__
#undef TRITON_RAW_DEFINED_CUDACC_RDC
#endif

#endif
