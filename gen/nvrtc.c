/* gen/nvrtc.c — NVRTC compilation to CUBIN, with the ptxas report kept. */
#include "gen/gen.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int xent_nvrtc_version(void) {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 100 + minor;
}

static int field_before(const char *log, const char *label) {
    const char *at = strstr(log, label);
    if (!at) return 0;
    const char *p = at;
    while (p > log && p[-1] == ' ') p--;
    while (p > log && p[-1] >= '0' && p[-1] <= '9') p--;
    return atoi(p);
}

static int imax(int a, int b) { return a > b ? a : b; }

/* A cubin holds several entry points (the grad family's combine, rescale
 * and denom beside its rows kernel): the report is the worst of them, the
 * most registers, stack and shared memory and every spilled byte. */
void xent_parse_ptxas(const char *log, xent_cubin *out) {
    static const char mark[] = "Function properties for ";
    out->registers = out->stack_bytes = out->spill_bytes = out->smem_bytes = 0;
    for (const char *f = strstr(log, mark); f; f = strstr(f + 1, mark)) {
        const char *end = strstr(f + 1, mark);
        size_t len = end ? (size_t)(end - f) : strlen(f);
        char *part = strndup(f, len);
        if (!part) return;
        out->registers = imax(out->registers, field_before(part, " registers"));
        out->stack_bytes = imax(out->stack_bytes, field_before(part, " bytes stack frame"));
        out->spill_bytes += field_before(part, " bytes spill stores") + field_before(part, " bytes spill loads");
        out->smem_bytes = imax(out->smem_bytes, field_before(part, " bytes smem"));
        free(part);
    }
}

static char *program_log(nvrtcProgram prog) {
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS) return NULL;
    char *log = malloc(n + 1);
    if (log && nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = 0;
    if (log) log[n] = 0;
    return log;
}

static int fail(char *err, size_t errlen, const char *what, nvrtcResult r, const char *log) {
    if (err && errlen)
        snprintf(err, errlen, "NVRTC %s: %s%s%s", what, nvrtcGetErrorString(r), log && *log ? "\n" : "",
                 log ? log : "");
    return XENT_ECOMPILE;
}

int xent_nvrtc_compile(const char *source, int arch, xent_cubin *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, source, "xent_fwd.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) return fail(err, errlen, "create", r, NULL);
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=sm_%d", arch);
    const char *opts[] = {arch_opt, "--std=c++17", "--ptxas-options=-v", "-default-device"};
    r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    char *log = program_log(prog);
    int rc = XENT_OK;
    if (r != NVRTC_SUCCESS) {
        rc = fail(err, errlen, "compile", r, log);
    } else if ((r = nvrtcGetCUBINSize(prog, &out->size)) != NVRTC_SUCCESS || !(out->data = malloc(out->size)) ||
               (r = nvrtcGetCUBIN(prog, out->data)) != NVRTC_SUCCESS) {
        rc = out->data ? fail(err, errlen, "get CUBIN", r, log) : XENT_ENOMEM;
        free(out->data);
        out->data = NULL;
    } else if (log) {
        xent_parse_ptxas(log, out);
    }
    free(log);
    nvrtcDestroyProgram(&prog);
    return rc;
}
