/* gen/kcache.c — compiled kernels cached in process and on disk.
 *
 * The key is the rendered defines, a hash of the template, the architecture
 * and the NVRTC version; a disk entry stores the whole key and is used only
 * when it matches exactly (a hash collision can never load a wrong kernel).
 * Files are written to a temporary name and renamed, so readers never see
 * half a file, as PyTorch's NVRTC cache does. The rename does not make the
 * bytes durable (a crash may leave a named file of zeros or of part of its
 * bytes), and a disk can damage a file later: a file's last 8 bytes are a
 * hash of all before them, and a file whose length or hash disagrees is
 * ignored and compiled again, never handed to the driver.
 *
 * File: "XENTKRN2", key length (u64), key, counters (4 x i32), CUBIN
 * length (u64), CUBIN, FNV-1a 64 of everything before it (u64). */
#include "gen/gen.h"
#include "common/files.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "XENTKRN2"
/* CUBINs of this template are tens of KB; a file past this is not one of ours. */
#define MAX_FILE_BYTES (64L << 20)

typedef struct mem_entry {
    char *key;
    xent_cubin bin;
    struct mem_entry *next;
} mem_entry;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_entry *mem_head;

/* The hash of a family's template text, which is the build's own, so hashed once: at every key
 * it took a third of a pass over a space whose kernels are all on disk. Two threads may both
 * hash it first; they store the same value. */
static uint64_t template_text_hash(xent_family f) {
    static _Atomic uint64_t memo[XENT_FAMILY_GRAD + 1];
    uint64_t h = atomic_load_explicit(&memo[f], memory_order_relaxed);
    if (!h) {
        const char *tpl = xent_family_source(f);
        h = xent_text_hash(tpl, strlen(tpl));
        atomic_store_explicit(&memo[f], h, memory_order_relaxed);
    }
    return h;
}

static char *make_key(const xent_config *cfg, const xent_problem *p, int arch) {
    char *defines = xent_render_defines(cfg, p);
    if (!defines) return NULL;
    char *key = NULL;
    uint64_t th = template_text_hash(xent_problem_family(p));
    if (asprintf(&key, "%stemplate=%016llx arch=sm_%d nvrtc=%d\n", defines, (unsigned long long)th, arch,
                 xent_nvrtc_version()) < 0)
        key = NULL;
    free(defines);
    return key;
}

uint64_t xent_kernel_id(const xent_config *cfg, const xent_problem *p, int arch) {
    char *key = make_key(cfg, p, arch);
    if (!key) return 0;
    uint64_t h = xent_text_hash(key, strlen(key));
    free(key);
    return h;
}

static int copy_bin(const xent_cubin *from, xent_cubin *to, int source) {
    *to = *from;
    to->data = malloc(from->size);
    if (!to->data) return XENT_ENOMEM;
    memcpy(to->data, from->data, from->size);
    to->from_cache = source;
    return XENT_OK;
}

static int mem_find(const char *key, xent_cubin *out) {
    int rc = XENT_ENOTFOUND;
    pthread_mutex_lock(&mem_lock);
    for (mem_entry *e = mem_head; e; e = e->next)
        if (!strcmp(e->key, key)) {
            rc = copy_bin(&e->bin, out, 1);
            break;
        }
    pthread_mutex_unlock(&mem_lock);
    return rc;
}

static void mem_add(const char *key, const xent_cubin *bin) {
    mem_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key)) || copy_bin(bin, &e->bin, 0)) {
        if (e) free(e->key);
        free(e);
        return; /* the memory cache is an optimization; losing an entry is harmless */
    }
    pthread_mutex_lock(&mem_lock);
    e->next = mem_head;
    mem_head = e;
    pthread_mutex_unlock(&mem_lock);
}

int xent_kernel_cache_dir(char *buf, size_t len) {
    const char *env = getenv("XENT_KERNEL_CACHE");
    char home[4096];
    int w;
    if (env && !strcmp(env, "off")) return 0;
    if (env && *env)
        w = snprintf(buf, len, "%s", env);
    else if (xent_cache_home(home, sizeof home, NULL) == XENT_OK)
        w = snprintf(buf, len, "%s/kernels", home);
    else
        return 0;
    return w > 0 && (size_t)w < len;
}

static void disk_path(const char *dir, const char *key, char *buf, size_t len) {
    snprintf(buf, len, "%s/%016llx.cubin", dir, (unsigned long long)xent_text_hash(key, strlen(key)));
}

/* The whole file, if it is a regular one of at most MAX_FILE_BYTES. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= MAX_FILE_BYTES &&
        (buf = malloc((size_t)st.st_size + 1))) {
        *len = fread(buf, 1, (size_t)st.st_size + 1, f);
        if (*len != (size_t)st.st_size) { /* it changed under us: a writer's rename is not ours to race */
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int disk_find(const char *dir, const char *key, xent_cubin *out) {
    char path[4200];
    disk_path(dir, key, path, sizeof path);
    size_t len = 0;
    unsigned char *buf = read_file(path, &len);
    if (!buf) return XENT_ENOTFOUND;
    uint64_t klen = strlen(key), size = 0, sum = 0;
    int32_t counters[4];
    size_t at = 8 + 8 + klen + sizeof counters; /* the CUBIN length's offset */
    int rc = XENT_ENOTFOUND;
    if (len >= at + 8 + 8 && !memcmp(buf, MAGIC, 8) && !memcmp(buf + 8, &klen, 8) && !memcmp(buf + 16, key, klen)) {
        memcpy(counters, buf + 16 + klen, sizeof counters);
        memcpy(&size, buf + at, 8);
        memcpy(&sum, buf + len - 8, 8);
        /* the length first: then the hash covers exactly the bytes the header says */
        if (size > 0 && size == len - at - 16 && sum == xent_text_hash((const char *)buf, len - 8) &&
            (out->data = malloc(size))) {
            memcpy(out->data, buf + at + 8, size);
            out->size = size;
            out->registers = counters[0];
            out->spill_bytes = counters[1];
            out->stack_bytes = counters[2];
            out->smem_bytes = counters[3];
            out->from_cache = 2;
            rc = XENT_OK;
        }
    }
    free(buf);
    return rc;
}

/* Best effort: a read-only or full disk only costs recompiles. The file is
 * made in memory first, so its hash is of the very bytes written. */
static void disk_store(const char *dir, const char *key, const xent_cubin *bin) {
    char path[4200], tmp[4300];
    uint64_t klen = strlen(key), size = bin->size;
    int32_t counters[4] = {bin->registers, bin->spill_bytes, bin->stack_bytes, bin->smem_bytes};
    size_t len = 8 + 8 + klen + sizeof counters + 8 + size + 8, at = 0;
    unsigned char *buf = malloc(len);
    if (!buf) return;
#define PUT(src, n) (memcpy(buf + at, (src), (n)), at += (n))
    PUT(MAGIC, 8);
    PUT(&klen, 8);
    PUT(key, klen);
    PUT(counters, sizeof counters);
    PUT(&size, 8);
    PUT(bin->data, size);
    uint64_t sum = xent_text_hash((const char *)buf, at);
    PUT(&sum, 8);
#undef PUT
    xent_mkdirs(dir, 1);
    disk_path(dir, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid() ^ (long)pthread_self());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, len, f) == len;
    free(buf);
    if (!f) return;
    if (fclose(f) || !ok || rename(tmp, path)) unlink(tmp);
}

int xent_kernel_get(const xent_config *cfg, const xent_problem *p, int arch, xent_cubin *out, char *err,
                    size_t errlen) {
    memset(out, 0, sizeof *out);
    char *key = make_key(cfg, p, arch);
    if (!key) return XENT_ENOMEM;
    int rc = mem_find(key, out);
    char dir[4096];
    int have_dir = rc != XENT_OK && xent_kernel_cache_dir(dir, sizeof dir);
    if (rc != XENT_OK && have_dir && disk_find(dir, key, out) == XENT_OK) {
        mem_add(key, out);
        out->from_cache = 2;
        rc = XENT_OK;
    }
    if (rc != XENT_OK) {
        char *src = xent_render(cfg, p);
        rc = src ? xent_nvrtc_compile(src, arch, out, err, errlen) : XENT_ENOMEM;
        free(src);
        if (rc == XENT_OK) {
            mem_add(key, out);
            if (have_dir) disk_store(dir, key, out);
        }
    }
    free(key);
    return rc;
}

void xent_cubin_free(xent_cubin *c) {
    if (!c) return;
    free(c->data);
    c->data = NULL;
    c->size = 0;
}
