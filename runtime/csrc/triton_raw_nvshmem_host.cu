// Host-side entry points of the triton_raw_ext NVSHMEM runtime, loaded from Python with ctypes.
//
// Why this file exists: several NVSHMEM host calls and all of its attribute initialisers are
// `static inline` in the headers, so Python cannot reach them through libnvshmem_host.so.3 alone.
// Every function here is extern "C", takes plain C types, returns 0 on success (or the value asked
// for), never exits the process and never prints. Only host code: no -rdc, no libnvshmem_device.a.
// Initialisation goes through the exported nvshmemx_hostlib_init_attr (the header-inline
// nvshmemx_init_attr would pull in the device library); Triton modules get their device state
// from nvshmemx_cumodule_init.

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
#include <string.h>

// The unique id must outlive nvshmemx_hostlib_init_attr, which keeps a pointer to it in `attr`.
static nvshmemx_uniqueid_t g_unique_id;

// Makes `device` current (the caller may be any thread) and waits for all work queued on it.
static cudaError_t wait_for_device(int device) {
    cudaError_t err = cudaSetDevice(device);
    return err == cudaSuccess ? cudaDeviceSynchronize() : err;
}

extern "C" {

// Bump when a signature below changes; Python refuses a library with another value.
int trx_abi_version(void) { return 2; }

// The NVSHMEM version of the headers this file was compiled against.
void trx_header_version(int *major, int *minor, int *patch) {
    *major = NVSHMEM_VENDOR_MAJOR_VERSION;
    *minor = NVSHMEM_VENDOR_MINOR_VERSION;
    *patch = NVSHMEM_VENDOR_PATCH_VERSION;
}

// The NVSHMEM version of the host library this process actually bound to. Safe before init.
void trx_host_version(int *major, int *minor, int *patch) {
    nvshmemx_vendor_get_version_info(major, minor, patch);
}

// The file of the host library this process bound to ("" if unknown). Safe before init.
const char *trx_host_library_path(void) {
    Dl_info info;
    if (dladdr((void *)&nvshmem_malloc, &info) == 0 || info.dli_fname == NULL) return "";
    return info.dli_fname;
}

// nvshmemx_init_status(): 0 = not initialised, >= 2 = initialised (nvshmemx_init_status_t).
int trx_init_status(void) { return nvshmemx_init_status(); }

int trx_unique_id_size(void) { return (int)sizeof(nvshmemx_uniqueid_t); }

// Writes a fresh unique id (trx_unique_id_size() bytes) to `out`.
int trx_get_unique_id(void *out) {
    nvshmemx_uniqueid_t id = NVSHMEMX_UNIQUEID_INITIALIZER;
    int status = nvshmemx_get_uniqueid(&id);
    if (status == 0) memcpy(out, &id, sizeof(id));
    return status;
}

// Makes `device` current and creates its primary context (NVSHMEM binds to the current context).
// Returns a cudaError_t.
int trx_set_device(int device) {
    cudaError_t err = cudaSetDevice(device);
    if (err == cudaSuccess) err = cudaFree(0);
    return (int)err;
}

// Collective: every PE calls it with the same id bytes. Returns NVSHMEM's status.
int trx_init_with_unique_id(int rank, int nranks, const void *id) {
    memcpy(&g_unique_id, id, sizeof(g_unique_id));
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    int status = nvshmemx_set_attr_uniqueid_args(rank, nranks, &g_unique_id, &attr);
    if (status != 0) return status;
    return nvshmemx_hostlib_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr);
}

// Collective teardown of what trx_init_with_unique_id set up; `device` as in trx_free, waited for
// first for the reason given at trx_malloc.
void trx_finalize(int device) {
    wait_for_device(device);
    nvshmemx_hostlib_finalize();
}

int trx_my_pe(void) { return nvshmem_my_pe(); }
int trx_n_pes(void) { return nvshmem_n_pes(); }

// Collective. Stores the allocation (NULL when nvshmem_malloc fails) in *out and returns the
// cudaError_t of waiting for `device`; on an error nothing is allocated.
//
// Waits for `device` first. nvshmem_malloc ends with a barrier of the world team, run on NVSHMEM's
// internal stream; a barrier the caller queued on its own stream (nvshmemx_barrier_all_on_stream,
// e.g. the one runtime.zeros() leaves behind) may still be running then. Two barriers of one team
// running at once on a PE share the team's sync counter, which the barrier kernels advance with a
// plain read-modify-write: one advance can be lost, after which this PE's barriers pair with the
// peers' next ones and a later barrier never completes (seen with one PE per GPU; every PE on one
// GPU in NVSHMEM's limited-MPG mode uses a host barrier instead). Waiting serialises the two.
int trx_malloc(size_t bytes, int device, void **out) {
    *out = NULL;
    cudaError_t err = wait_for_device(device);
    if (err == cudaSuccess) *out = nvshmem_malloc(bytes);
    return (int)err;
}

// Collective. Makes `device` current (the caller may be any thread) and waits for it first so that
// no queued kernel still uses the memory, and no barrier of the caller's streams overlaps
// nvshmem_free's own (see trx_malloc). Returns the cudaError_t of that wait; frees either way.
int trx_free(void *ptr, int device) {
    cudaError_t err = wait_for_device(device);
    nvshmem_free(ptr);
    return (int)err;
}

// Local address of `pe`'s copy of symmetric `ptr`, or NULL where load/store cannot reach it.
void *trx_ptr(const void *ptr, int pe) { return nvshmem_ptr(ptr, pe); }

void trx_barrier_all_on_stream(void *stream) { nvshmemx_barrier_all_on_stream((cudaStream_t)stream); }
void trx_quiet_on_stream(void *stream) { nvshmemx_quiet_on_stream((cudaStream_t)stream); }

// Publishes NVSHMEM's device state into a loaded CUmodule. Returns NVSHMEM's status.
int trx_cumodule_init(void *module) { return nvshmemx_cumodule_init((CUmodule)module); }

}  // extern "C"
