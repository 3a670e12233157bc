/* runtime/driver.c — dlopen the CUDA driver once, resolve what xent uses. */
#include "runtime/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "xent.h"

static xent_driver driver;
static int load_rc = -1;
static char load_why[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Exported names carry the ABI version suffix that cuda.h's macros add. */
#define RESOLVE(field, symbol)                                                                                         \
    do {                                                                                                               \
        *(void **)&driver.field = dlsym(lib, symbol);                                                                  \
        if (!driver.field) {                                                                                           \
            snprintf(load_why, sizeof load_why, "libcuda.so.1 lacks %s", symbol);                                      \
            return XENT_ENODRIVER;                                                                                     \
        }                                                                                                              \
    } while (0)

/* cuLaunchKernelEx, for programmatic dependent launches, only from a driver
 * of CUDA 12.3 or later: from there a stream capture records such a launch as
 * a programmatic edge (CUgraphEdgeData). Otherwise NULL, and launches take
 * cuLaunchKernel. */
static void launch_ex(void *lib) {
    CUresult (*version)(int *) = (CUresult(*)(int *))dlsym(lib, "cuDriverGetVersion");
    int v = 0;
    if (version && version(&v) == CUDA_SUCCESS && v >= 12030)
        *(void **)&driver.LaunchKernelEx = dlsym(lib, "cuLaunchKernelEx");
}

static int resolve(void *lib) {
    RESOLVE(Init, "cuInit");
    RESOLVE(DeviceGetCount, "cuDeviceGetCount");
    RESOLVE(DeviceGet, "cuDeviceGet");
    RESOLVE(DeviceGetName, "cuDeviceGetName");
    RESOLVE(DeviceGetAttribute, "cuDeviceGetAttribute");
    RESOLVE(DeviceTotalMem, "cuDeviceTotalMem_v2");
    RESOLVE(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    RESOLVE(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    RESOLVE(CtxGetCurrent, "cuCtxGetCurrent");
    RESOLVE(CtxPushCurrent, "cuCtxPushCurrent_v2");
    RESOLVE(CtxPopCurrent, "cuCtxPopCurrent_v2");
    RESOLVE(ModuleLoadData, "cuModuleLoadData");
    RESOLVE(ModuleUnload, "cuModuleUnload");
    RESOLVE(ModuleGetFunction, "cuModuleGetFunction");
    RESOLVE(FuncSetAttribute, "cuFuncSetAttribute");
    RESOLVE(OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    RESOLVE(LaunchKernel, "cuLaunchKernel");
    launch_ex(lib);
    RESOLVE(MemAlloc, "cuMemAlloc_v2");
    RESOLVE(MemFree, "cuMemFree_v2");
    RESOLVE(MemsetD8, "cuMemsetD8_v2");
    RESOLVE(MemsetD8Async, "cuMemsetD8Async");
    RESOLVE(MemcpyHtoD, "cuMemcpyHtoD_v2");
    RESOLVE(MemcpyDtoH, "cuMemcpyDtoH_v2");
    RESOLVE(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    RESOLVE(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    RESOLVE(StreamSynchronize, "cuStreamSynchronize");
    RESOLVE(StreamCreate, "cuStreamCreate");
    RESOLVE(StreamDestroy, "cuStreamDestroy_v2");
    RESOLVE(EventCreate, "cuEventCreate");
    RESOLVE(EventDestroy, "cuEventDestroy_v2");
    RESOLVE(EventRecord, "cuEventRecord");
    RESOLVE(EventSynchronize, "cuEventSynchronize");
    RESOLVE(EventQuery, "cuEventQuery");
    RESOLVE(EventElapsedTime, "cuEventElapsedTime_v2");
    RESOLVE(GetErrorName, "cuGetErrorName");
    RESOLVE(GetErrorString, "cuGetErrorString");
    return XENT_OK;
}

static void load_once(void) {
    const char *name = "libcuda.so.1";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_why, sizeof load_why, "cannot load the CUDA driver (%s): %s; is an NVIDIA driver installed?",
                 name, e ? e : "unknown error");
        load_rc = XENT_ENODRIVER;
        return;
    }
    load_rc = resolve(lib);
    if (load_rc != XENT_OK) return;
    CUresult r = driver.Init(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        snprintf(load_why, sizeof load_why, "cuInit: no CUDA device is present");
        load_rc = XENT_ENODEVICE;
    } else if (r != CUDA_SUCCESS) {
        xent_driver_describe(&driver, "cuInit", r, load_why, sizeof load_why);
        load_rc = XENT_ECUDA;
    }
}

const xent_driver *xent_driver_load(int *rc, char *why, size_t len) {
    pthread_once(&once, load_once);
    *rc = load_rc;
    if (load_rc != XENT_OK) {
        if (why && len) snprintf(why, len, "%s", load_why);
        return NULL;
    }
    return &driver;
}

void xent_driver_describe(const xent_driver *d, const char *call, CUresult r, char *buf, size_t len) {
    const char *name = NULL, *text = NULL;
    if (d && d->GetErrorName) d->GetErrorName(r, &name);
    if (d && d->GetErrorString) d->GetErrorString(r, &text);
    snprintf(buf, len, "%s failed: %s (%s)", call, name ? name : "unknown CUDA error", text ? text : "no description");
}
