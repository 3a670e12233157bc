/* runtime/lookup.c — which tuned configuration a problem gets: the known
 * GPUs and their architecture siblings, the caches a context reads, and the
 * lookup chain down to the heuristic. Nothing here touches the driver, so
 * the chain runs on a machine without a GPU for any GPU key presented. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/gen.h"
#include "runtime/runtime.h"

#ifndef XENT_DATADIR
#define XENT_DATADIR "/usr/local/share/xent"
#endif

/* Known GPUs. Within an architecture the order is the preference between
 * siblings equally near in SM count: the H200 first, the GPU tuned most. */
const xent_gpu_spec xent_known_gpus[] = {
    {"h200", 90, {132}},    {"h100", 90, {132, 114}}, {"h800", 90, {132, 114}}, {"gh200", 90, {132}}, {"h20", 90, {78}},
    {"a100", 80, {108}},    {"a800", 80, {108}},      {"a30", 80, {56}},        {"l40s", 89, {142}},  {"l4", 89, {58}},
    {"rtx4090", 89, {128}}, {"b200", 100, {148}},     {"a10", 86, {72}},        {NULL, 0, {0}},
};

const xent_gpu_spec *xent_gpu_find(const char *key) {
    for (const xent_gpu_spec *g = xent_known_gpus; key && g->key; g++)
        if (!strcmp(g->key, key)) return g;
    return NULL;
}

const char *xent_datadir(void) {
    const char *dir = getenv("XENT_DATADIR");
    return dir && *dir ? dir : XENT_DATADIR;
}

static int shipped_path(const char *datadir, const char *gpu, char *buf, size_t len) {
    int w = snprintf(buf, len, "%s/%s.sql", datadir, gpu);
    return w > 0 && (size_t)w < len;
}

/* The SM-count distance to a known GPU: to its nearest variant. */
static int sm_distance(const xent_gpu_spec *g, int sm_count) {
    int best = -1;
    for (int i = 0; i < 3 && g->sms[i]; i++) {
        int d = abs(g->sms[i] - sm_count);
        if (best < 0 || d < best) best = d;
    }
    return best < 0 ? 0 : best;
}

/* Same architecture, then the nearest SM count, then the GPU itself (its own
 * file may hold another variant's SM count, as an h100 PCIe beside an SXM
 * cache), then the table's order. Launch grids come from the device at plan
 * build, so a sibling's configuration runs with this GPU's own SM count. */
int xent_arch_sibling(const char *gpu, int arch, int sm_count, const char *datadir, int include_own, char *out,
                      size_t len) {
    const xent_gpu_spec *best = NULL;
    int best_d = 0, best_own = 0;
    char path[4096];
    for (const xent_gpu_spec *g = xent_known_gpus; g->key; g++) {
        int own = gpu && !strcmp(g->key, gpu), d = sm_distance(g, sm_count);
        if (g->cc != arch || (own && !include_own)) continue;
        if (!shipped_path(datadir, g->key, path, sizeof path) || access(path, R_OK) != 0) continue;
        if (!best || d < best_d || (d == best_d && own && !best_own)) best = g, best_d = d, best_own = own;
    }
    if (!best || !out || len <= strlen(best->key)) return XENT_ENOTFOUND;
    snprintf(out, len, "%s", best->key);
    return XENT_OK;
}

static void note_add(xent_caches *c, const char *what) {
    size_t used = strlen(c->note);
    snprintf(c->note + used, sizeof c->note - used, "%s%s", used ? "; " : "", what);
}

/* A shipped cache is SQL text, read into an in-memory store. */
static tc_db *load_shipped(xent_caches *c, const char *datadir, const char *gpu) {
    char path[4096], err[512], why[1024];
    tc_db *db = NULL;
    if (!shipped_path(datadir, gpu, path, sizeof path) || access(path, R_OK) != 0) return NULL;
    if (tc_open(":memory:", 0, &db, err, sizeof err) != XENT_OK || tc_import_file(db, path, NULL) != XENT_OK) {
        /* the reason before the path: a note cut short loses the end of a long path, not why */
        snprintf(why, sizeof why, "shipped tune cache %s.sql skipped: %.500s (%.400s)", gpu, db ? tc_reason(db) : err,
                 path);
        note_add(c, why);
        tc_close(db);
        return NULL;
    }
    return db;
}

void xent_caches_open(xent_caches *c, const char *gpu, int arch, int sm_count, const char *datadir) {
    char path[4096], err[512], why[1024];
    memset(c, 0, sizeof *c);
    c->opened = 1;
    snprintf(c->gpu, sizeof c->gpu, "%s", gpu ? gpu : "");
    snprintf(c->datadir, sizeof c->datadir, "%s", datadir);
    if (tc_user_path(path, sizeof path) == XENT_OK && access(path, R_OK) == 0 &&
        tc_open(path, 1, &c->user, err, sizeof err) != XENT_OK) {
        c->user = NULL;
        snprintf(why, sizeof why, "user tune cache skipped: %.900s", err);
        note_add(c, why);
    }
    c->shipped = load_shipped(c, datadir, c->gpu);
    if (xent_arch_sibling(c->gpu, arch, sm_count, datadir, c->shipped != NULL, c->arch_gpu, sizeof c->arch_gpu)) return;
    c->arch = !strcmp(c->arch_gpu, c->gpu) ? c->shipped : load_shipped(c, datadir, c->arch_gpu);
    if (!c->arch) c->arch_gpu[0] = '\0';
}

void xent_caches_close(xent_caches *c) {
    if (c->arch != c->shipped) tc_close(c->arch);
    tc_close(c->shipped);
    tc_close(c->user);
    memset(c, 0, sizeof *c);
}

void xent_tc_stamp(tc_key *key) {
    if (xent_template_hash(key->family, key->template_hash, sizeof key->template_hash) != XENT_OK)
        key->template_hash[0] = '\0';
    key->nvrtc = xent_nvrtc_version();
}

typedef struct fit_arg {
    const xent_problem *p;
    xent_config *cfg;
} fit_arg;

/* An entry is usable when its text parses into a config that runs p here
 * and, made for rows of another length, suits these (xent_config_carries). */
static int usable(void *arg, const tc_entry *e, int64_t n, int64_t c, char *why, size_t len) {
    const fit_arg *f = arg;
    char reason[256];
    if (xent_config_parse(e->config, f->cfg, reason, sizeof reason) != XENT_OK) {
        snprintf(why, len, "config does not parse: %s", reason);
        return 0;
    }
    if (!xent_config_fits(f->cfg, f->p, reason, sizeof reason)) {
        snprintf(why, len, "config does not fit: %s", reason);
        return 0;
    }
    if ((n != f->p->n || c != f->p->c) && !xent_config_carries(f->cfg, c, f->p)) {
        snprintf(why, len, "holds rows of other lengths than these");
        return 0;
    }
    return 1;
}

/* The config made to run on sm_<arch>, and the plan's note saying what that took. */
static void fit_arch(xent_config *cfg, const xent_problem *p, int arch, tc_answer *a) {
    const char *what = xent_config_for_arch(cfg, p, arch);
    if (*what) tc_note_add(a, "fitted to sm_%d: %s", arch, what);
}

/* The caches' note (an unreadable cache) before the answer's own, in the room the answer's
 * leaves it, and at least a third of the note: past that the answer's own is cut instead. */
static void caches_note(const xent_caches *c, tc_answer *a) {
    char own[sizeof a->note];
    if (!c->note[0]) return;
    snprintf(own, sizeof own, "%s", a->note);
    size_t used = own[0] ? strlen(own) + 2 : 0, room = sizeof a->note - 1 - used;
    if (used > sizeof a->note * 2 / 3) room = sizeof a->note / 3;
    snprintf(a->note, sizeof a->note, "%.*s%s%s", (int)room, c->note, own[0] ? "; " : "", own);
}

xent_source xent_choose_config(const xent_caches *c, const tc_key *key, const xent_problem *p, xent_config *cfg,
                               tc_answer *a) {
    fit_arg f = {p, cfg};
    /* Another kind's entry is checked to fit p like any. The training family's kinds are
     * separate families of kernels, never mixed, but for the 16-bit dtypes: their kernels
     * differ, as the forward's, in the instruction that widens an element (f16's tune of
     * the fused 32768x4096 mean found bf16's shipped config). */
    int kinds = xent_problem_family(p) == XENT_FAMILY_FWD ? TC_KINDS_ALL : TC_KINDS_DTYPE;
    tc_stores s = {c->user, c->shipped, c->arch, c->gpu, c->arch_gpu, usable, &f, kinds};
    xent_source from = XENT_SOURCE_HEURISTIC;
    if (tc_lookup(&s, key, a) == XENT_OK) { /* usable() left cfg parsed */
        if (a->n != key->n || a->c != key->c || a->options != key->options)
            xent_config_fit_rows(cfg, a->n, p, key->sm_count);
        from = a->from;
    } else {
        a->cache[0] = '\0';
        xent_config_heuristic(p, key->sm_count, cfg);
        if (!c->shipped && !c->arch) /* a build tree before make install, or a GPU with no cache shipped */
            tc_note_add(a, "no readable shipped tune cache for %s or another sm_%d GPU in %s",
                        c->gpu[0] ? c->gpu : "this GPU", key->arch, c->datadir);
    }
    fit_arch(cfg, p, key->arch, a);
    caches_note(c, a);
    return from;
}

xent_source xent_lookup_offline(const char *gpu, int arch, int sm_count, const xent_problem *p, xent_config *cfg,
                                tc_answer *a) {
    xent_caches caches;
    tc_key key;
    xent_caches_open(&caches, gpu, arch, sm_count, xent_datadir());
    xent_tc_key_for(gpu, arch, sm_count, p, &key);
    xent_source src = xent_choose_config(&caches, &key, p, cfg, a);
    xent_caches_close(&caches);
    return src;
}
