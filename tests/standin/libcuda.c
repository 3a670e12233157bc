/* tests/standin/libcuda.c — a stand-in libcuda.so.1 for machines without a
 * GPU: every entry point xent resolves, backed by host memory, so that the
 * runtime's own code (the memo, compiles, module loads, launches, the
 * context's locking) runs for real under ThreadSanitizer and in CI.
 *
 * It checks what a driver would refuse and no more: a module must be an ELF
 * image (a CUBIN), a function must be named in it, a launch must have a grid,
 * a block of 1..1024 threads and a parameter array. Kernels do not run;
 * launches are counted, per function and in all, and standin_counts() gives
 * the totals to tests (standin_programmatic() those launched as programmatic
 * dependents); standin_fail_next_launch() makes a launch fail, as a driver
 * refuses one. Device pointers are host pointers. */
#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_long n_launches, n_modules, n_allocs, n_frees, n_programmatic;

typedef struct standin_module {
    size_t size;
    unsigned char *image;
} standin_module;

typedef struct standin_function {
    standin_module *module;
    char name[64];
    atomic_long launches;
} standin_function;

/* The primary context is a fixed object; the current one is per thread. */
static char primary;
static _Thread_local CUcontext stack[16];
static _Thread_local int depth;

EXPORT void standin_counts(long *launches, long *modules, long *allocs, long *frees) {
    if (launches) *launches = atomic_load(&n_launches);
    if (modules) *modules = atomic_load(&n_modules);
    if (allocs) *allocs = atomic_load(&n_allocs);
    if (frees) *frees = atomic_load(&n_frees);
}

EXPORT long standin_programmatic(void) { return atomic_load(&n_programmatic); }

EXPORT CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) {
    *v = 12080; /* programmatic launches from 12030 */
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *n) {
    *n = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
/* A key of its own ("standin"), so no shipped tune cache ever answers for it. */
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    if (len < 1) return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "NVIDIA Standin", (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 0;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) {
    (void)d;
    *b = (size_t)141 << 30;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    (void)d;
    *c = (CUcontext)&primary;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    (void)d;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) {
    *c = depth ? stack[depth - 1] : NULL;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) {
    if (depth == 16) return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    if (!depth) return CUDA_ERROR_INVALID_CONTEXT;
    *c = stack[--depth];
    return CUDA_SUCCESS;
}

/* Calls that need a context find one current, as the driver's do. */
#define NEED_CONTEXT()                                                                                                 \
    do {                                                                                                               \
        if (!depth) return CUDA_ERROR_INVALID_CONTEXT;                                                                 \
    } while (0)

/* An ELF image's length from its header: the section headers end it. */
static size_t elf_size(const unsigned char *p) {
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    return (size_t)(shoff + (uint64_t)shentsize * shnum);
}

EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    NEED_CONTEXT();
    const unsigned char *p = image;
    if (!p ||
        memcmp(p,
               "\x7f"
               "ELF",
               4) ||
        p[4] != 2)
        return CUDA_ERROR_INVALID_IMAGE;
    size_t size = elf_size(p);
    if (size < 64 || size > (1u << 30)) return CUDA_ERROR_INVALID_IMAGE;
    standin_module *mod = calloc(1, sizeof *mod);
    if (!mod || !(mod->image = malloc(size))) {
        free(mod);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(mod->image, p, size);
    mod->size = size;
    atomic_fetch_add(&n_modules, 1);
    *m = (CUmodule)mod;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuModuleUnload(CUmodule m) {
    standin_module *mod = (standin_module *)m;
    if (!mod) return CUDA_ERROR_INVALID_HANDLE;
    free(mod->image);
    free(mod);
    return CUDA_SUCCESS;
}
/* The function's name must be in the image's string table. Functions are
 * not freed before exit (the driver frees them with the module; xent never
 * asks again after an unload). */
EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    standin_module *mod = (standin_module *)m;
    size_t len = strlen(name);
    if (!mod || len >= 64) return CUDA_ERROR_INVALID_HANDLE;
    if (!memmem(mod->image, mod->size, name, len + 1)) return CUDA_ERROR_NOT_FOUND;
    standin_function *fn = calloc(1, sizeof *fn);
    if (!fn) return CUDA_ERROR_OUT_OF_MEMORY;
    fn->module = mod;
    memcpy(fn->name, name, len + 1);
    *f = (CUfunction)fn;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    (void)a;
    return f && v >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem) {
    if (!f || block < 1 || block > 1024) return CUDA_ERROR_INVALID_VALUE;
    *n = smem > (100u << 10) ? 1 : 2048 / block > 8 ? 8 : 2048 / block;
    return CUDA_SUCCESS;
}
/* The next launch of one entry point fails, once: 1 cuLaunchKernel, 2 cuLaunchKernelEx, 0 none,
 * so that tests can check what the runtime reports of a launch the driver refused. */
static atomic_int fail_next;

EXPORT void standin_fail_next_launch(int entry) { atomic_store(&fail_next, entry); }

static int failing(int entry) {
    int want = entry;
    return atomic_compare_exchange_strong(&fail_next, &want, 0);
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, void **params) {
    NEED_CONTEXT();
    standin_function *fn = (standin_function *)f;
    if (!fn || !params || !gx || !gy || !gz || !bx || !by || !bz || (unsigned long)bx * by * bz > 1024 ||
        smem > (227u << 10))
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add(&fn->launches, 1);
    atomic_fetch_add(&n_launches, 1);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
    (void)s, (void)extra;
    if (failing(1)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    return launch(f, gx, gy, gz, bx, by, bz, smem, params);
}

/* As cuLaunchKernel, with the one attribute xent asks for: programmatic
 * stream serialization (a dependent launch), counted apart. */
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra) {
    (void)extra;
    if (!cfg || (cfg->numAttrs && !cfg->attrs)) return CUDA_ERROR_INVALID_VALUE;
    int programmatic = 0;
    for (unsigned i = 0; i < cfg->numAttrs; i++) {
        if (cfg->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) return CUDA_ERROR_NOT_SUPPORTED;
        programmatic = cfg->attrs[i].value.programmaticStreamSerializationAllowed != 0;
    }
    if (failing(2)) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    CUresult r = launch(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ,
                        cfg->sharedMemBytes, params);
    if (r == CUDA_SUCCESS && programmatic) atomic_fetch_add(&n_programmatic, 1);
    return r;
}

/* Device memory is host memory, 256-byte aligned as cuMemAlloc's is. */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
    NEED_CONTEXT();
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    void *m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&n_allocs, 1);
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    if (p) atomic_fetch_add(&n_frees, 1);
    free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    NEED_CONTEXT();
    memset((void *)(uintptr_t)p, v, n);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
    (void)s;
    return cuMemsetD8_v2(p, v, n);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    NEED_CONTEXT();
    memcpy((void *)(uintptr_t)d, h, n);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    NEED_CONTEXT();
    memcpy(h, (const void *)(uintptr_t)d, n);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    NEED_CONTEXT();
    memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) {
    (void)s;
    return cuMemcpyDtoH_v2(h, d, n);
}
EXPORT CUresult cuStreamSynchronize(CUstream s) {
    (void)s;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags) {
    (void)flags;
    *s = (CUstream)malloc(1);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
    free(s);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags) {
    (void)flags;
    *e = (CUevent)malloc(1);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) {
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s) {
    (void)s;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
EXPORT CUresult cuEventSynchronize(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
EXPORT CUresult cuEventQuery(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
    if (!a || !b) return CUDA_ERROR_INVALID_HANDLE;
    *ms = 1.0f;
    return CUDA_SUCCESS;
}
/* NVRTC itself looks for this in an already loaded libcuda.so.1 and crashes
 * when the symbol is missing; without a table it compiles as with no driver. */
EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_STANDIN";
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
    *s = r == CUDA_SUCCESS ? "no error" : "an error of the stand-in driver";
    return CUDA_SUCCESS;
}
