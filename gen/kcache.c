/* gen/kcache.c — compiled kernels cached in process and on disk.
 *
 * The key is the rendered defines, a hash of the template, the architecture
 * and the NVRTC version; a disk entry stores the whole key and is used only
 * when it matches exactly (a hash collision can never load a wrong kernel).
 * Files are written to a temporary name and renamed, so readers never see
 * half a file, as PyTorch's NVRTC cache does. */
#include "gen/gen.h"
#include "common/files.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "XENTKRN1"

typedef struct mem_entry {
    char *key;
    xent_cubin bin;
    struct mem_entry *next;
} mem_entry;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_entry *mem_head;

static char *make_key(const xent_config *cfg, const xent_problem *p, int arch) {
    char *defines = xent_render_defines(cfg, p);
    if (!defines) return NULL;
    char *key = NULL;
    const char *tpl = xent_family_source(xent_problem_family(p));
    uint64_t th = xent_text_hash(tpl, strlen(tpl));
    if (asprintf(&key, "%stemplate=%016llx arch=sm_%d nvrtc=%d\n", defines, (unsigned long long)th, arch,
                 xent_nvrtc_version()) < 0)
        key = NULL;
    free(defines);
    return key;
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
    if (env && *env) w = snprintf(buf, len, "%s", env);
    else if (xent_cache_home(home, sizeof home, NULL) == XENT_OK) w = snprintf(buf, len, "%s/kernels", home);
    else return 0;
    return w > 0 && (size_t)w < len;
}

static void disk_path(const char *dir, const char *key, char *buf, size_t len) {
    snprintf(buf, len, "%s/%016llx.cubin", dir, (unsigned long long)xent_text_hash(key, strlen(key)));
}

static int read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static int disk_find(const char *dir, const char *key, xent_cubin *out) {
    char path[4200];
    disk_path(dir, key, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return XENT_ENOTFOUND;
    char magic[8];
    uint64_t klen = 0, size = 0;
    int32_t counters[4];
    int rc = XENT_ENOTFOUND;
    char *stored = NULL;
    if (read_exact(f, magic, 8) && !memcmp(magic, MAGIC, 8) && read_exact(f, &klen, 8) &&
        klen == strlen(key) && (stored = malloc(klen)) && read_exact(f, stored, klen) &&
        !memcmp(stored, key, klen) && read_exact(f, counters, sizeof counters) &&
        read_exact(f, &size, 8) && size > 0 && size < (1u << 30) && (out->data = malloc(size)) &&
        read_exact(f, out->data, size)) {
        out->size = size;
        out->registers = counters[0];
        out->spill_bytes = counters[1];
        out->stack_bytes = counters[2];
        out->smem_bytes = counters[3];
        out->from_cache = 2;
        rc = XENT_OK;
    } else {
        free(out->data);
        out->data = NULL;
    }
    free(stored);
    fclose(f);
    return rc;
}

/* Best effort: a read-only or full disk only costs recompiles. */
static void disk_store(const char *dir, const char *key, const xent_cubin *bin) {
    char path[4200], tmp[4300];
    xent_mkdirs(dir, 1);
    disk_path(dir, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid() ^ (long)pthread_self());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t klen = strlen(key), size = bin->size;
    int32_t counters[4] = {bin->registers, bin->spill_bytes, bin->stack_bytes, bin->smem_bytes};
    int ok = fwrite(MAGIC, 1, 8, f) == 8 && fwrite(&klen, 8, 1, f) == 1 &&
             fwrite(key, 1, klen, f) == klen && fwrite(counters, sizeof counters, 1, f) == 1 &&
             fwrite(&size, 8, 1, f) == 1 && fwrite(bin->data, 1, size, f) == size;
    if (fclose(f) || !ok || rename(tmp, path)) unlink(tmp);
}

int xent_kernel_get(const xent_config *cfg, const xent_problem *p, int arch, xent_cubin *out,
                    char *err, size_t errlen) {
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
