/* check_lookup — the runtime's tune-cache lookup for a presented GPU, on the
 * CPU: the shipped tunecache/h200.sql answering its own GPU, siblings of its
 * architecture answering through it, user entries first, stale and
 * unusable entries passed over with a note, entries of another problem kind
 * (targets, reduction, options, the other 16-bit dtype) after those of the
 * problem's own, and the heuristic last. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gen/gen.h"
#include "runtime/runtime.h"
#include "tests/files.h"
#include "tests/run_suite.h"
#include "tests/tmpdir.h"

/* The shipped winner of f32 i64 mean 32768x4096, as tunecache/h200.sql has it. */
#define H200_32768x4096 "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3"
/* and of the fused loss and gradient, f32 and bf16, and of bf16's backward */
#define H200_FUSED_32768x4096                                                                                          \
    "VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=0 POLY=8 EVICT=0 STASH=0"
#define H200_BF16_FUSED_32768x4096 "VEC=8 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0"
#define H200_BF16_BWD_32768x4096 "VEC=8 TPR=64 BLOCK=64 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0"

static void make_tmpdir(void) {
    strcpy(tmpdir, "/tmp/check_lookup.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s (tests run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* How tunecache/h200.sql reaches the datadir: as it is, with its stamps replaced by
 * another template's (what a template change does to a shipped cache), or as text
 * that is not SQL (a damaged file). */
enum { SHIP_FRESH, SHIP_STALE, SHIP_BROKEN };

static void ship_h200(const char *datadir, int how) {
    char hash[17], path[700];
    char *text = read_text("tunecache/h200.sql");
    ck_assert_int_eq(xent_template_hash("xent_fwd", hash, sizeof hash), XENT_OK);
    for (char *p = text; how == SHIP_STALE && (p = strstr(p, hash)); p += 16) memcpy(p, "feedfacefeedface", 16);
    mkdir(datadir, 0755);
    snprintf(path, sizeof path, "%s/h200.sql", datadir);
    write_text(path, how == SHIP_BROKEN ? "INSERT INTO nowhere VALUES (\n" : text);
    free(text);
}

/* The key the runtime makes for p on a presented GPU. */
static void key_for(const char *gpu, int arch, int sm, const xent_problem *p, tc_key *key) {
    xent_tc_key_for(gpu, arch, sm, p, key);
}

static void put_user(const tc_key *key, const char *config) {
    tc_db *db;
    char err[256];
    tc_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.config, sizeof e.config, "%s", config);
    e.us = e.gbps = 1.0;
    ck_assert_msg(tc_open(tpath("user.db"), 0, &db, err, sizeof err) == XENT_OK, "%s", err);
    ck_assert_int_eq(tc_put(db, key, &e), XENT_OK);
    tc_close(db);
}

typedef struct lookup_case {
    const char *name;
    const char *gpu;
    int arch, sm;
    int64_t n, c;
    int ship;         /* how h200.sql is shipped (SHIP_*) */
    const char *user; /* an exact user entry for the presented GPU, USER_BROKEN, or NULL */
    xent_source source;
    const char *cache;  /* "" for the heuristic */
    const char *config; /* NULL: the heuristic's for this problem */
    const char *note;   /* in the note, or NULL for an empty note */
    const char *kind;   /* the problem's kind (apply_kind), NULL: i64 mean */
} lookup_case;

/* a user cache that is not an SQLite database */
static const char USER_BROKEN[] = "not a database";

static const lookup_case cases[] = {
    {"h200 exact", "h200", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_SHIPPED, "h200", H200_32768x4096, NULL,
     NULL},
    {"h200 nearest", "h200", 90, 132, 30000, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200", H200_32768x4096, NULL,
     NULL},
    {"h100 from h200", "h100", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200", H200_32768x4096, NULL,
     NULL},
    {"h100 PCIe from h200", "h100", 90, 114, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200", H200_32768x4096,
     NULL, NULL},
    {"gh200 nearest in h200", "gh200", 90, 132, 30000, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200",
     H200_32768x4096, NULL, NULL},
    {"unknown sm_90 key", "h999", 90, 100, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200", H200_32768x4096,
     NULL, NULL},
    {"h100 user first", "h100", 90, 132, 32768, 4096, SHIP_FRESH,
     "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", XENT_SOURCE_USER_DB, "user",
     "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", NULL, NULL},
    {"user unparsable", "h200", 90, 132, 32768, 4096, SHIP_FRESH, "VEC=3 TPR=32", XENT_SOURCE_SHIPPED, "h200",
     H200_32768x4096, "user 32768x4096: config does not parse", NULL},
    {"user unfit", "h100", 90, 132, 32768, 4096, SHIP_FRESH,
     "VEC=4 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1", XENT_SOURCE_ARCH, "h200",
     H200_32768x4096, "user 32768x4096: config does not fit", NULL},
    {"other arch", "l40s", 89, 142, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "no readable shipped tune cache for l40s or another sm_89 GPU in /tmp/check_lookup.", NULL},
    /* a stash past what a block of the GPU may have gives way to a second read (99 KB on
     * sm_89, 163 KB on sm_80: the heuristic's 125 KB for 8192x128256 bf16 fits the second) */
    {"l40s: no stash past its shared memory", "l40s", 89, 142, 8192, 128256, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC,
     "", "VEC=8 TPR=512 BLOCK=512 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 EVICT=1",
     "fitted to sm_89: no stash (its shared memory): the row read twice", "bf16 fused"},
    {"a100 keeps the stash", "a100", 80, 108, 8192, 128256, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "no readable shipped tune cache for a100", "bf16 fused"},
    /* a cache that cannot be read is passed over, and the answer says so */
    {"user cache unreadable", "h200", 90, 132, 32768, 4096, SHIP_FRESH, USER_BROKEN, XENT_SOURCE_SHIPPED, "h200",
     H200_32768x4096, "user tune cache skipped", NULL},
    {"shipped cache unreadable", "h200", 90, 132, 32768, 4096, SHIP_BROKEN, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "h200.sql skipped", NULL},
    {"shipped cache unreadable: then no cache", "h200", 90, 132, 32768, 4096, SHIP_BROKEN, NULL, XENT_SOURCE_HEURISTIC,
     "", NULL, "; no readable shipped tune cache for h200 or another sm_90 GPU in", NULL},
    {"h200 stale", "h200", 90, 132, 32768, 4096, SHIP_STALE, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "h200 32768x4096: stale: made by template feedfacefeedface", NULL},
    {"h100 stale sibling", "h100", 90, 132, 32768, 4096, SHIP_STALE, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "h200 32768x4096 (arch): stale", NULL},
    /* the shipped cache holds i64 entries of mean (every dtype) and none (f32, bf16): a kind
     * takes the nearest entry in shape and kind together, and says when it is another kind's */
    {"h200 none takes none", "h200", 90, 132, 40000, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     "VEC=4 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", NULL, "none"},
    {"h200 none takes the mean of its shape", "h200", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST,
     "h200", H200_32768x4096, "answered by h200 32768x4096 f32 i64 mean", "none"},
    {"h200 weighted i32 takes mean", "h200", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     H200_32768x4096, "answered by h200 32768x4096 f32 i64 mean", "i32 weights smoothing lse"},
    {"h100 sum from h200 mean", "h100", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200",
     H200_32768x4096, "answered by h200 32768x4096 f32 i64 mean", "sum"},
    {"h200 stale, other kind", "h200", 90, 132, 32768, 4096, SHIP_STALE, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "h200 32768x4096 f32 i64 mean (nearest): stale", "none"},
    /* a nearest entry fitted to the problem's rows: a split keeps about the
     * entry's rows x segments (16x262144's 16 segments, 64x32000's 2), and two
     * passes over a row longer than the chunk become one (1048576x100's) */
    {"h200 few rows take more segments", "h200", 90, 132, 7, 1000003, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=32 PERSIST=0", NULL, NULL},
    {"h200 more rows take none", "h200", 90, 132, 229, 12489, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     "VEC=8 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1 POLY=8",
     "answered by h200 64x32000 f16 i64 mean (another kind)", "f16 weights"},
    {"h200 longer rows take one pass", "h200", 90, 132, 1048576, 150, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     "VEC=2 TPR=2 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "answered by h200 1048576x100 bf16 i64 mean (another kind)", "bf16 i32 weights"},
    /* a training entry answers rows it holds as it held its own: a held row
     * near its length, not a row past its chunk, nor one that fills a quarter */
    {"h200 fused nearest, held", "h200", 90, 132, 30000, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     H200_FUSED_32768x4096, NULL, "fused"},
    {"h200 fused, held there, past it here", "h200", 90, 132, 32768, 6000, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "",
     NULL, "h200 32768x4096 (nearest): holds rows of other lengths", "fused"},
    {"h200 fused, held in a quarter", "h200", 90, 132, 32768, 1000, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
     "h200 32768x4096 (nearest): holds rows of other lengths", "fused"},
    {"h200 fused, past a chunk there, held here", "h200", 90, 132, 16384, 30000, SHIP_FRESH, NULL,
     XENT_SOURCE_HEURISTIC, "", NULL, "h200 16384x50257 (nearest): holds rows of other lengths", "fused"},
    /* f16 training takes bf16's entries of its kind, and no other kind's */
    {"h200 f16 fused takes bf16's", "h200", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_NEAREST, "h200",
     H200_BF16_FUSED_32768x4096, "answered by h200 32768x4096 bf16 i64 mean (another kind)", "f16 fused"},
    {"h100 f16 backward from h200 bf16", "h100", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_ARCH, "h200",
     H200_BF16_BWD_32768x4096, "answered by h200 32768x4096 bf16 i64 mean (another kind)", "f16 backward"},
    {"h200 fused i32 takes no i64 entry", "h200", 90, 132, 32768, 4096, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "",
     NULL, NULL, "bf16 i32 fused"},
    {"h200 fused f32 takes no 16-bit entry", "h200", 90, 132, 8192, 128256, SHIP_FRESH, NULL, XENT_SOURCE_HEURISTIC, "",
     NULL, "h200 32768x4096 (nearest): holds rows of other lengths", "fused"},
};

/* A problem kind as text: "i32", "none", "sum", "weights", "smoothing",
 * "lse", "f16", "bf16", "strided" (rows 64 elements apart beyond c), "fused" (the
 * training family's loss and gradient), "backward", space-separated. */
static void apply_kind(xent_problem *p, const char *kind) {
    char words[128];
    snprintf(words, sizeof words, "%s", kind ? kind : "");
    for (char *w = strtok(words, " "); w; w = strtok(NULL, " ")) {
        if (!strcmp(w, "i32"))
            p->targets = XENT_I32;
        else if (!strcmp(w, "none"))
            p->reduction = XENT_REDUCE_NONE;
        else if (!strcmp(w, "sum"))
            p->reduction = XENT_REDUCE_SUM;
        else if (!strcmp(w, "weights"))
            p->has_weights = 1;
        else if (!strcmp(w, "smoothing"))
            p->label_smoothing = 0.1f;
        else if (!strcmp(w, "lse"))
            p->write_lse = 1;
        else if (!strcmp(w, "f16"))
            p->logits = XENT_F16;
        else if (!strcmp(w, "bf16"))
            p->logits = XENT_BF16;
        else if (!strcmp(w, "strided"))
            p->row_stride = p->c + 64;
        else if (!strcmp(w, "fused"))
            p->op = XENT_OP_FUSED;
        else if (!strcmp(w, "backward"))
            p->op = XENT_OP_BACKWARD;
        else
            ck_abort_msg("unknown kind word '%s'", w);
    }
}

static void config_text(const char *text, const xent_problem *p, int sm, char *buf, size_t len) {
    xent_config cfg;
    if (text)
        ck_assert_int_eq(xent_config_parse(text, &cfg, NULL, 0), XENT_OK);
    else
        xent_config_heuristic(p, sm, &cfg);
    xent_config_format(&cfg, buf, len);
}

/* The lookup of case t with the shipped cache in datadir. */
static void check_case(const lookup_case *t, const char *datadir) {
    char want[200], got[200];
    setenv("XENT_TUNECACHE", tpath("user.db"), 1);
    ship_h200(datadir, t->ship);
    xent_problem p;
    xent_problem_init(&p, t->n, t->c);
    apply_kind(&p, t->kind);
    tc_key key;
    key_for(t->gpu, t->arch, t->sm, &p, &key);
    if (t->user == USER_BROKEN)
        write_text(tpath("user.db"), "this is not an SQLite database\n");
    else if (t->user)
        put_user(&key, t->user);

    xent_caches caches;
    xent_caches_open(&caches, t->gpu, t->arch, t->sm, datadir);
    xent_config cfg;
    tc_answer a;
    xent_source src = xent_choose_config(&caches, &key, &p, &cfg, &a);
    xent_caches_close(&caches);

    config_text(t->config, &p, t->sm, want, sizeof want);
    xent_config_format(&cfg, got, sizeof got);
    ck_assert_msg(src == t->source, "%s: source %d, want %d (note: %s)", t->name, src, t->source, a.note);
    ck_assert_msg(!strcmp(a.cache, t->cache), "%s: cache '%s', want '%s'", t->name, a.cache, t->cache);
    ck_assert_msg(!strcmp(got, want), "%s: config %s, want %s", t->name, got, want);
    if (t->note)
        ck_assert_msg(strstr(a.note, t->note), "%s: note '%s' lacks '%s'", t->name, a.note, t->note);
    else
        ck_assert_msg(a.note[0] == 0, "%s: note '%s'", t->name, a.note);
}

START_TEST(lookup_for_presented_gpu) {
    check_case(&cases[_i], tpath("share"));
}
END_TEST

/* A datadir path of 250 bytes and more, in both notes: the reason the cache was skipped stays in
 * the answer's, ahead of the paths a note cuts short. */
START_TEST(long_datadir_keeps_the_reason) {
    static const lookup_case t = {"shipped cache unreadable in a long datadir", "h200", 90, 132, 32768, 4096,
                                  SHIP_BROKEN, NULL, XENT_SOURCE_HEURISTIC, "", NULL,
                                  "h200.sql skipped: import: statement 1: incomplete input (",
                                  NULL};
    char datadir[600];
    mkdir(tpath("share"), 0755);
    snprintf(datadir, sizeof datadir, "%s/", tpath("share"));
    for (int i = 0; i < 250; i++) strcat(datadir, i % 10 == 9 ? "-" : "d");
    check_case(&t, datadir);
}
END_TEST

/* The order of preference between entries of other kinds, in the user's
 * cache of an h200 with no shipped cache: the nearest in shape and kind
 * together (a kind's difference weighs as a step in shape), then the nearer
 * kind; an entry whose config does not fit the problem is passed over. Each entry's config is
 * distinct, so the answer names the entry. */
typedef struct kind_entry {
    const char *kind;
    int64_t n, c;
    const char *config;
} kind_entry;

typedef struct kind_case {
    const char *name;
    const char *kind; /* the problem's (apply_kind) */
    int64_t n, c;
    kind_entry entries[3]; /* ended by a NULL config */
    int want;              /* index of the entry that answers; -1: the heuristic */
    const char *note;      /* in the note (NULL: no check) */
} kind_case;

/* hints an entry holds (1, 2) stay when it answers another problem; plain loads would not */
#define CFG_A "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=1"
#define CFG_B "VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=1"
#define CFG_C "VEC=4 TPR=16 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0"
/* a value the space no longer has (rows claimed from a counter), as an older cache may hold it */
#define CFG_RETIRED "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=2"
/* a team and chunk for rows of 10 classes, which fit_rows leaves as they are */
#define CFG_SHORT "VEC=4 TPR=4 BLOCK=128 ITEMS=1 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0"
/* 32 rows of a warp staged in shared memory: only short strides fit */
#define CFG_TILE "VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1"

static const kind_case kind_cases[] = {
    /* kinds at one shape: the nearer kind */
    {"mean before none for a sum",
     "sum",
     1024,
     4096,
     {{"none", 65536, 4096, CFG_A}, {"", 65536, 4096, CFG_B}},
     1,
     "answered by user 65536x4096 f32 i64 mean"},
    {"sum before none for a mean",
     "",
     1024,
     4096,
     {{"none", 1024, 4096, CFG_A}, {"sum", 1024, 4096, CFG_B}},
     1,
     "answered by user 1024x4096 f32 i64 sum"},
    {"targets before reduction",
     "i32",
     1024,
     4096,
     {{"i32 sum", 65536, 4096, CFG_A}, {"", 65536, 4096, CFG_B}},
     1,
     "answered by user 65536x4096 f32 i64 mean"},
    {"lse before reduction", "lse", 1024, 4096, {{"sum lse", 1024, 4096, CFG_A}, {"", 1024, 4096, CFG_B}}, 1, NULL},
    {"reduction before weights",
     "weights",
     1024,
     4096,
     {{"", 65536, 4096, CFG_A}, {"sum weights", 65536, 4096, CFG_B}},
     1,
     "f32 i64 sum weights"},
    {"weights before none", "", 1024, 4096, {{"none", 1024, 4096, CFG_A}, {"weights", 1024, 4096, CFG_B}}, 1, NULL},
    {"none before smoothing", "", 1024, 4096, {{"smoothing", 1024, 4096, CFG_A}, {"none", 1024, 4096, CFG_B}}, 1, NULL},
    {"fewest differences",
     "weights smoothing",
     1024,
     4096,
     {{"", 1024, 4096, CFG_A}, {"smoothing", 1024, 4096, CFG_B}},
     1,
     NULL},
    /* kind against shape: none for a mean weighs a 1.9x step, the other 16-bit dtype 1.25x */
    {"another kind's exact shape before the own kind twice as far",
     "none",
     1024,
     4096,
     {{"none", 2048, 4096, CFG_A}, {"", 1024, 4096, CFG_B}},
     1,
     "answered by user 1024x4096 f32 i64 mean (another kind)"},
    {"the own kind 1.5x away before another kind's exact shape",
     "none",
     1024,
     4096,
     {{"none", 1536, 4096, CFG_A}, {"", 1024, 4096, CFG_B}},
     0,
     NULL},
    {"the own kind at a near shape first",
     "sum",
     1024,
     4096,
     {{"sum", 1100, 4096, CFG_A}, {"", 1024, 4096, CFG_B}},
     0,
     NULL},
    {"another kind far before the own kind farther",
     "sum",
     1024,
     4096,
     {{"sum", 8, 100, CFG_A}, {"", 65536, 4096, CFG_B}},
     1,
     "answered by user 65536x4096 f32 i64 mean"},
    {"then the nearest shape",
     "none",
     8000,
     4096,
     {{"", 64, 4096, CFG_A}, {"", 8192, 4096, CFG_B}, {"", 1024, 4096, CFG_C}},
     1,
     NULL},
    {"unfit passed over",
     "",
     1024,
     4096,
     {{"none", 1024, 4096, CFG_TILE}, {"none lse", 65536, 4096, CFG_B}},
     1,
     "user 1024x4096 f32 i64 none (nearest): config does not fit: TILE"},
    {"a tile passed over for long strides",
     "strided",
     1024,
     10,
     {{"", 1024, 10, CFG_TILE}, {"i32", 1024, 10, CFG_SHORT}},
     1,
     "config does not fit: TILE"},
    {"a strided entry for contiguous rows",
     "",
     1024,
     10,
     {{"strided", 1024, 10, CFG_TILE}},
     0,
     "answered by user 1024x10 f32 i64 mean strided"},
    {"f16 takes bf16 of its kind",
     "f16",
     1024,
     4096,
     {{"f16 none", 65536, 4096, CFG_A}, {"bf16", 65536, 4096, CFG_B}},
     1,
     "answered by user 65536x4096 bf16 i64 mean"},
    {"f16 takes bf16 of its shape before f16 twice as far",
     "f16",
     1024,
     4096,
     {{"f16", 2048, 4096, CFG_A}, {"bf16", 1024, 4096, CFG_B}},
     1,
     "answered by user 1024x4096 bf16 i64 mean"},
    {"bf16 takes f16", "bf16 sum", 1024, 4096, {{"f16 sum", 64, 4096, CFG_A}}, 0, "f16 i64 sum"},
    {"own dtype within 1.25x first",
     "f16",
     1024,
     4096,
     {{"bf16", 1024, 4096, CFG_A}, {"f16", 1200, 4096, CFG_B}},
     1,
     NULL},
    {"f32 never takes 16-bit",
     "",
     1024,
     4096,
     {{"bf16", 1024, 4096, CFG_A}, {"f16 none", 1024, 4096, CFG_B}},
     -1,
     NULL},
    {"16-bit never takes f32", "bf16", 1024, 4096, {{"", 1024, 4096, CFG_A}}, -1, NULL},
    {"every entry unfit (a retired value): the heuristic",
     "",
     1024,
     4096,
     {{"none", 1024, 4096, CFG_RETIRED}},
     -1,
     "config does not parse: PERSIST: illegal value '2'"},
};

START_TEST(other_kinds_in_order) {
    const kind_case *t = &kind_cases[_i];
    setenv("XENT_TUNECACHE", tpath("user.db"), 1);
    xent_problem p;
    tc_key key;
    for (int i = 0; i < 3 && t->entries[i].config; i++) {
        const kind_entry *e = &t->entries[i];
        xent_problem_init(&p, e->n, e->c);
        apply_kind(&p, e->kind);
        key_for("h200", 90, 132, &p, &key);
        put_user(&key, e->config);
    }
    xent_problem_init(&p, t->n, t->c);
    apply_kind(&p, t->kind);
    if (p.row_stride != p.c) p.row_stride = 100000; /* strided here: rows far beyond what a tile holds */
    key_for("h200", 90, 132, &p, &key);

    xent_caches caches;
    xent_caches_open(&caches, "h200", 90, 132, tpath("none"));
    xent_config cfg;
    tc_answer a;
    xent_source src = xent_choose_config(&caches, &key, &p, &cfg, &a);
    xent_caches_close(&caches);

    char want[200], got[200];
    config_text(t->want >= 0 ? t->entries[t->want].config : NULL, &p, 132, want, sizeof want);
    xent_config_format(&cfg, got, sizeof got);
    ck_assert_msg(src == (t->want >= 0 ? XENT_SOURCE_NEAREST : XENT_SOURCE_HEURISTIC), "%s: source %d (note: %s)",
                  t->name, src, a.note);
    ck_assert_msg(!strcmp(got, want), "%s: config %s, want %s (note: %s)", t->name, got, want, a.note);
    if (t->note) ck_assert_msg(strstr(a.note, t->note), "%s: note '%s' lacks '%s'", t->name, a.note, t->note);
}
END_TEST

typedef struct sibling_case {
    const char *gpu;
    int arch, sm, include_own;
    const char *files; /* shipped caches present, space-separated */
    const char *want;  /* NULL: none */
} sibling_case;

static const sibling_case siblings[] = {
    {"h100", 90, 132, 1, "h200", "h200"},
    {"h100", 90, 114, 1, "h200 h100", "h100"}, /* its own file first among equals */
    {"h100", 90, 114, 0, "h200 h100", "h200"}, /* unless its own could not be read */
    {"h20", 90, 78, 1, "h200 h100", "h100"},   /* h100 PCIe (114) is nearer 78 than 132 */
    {"h20", 90, 78, 1, "h200 gh200", "h200"},  /* equally near: the table's order */
    {"a100", 80, 108, 1, "h200", NULL},
    {"l40s", 89, 142, 1, "", NULL},
};

START_TEST(arch_sibling_choice) {
    const sibling_case *t = &siblings[_i];
    char dir[600], path[700], files[64], got[32] = "";
    snprintf(dir, sizeof dir, "%s", tpath("share"));
    mkdir(dir, 0755);
    snprintf(files, sizeof files, "%s", t->files);
    for (char *f = strtok(files, " "); f; f = strtok(NULL, " ")) {
        snprintf(path, sizeof path, "%s/%s.sql", dir, f);
        write_text(path, "-- empty\n");
    }
    int rc = xent_arch_sibling(t->gpu, t->arch, t->sm, dir, t->include_own, got, sizeof got);
    if (!t->want)
        ck_assert_msg(rc == XENT_ENOTFOUND, "%s sm %d: got %s", t->gpu, t->sm, got);
    else
        ck_assert_msg(rc == XENT_OK && !strcmp(got, t->want), "%s sm %d: got '%s', want %s", t->gpu, t->sm, got,
                      t->want);
}
END_TEST

/* What a plan says about where its configuration came from. */
START_TEST(describe_names_the_cache) {
    static xent_context ctx;
    static xent_plan plan;
    char buf[2048];
    plan.ctx = &ctx;
    xent_problem_init(&plan.problem, 8, 8);
    xent_config_heuristic(&plan.problem, 132, &plan.config);
    plan.source = XENT_SOURCE_ARCH;
    snprintf(plan.cache, sizeof plan.cache, "h200");
    snprintf(plan.note, sizeof plan.note, "user 8x8: stale: made by template unknown NVRTC 0");
    ck_assert_int_eq(xent_plan_describe(&plan, buf, sizeof buf), XENT_OK);
    ck_assert_msg(strstr(buf, " source=arch cache=h200 grid="), "%s", buf);
    ck_assert_msg(strstr(buf, " note=user 8x8: stale"), "%s", buf);
    plan.source = XENT_SOURCE_HEURISTIC;
    plan.cache[0] = plan.note[0] = 0;
    ck_assert_int_eq(xent_plan_describe(&plan, buf, sizeof buf), XENT_OK);
    ck_assert_msg(strstr(buf, " source=heuristic grid=") && !strstr(buf, "cache=") && !strstr(buf, "note="), "%s", buf);
}
END_TEST

int main(void) {
    (void)add_scratch_tests; /* the loop tests below need their own test case */
    Suite *s = suite_create("lookup");
    TCase *tc = tcase_create("chain");
    tcase_add_checked_fixture(tc, make_tmpdir, remove_tmpdir);
    tcase_add_loop_test(tc, lookup_for_presented_gpu, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, arch_sibling_choice, 0, (int)(sizeof siblings / sizeof siblings[0]));
    tcase_add_loop_test(tc, other_kinds_in_order, 0, (int)(sizeof kind_cases / sizeof kind_cases[0]));
    tcase_add_test(tc, describe_names_the_cache);
    tcase_add_test(tc, long_datadir_keeps_the_reason);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
