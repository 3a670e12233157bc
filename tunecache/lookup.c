/*
 * lookup.c — the tune cache's answers to the runtime: the nearest shape and
 * kind of problem (tc_nearest), and the chain of stores a lookup walks
 * (tc_lookup; see tunecache.h).
 */
#include "store.h"

#include "xent.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ratios rather than differences of logs: an exact ratio tie (2000 vs 1000
 * and 4000) then gives bit-equal distances, so the tie rule decides. */
static double shape_dist(const tc_key *k, int64_t n, int64_t c) {
    double dn = log((double)k->n / (double)n), dc = log((double)k->c / (double)c);
    return dn * dn + dc * dc;
}

void tc_kind_text(const tc_key *k, char *buf, size_t len) {
    static const char *reductions[] = {"none", "sum", "mean"};
    static const struct {
        int bit;
        const char *name;
    } opts[] = {
        {TC_OPT_WEIGHTS, "weights"}, {TC_OPT_SMOOTHING, "smoothing"}, {TC_OPT_LSE, "lse"},
        {TC_OPT_STRIDED, "strided"}, {TC_OPT_ZLOSS, "zloss"},         {TC_OPT_SOFTCAP, "softcap"},
        {TC_OPT_SHARD, "shard"},
    };
    static const char *dtypes[] = {"f32", "f16", "bf16"};
    size_t used = (size_t)snprintf(buf, len, "%s %s %s", (unsigned)k->logits <= 2 ? dtypes[k->logits] : "?",
                                   k->targets == XENT_I64 ? "i64" : "i32",
                                   k->reduction >= 0 && k->reduction <= 2 ? reductions[k->reduction] : "?");
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if ((k->options & opts[i].bit) && used < len)
            used += (size_t)snprintf(buf + used, len - used, " %s", opts[i].name);
}

/* How far an entry's problem kind is from the query's, 0 when the same:
 * the cost of each difference in what a kernel does beside reading the
 * rows. The other 16-bit dtype widens each element by another instruction,
 * the same bytes read; a target's width is one load a row, the lse one store a row; sum
 * and mean differ only in the last block's division; strided rows change
 * their alignment and class weights add a load a row; none stores a loss a
 * row instead of summing in every block; smoothing adds side sums to every
 * chunk, registers included. The costs of the differences add up. */
static int key_dist(const tc_key *q, const tc_key *k) {
    int d = 0, diff = q->options ^ k->options;
    if (q->logits != k->logits) d += 1;
    if (q->targets != k->targets) d += 1;
    if (diff & TC_OPT_LSE) d += 1;
    if (q->reduction != k->reduction) d += q->reduction == XENT_REDUCE_NONE || k->reduction == XENT_REDUCE_NONE ? 8 : 2;
    if (diff & TC_OPT_STRIDED) d += 4;
    if (diff & TC_OPT_WEIGHTS) d += 4;
    if (diff & TC_OPT_SMOOTHING) d += 16;
    /* the training options change the kernel family, never relaxed; counted for completeness */
    if (diff & (TC_OPT_ZLOSS | TC_OPT_SOFTCAP | TC_OPT_SHARD)) d += 64;
    return d;
}

/* A unit of key_dist as a shape distance: a difference of kind weighs as much as
 * moving the shape. One unit is a 1.25x step in n or c, so none for a mean (8 units)
 * is a 1.9x step, the other 16-bit dtype a 1.25x one. On the H200 an entry of the
 * other reduction or 16-bit dtype at the problem's own shape beat the problem's own
 * kind 2x away or more in five of seven pairs, by 0.4-50%, and lost two by 0.8% or
 * less (bench/pairs/kind-or-shape.txt). */
#define KIND_UNIT 0.0498 /* log(1.25)^2 */

/* ---- lookup ------------------------------------------------------------- */

/* A row a lookup may answer with. */
typedef struct cand {
    tc_key k; /* the row's key, with its stamps */
    tc_entry e;
    int kd;    /* key_dist to the query (0: the same problem kind) */
    double d;  /* shape distance to the query (0: exact), plus KIND_UNIT per kd */
    int store; /* which store of the level: on a tie the first wins */
    int dsm;   /* |SM count - the query's| */
} cand;

typedef struct cands {
    cand *v;
    size_t n, cap;
} cands;

static int push(tc_db *db, cands *cs, const cand *c) {
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 16;
        cand *v = realloc(cs->v, cap * sizeof *v);
        if (!v) return tc_fail(db, XENT_ENOMEM, "lookup: out of memory");
        cs->v = v, cs->cap = cap;
    }
    cs->v[cs->n++] = *c;
    return XENT_OK;
}

/* The rows of db with key's identity but for the shape (exact: and its
 * shape too); relaxed: of any GPU and SM count as well; kinds: of the other
 * 16-bit dtype as well (TC_KINDS_DTYPE), and of any targets, reduction and
 * options (TC_KINDS_ALL). */
static int collect(tc_db *db, const tc_key *key, int exact, int relaxed, int kinds, int store, cands *cs) {
    sqlite3_stmt *st;
    int rc = tc_prepare(db,
                        exact ? "SELECT " ROW_COLS " FROM tune WHERE " WHERE_EXACT
                              : "SELECT " ROW_COLS " FROM tune WHERE " WHERE_FAMILY " AND n > 0 AND c > 0",
                        &st);
    if (rc != XENT_OK) return rc;
    tc_bind_key(st, key);
    if (relaxed) {
        sqlite3_bind_null(st, 1);
        sqlite3_bind_null(st, 3);
    }
    if (kinds & TC_KINDS_DTYPE) sqlite3_bind_int(st, 12, 1);
    if (kinds & ~TC_KINDS_DTYPE)
        for (int p = 6; p <= 8; p++) sqlite3_bind_null(st, p);
    int s = SQLITE_DONE;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
        cand c;
        memset(&c, 0, sizeof c);
        rc = tc_read_row(db, st, &c.k, &c.e);
        c.kd = key_dist(key, &c.k);
        c.d = (exact ? 0.0 : shape_dist(key, c.k.n, c.k.c)) + KIND_UNIT * c.kd;
        c.store = store;
        c.dsm = abs(c.k.sm_count - key->sm_count);
        if (rc == XENT_OK) rc = push(db, cs, &c);
    }
    if (rc == XENT_OK && s != SQLITE_DONE) rc = tc_sqlfail(db, "lookup");
    sqlite3_finalize(st);
    return rc;
}

/* Nearest shape and kind together, then the nearer kind, then the first
 * store, then the nearest SM count; the rest only makes the order total
 * (smaller n, then smaller c, then the key's fields, first). */
static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    int g;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    if (a->kd != b->kd) return a->kd - b->kd;
    if (a->store != b->store) return a->store - b->store;
    if (a->dsm != b->dsm) return a->dsm - b->dsm;
    if ((g = strcmp(a->k.gpu, b->k.gpu)) != 0) return g;
    if (a->k.n != b->k.n) return a->k.n < b->k.n ? -1 : 1;
    if (a->k.c != b->k.c) return a->k.c < b->k.c ? -1 : 1;
    if (a->k.reduction != b->k.reduction) return a->k.reduction - b->k.reduction;
    if (a->k.options != b->k.options) return a->k.options - b->k.options;
    return a->k.targets - b->k.targets;
}

int tc_nearest(tc_db *db, const tc_key *key, tc_entry *e, int64_t *n_found, int64_t *c_found) {
    if (!db) return XENT_EINVAL;
    int rc = tc_key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e || key->n <= 0 || key->c <= 0) return tc_fail(db, XENT_EINVAL, "no entry to fill, or shape not positive");
    cands cs = {NULL, 0, 0};
    rc = collect(db, key, 0, 0, 0, 0, &cs);
    if (rc == XENT_OK && cs.n > 1) /* as in try_level: no qsort of a NULL array */
        qsort(cs.v, cs.n, sizeof *cs.v, cmp_cand);
    size_t i = 0;
    while (rc == XENT_OK && i < cs.n && tc_stale(key, &cs.v[i].e, NULL, 0)) i++;
    if (rc == XENT_OK && i == cs.n) rc = tc_fail(db, XENT_ENOTFOUND, "no tuned shape for %s %s", key->gpu, key->family);
    if (rc == XENT_OK) {
        *e = cs.v[i].e;
        if (n_found) *n_found = cs.v[i].k.n;
        if (c_found) *c_found = cs.v[i].k.c;
    }
    free(cs.v);
    return rc;
}

/* One level of the chain: its stores (up to two, in preference order). */
typedef struct level {
    xent_source from;
    tc_db *db[2];
    const char *name[2];
    int exact, relaxed, kinds;
} level;

/* How many passed-over entries of one level are described; the rest are counted. */
#define NOTED_PER_LEVEL 2

void tc_note_add(tc_answer *a, const char *fmt, ...) {
    size_t used = strlen(a->note);
    if (used + 3 >= sizeof a->note) return;
    if (used) used += (size_t)snprintf(a->note + used, sizeof a->note - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->note + used, sizeof a->note - used, fmt, ap);
    va_end(ap);
}

/* Rows a higher level already tried: the nearest level leaves out the exact
 * shape of the query's own kind, the architecture level this GPU's own rows
 * when it searches the shipped store again (a GPU whose own file holds other
 * SM counts). */
static int tried_above(const level *lv, const tc_stores *s, const tc_key *key, const cand *c) {
    if (lv->from == XENT_SOURCE_NEAREST) return c->kd == 0 && c->k.n == key->n && c->k.c == key->c;
    if (lv->from == XENT_SOURCE_ARCH)
        return lv->db[0] == s->shipped && !strcmp(c->k.gpu, key->gpu) && c->k.sm_count == key->sm_count;
    return 0;
}

/* The first usable candidate of cs (sorted) into a; nonzero if one was. */
static int pick(const level *lv, const tc_stores *s, const tc_key *key, const cands *cs, tc_answer *a) {
    static const char *suffix[XENT_SOURCE_ARCH + 1] = {
        [XENT_SOURCE_NEAREST] = " (nearest)", [XENT_SOURCE_ARCH] = " (arch)"};
    char why[300], kind[96];
    size_t passed = 0;
    for (size_t i = 0; i < cs->n; i++) {
        const cand *c = &cs->v[i];
        if (tried_above(lv, s, key, c)) continue;
        int usable = !tc_stale(key, &c->e, why, sizeof why) &&
                     (!s->accept || s->accept(s->arg, &c->e, c->k.n, c->k.c, why, sizeof why));
        const char *name = lv->name[c->store];
        if (usable) {
            a->entry = c->e;
            a->from = lv->from;
            snprintf(a->cache, sizeof a->cache, "%s", name);
            a->n = c->k.n, a->c = c->k.c;
            a->targets = c->k.targets, a->reduction = c->k.reduction, a->options = c->k.options;
            if (c->kd) {
                char kind[96];
                tc_kind_text(&c->k, kind, sizeof kind);
                tc_note_add(a, "answered by %s %lldx%lld %s (another kind)", name, (long long)c->k.n, (long long)c->k.c,
                            kind);
            }
            break;
        }
        if (++passed <= NOTED_PER_LEVEL) {
            kind[0] = '\0';
            if (c->kd) tc_kind_text(&c->k, kind + 1, sizeof kind - 1), kind[0] = ' ';
            tc_note_add(a, "%s %lldx%lld%s%s: %s", name, (long long)c->k.n, (long long)c->k.c, kind,
                        suffix[lv->from] ? suffix[lv->from] : "", why);
        }
    }
    if (passed > NOTED_PER_LEVEL)
        tc_note_add(a, "%zu more%s passed over", passed - NOTED_PER_LEVEL, suffix[lv->from] ? suffix[lv->from] : "");
    return a->from == lv->from;
}

/* A store that errors is skipped so the others can still answer; the error
 * is reported only when nothing was found, so the runtime falls back knowingly. */
static int try_level(const level *lv, const tc_stores *s, const tc_key *key, tc_answer *a, int *err) {
    cands cs = {NULL, 0, 0};
    for (int i = 0; i < 2; i++) {
        if (!lv->db[i]) continue;
        int rc = collect(lv->db[i], key, lv->exact, lv->relaxed, lv->kinds, i, &cs);
        if (rc != XENT_OK) {
            tc_note_add(a, "%s", tc_errmsg(lv->db[i]));
            if (*err == XENT_ENOTFOUND) *err = rc;
        }
    }
    if (cs.n > 1) /* qsort of no array (cs.v NULL) is undefined: UBSan stops there */
        qsort(cs.v, cs.n, sizeof *cs.v, cmp_cand);
    int found = pick(lv, s, key, &cs, a);
    free(cs.v);
    return found;
}

int tc_lookup(const tc_stores *s, const tc_key *key, tc_answer *a) {
    if (!a) return XENT_EINVAL;
    memset(a, 0, sizeof *a);
    a->from = XENT_SOURCE_HEURISTIC;
    if (!s || !key || !tc_key_terminated(key)) return XENT_EINVAL;
    const char *ship = s->shipped_name ? s->shipped_name : "shipped";
    const char *arch = s->arch_name ? s->arch_name : "arch";
    int shaped = key->n > 0 && key->c > 0;
    int kinds = shaped ? s->kinds : 0;
    const level levels[] = {
        {XENT_SOURCE_USER_DB, {s->user, NULL}, {"user", NULL}, 1, 0, 0},
        {XENT_SOURCE_SHIPPED, {s->shipped, NULL}, {ship, NULL}, 1, 0, 0},
        {XENT_SOURCE_NEAREST, {shaped ? s->user : NULL, shaped ? s->shipped : NULL}, {"user", ship}, 0, 0, kinds},
        {XENT_SOURCE_ARCH, {shaped ? s->arch : NULL, NULL}, {arch, NULL}, 0, 1, kinds},
    };
    int err = XENT_ENOTFOUND;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (try_level(&levels[i], s, key, a, &err)) return XENT_OK;
    return err;
}
