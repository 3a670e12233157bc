/*
 * gen — render a configuration into CUDA source, compile it with NVRTC to a
 * CUBIN for one architecture, and cache compiled kernels in process and on
 * disk (keyed by template, defines, architecture and NVRTC version).
 */
#ifndef XENT_GEN_H
#define XENT_GEN_H

#include <stddef.h>
#include <stdint.h>
#include "gen/space.h"

/* The template sources, embedded at build time (build/templates.c). */
extern const char xent_template_xent_fwd[];
extern const char xent_template_read_floor[];
extern const char xent_template_xent_grad[];

/* The template source of a family, and its file name (for #line). */
const char *xent_family_source(xent_family f);
const char *xent_family_file(xent_family f);

/* The template source of a kernel family ("xent_fwd"); NULL if there is none. */
const char *xent_family_template(const char *family);
/* The family a tune-cache key names ("xent_grad/fused" is the grad family);
 * a name of no family is judged as the forward's. */
xent_family xent_family_named(const char *name);
/* FNV-1a (64 bits) of n bytes: the kernel cache's template hash, the kernel
 * cache's file names and the plan memo's hash. */
uint64_t xent_text_hash(const void *data, size_t n);
/* FNV-1a of C source as the compiler reads it: comments dropped, every run
 * of whitespace outside literals taken as one space. */
uint64_t xent_code_hash(const char *src);
/* The code hash of family's template as 16 hex digits into buf (len >= 17):
 * what a tune-cache entry is stamped with, so that an edit of its comments or
 * layout keeps the tuned entries. XENT_EINVAL for an unknown family. */
int xent_template_hash(const char *family, char *buf, size_t len);

/* A compiled kernel: the CUBIN and what ptxas reported about it. */
typedef struct xent_cubin {
    void *data;
    size_t size;
    int registers;   /* per thread */
    int spill_bytes; /* spill stores + spill loads */
    int stack_bytes; /* stack frame */
    int smem_bytes;  /* static shared memory */
    int from_cache;  /* 1 memory, 2 disk, 0 compiled now */
} xent_cubin;

/* The #define block for cfg and problem p (no template), malloc'd. */
char *xent_render_defines(const xent_config *cfg, const xent_problem *p);
/* Defines plus the template: the whole translation unit, malloc'd. */
char *xent_render(const xent_config *cfg, const xent_problem *p);

/* Compile source for sm_<arch> (e.g. 90). On failure returns XENT_ECOMPILE
 * with the NVRTC log in err. The ptxas report fills the cubin's counters. */
int xent_nvrtc_compile(const char *source, int arch, xent_cubin *out, char *err, size_t errlen);
/* NVRTC's version as major*100 + minor. */
int xent_nvrtc_version(void);
/* Parse "Used N registers", stack frame and spill bytes out of a ptxas log. */
void xent_parse_ptxas(const char *log, xent_cubin *out);

/* Compile cfg for p on arch through the caches (memory, then disk, then
 * NVRTC; new kernels are written to disk by temporary file and rename).
 * out->data is malloc'd and owned by the caller. */
int xent_kernel_get(const xent_config *cfg, const xent_problem *p, int arch, xent_cubin *out, char *err, size_t errlen);
void xent_cubin_free(xent_cubin *c);
/* A hash of the key xent_kernel_get files cfg's kernel for p on arch under (the rendered defines,
 * the template's hash, arch and NVRTC): configs with the same id share a kernel. 0 without memory. */
uint64_t xent_kernel_id(const xent_config *cfg, const xent_problem *p, int arch);
/* The disk cache directory ($XENT_KERNEL_CACHE, "off" disables; else
 * kernels/ in xent_cache_home). 0 if none. */
int xent_kernel_cache_dir(char *buf, size_t len);

#endif
