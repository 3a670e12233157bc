/* check_space — the config space table, constraints, text form, heuristic,
 * and rendering of every configuration in the space. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "tests/run_suite.h"

static const xent_dtype dtypes[] = {XENT_F32, XENT_F16, XENT_BF16};

static xent_config *enumerate_all(xent_dtype d, const xent_problem *p, size_t *n) {
    *n = xent_space_enumerate(d, p, 132, NULL, 0);
    xent_config *all = calloc(*n + 1, sizeof *all);
    ck_assert_ptr_nonnull(all);
    ck_assert_uint_eq(xent_space_enumerate(d, p, 132, all, *n), *n);
    return all;
}

/* The tuner's candidates for an n x c problem of dtype d. */
static xent_config *candidates_for(xent_dtype d, int64_t n, int64_t c, size_t *count) {
    xent_problem p;
    xent_problem_init(&p, n, c);
    p.logits = d;
    return enumerate_all(d, &p, count);
}

/* An optional knob: text without it parses with the knob at 0, with
 * " NAME=v" appended at v; c is left parsed with it. */
static void parses_optional(const char *base, const char *name, int v, xent_config *c) {
    const xent_knob *k = NULL;
    for (int i = 0; i < xent_nknobs; i++)
        if (!strcmp(xent_knobs[i].name, name)) k = &xent_knobs[i];
    ck_assert_ptr_nonnull(k);
    ck_assert(k->optional);
    char text[256], why[160];
    ck_assert_int_eq(xent_config_parse(base, c, why, sizeof why), XENT_OK);
    ck_assert_int_eq(xent_knob_get(c, k), 0);
    snprintf(text, sizeof text, "%s %s=%d", base, name, v);
    ck_assert_int_eq(xent_config_parse(text, c, why, sizeof why), XENT_OK);
    ck_assert_int_eq(xent_knob_get(c, k), v);
}

START_TEST(knob_table_is_consistent) {
    ck_assert_int_ge(xent_nknobs, 8);
    for (int i = 0; i < xent_nknobs; i++) {
        const xent_knob *k = &xent_knobs[i];
        ck_assert_ptr_nonnull(k->name);
        ck_assert_ptr_nonnull(k->meaning);
        ck_assert_int_gt(k->nvalues, 0);
        ck_assert_uint_lt(k->offset + sizeof(int), sizeof(xent_config) + 1);
        for (int j = 1; j < k->nvalues; j++) ck_assert_int_lt(k->values[j - 1], k->values[j]);
        /* each family's template reads the rendered knobs it uses through an
         * #ifndef default, and none it does not use */
        char guard[64];
        snprintf(guard, sizeof guard, "#ifndef XENT_%s", k->name);
        const int fwd = k->stage == KNOB_RENDER && (k->families & KNOB_FWD);
        ck_assert_msg(!strstr(xent_template_xent_fwd, guard) == !fwd, "xent_fwd.cu and %s disagree", guard);
        if (k->families & KNOB_GRAD) ck_assert_msg(strstr(xent_template_xent_grad, guard), "xent_grad lacks %s", guard);
    }
}
END_TEST

START_TEST(every_config_renders) {
    for (int di = 0; di < 3; di++) {
        size_t n;
        xent_config *all = enumerate_all(dtypes[di], NULL, &n);
        ck_assert_uint_gt(n, 100);
        xent_problem p;
        xent_problem_init(&p, 7, 33);
        p.logits = dtypes[di];
        for (size_t i = 0; i < n; i++) {
            ck_assert(xent_config_legal(&all[i], dtypes[di], NULL, 0));
            char *src = xent_render(&all[i], &p);
            ck_assert_ptr_nonnull(src);
            char want[64];
            snprintf(want, sizeof want, "#define XENT_VEC %d\n", all[i].vec);
            ck_assert_ptr_nonnull(strstr(src, want));
            snprintf(want, sizeof want, "#define XENT_TPR %d\n", all[i].tpr);
            ck_assert_ptr_nonnull(strstr(src, want));
            snprintf(want, sizeof want, "#define XENT_LOGIT %d\n", (int)dtypes[di]);
            ck_assert_ptr_nonnull(strstr(src, want));
            ck_assert_ptr_nonnull(strstr(src, "xent_fwd("));
            free(src);
        }
        free(all);
    }
}
END_TEST

START_TEST(text_round_trip) {
    size_t n;
    xent_config *all = enumerate_all(XENT_BF16, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        char text[200], why[128];
        xent_config back;
        ck_assert_int_eq(xent_config_format(&all[i], text, sizeof text), XENT_OK);
        ck_assert_int_eq(xent_config_parse(text, &back, why, sizeof why), XENT_OK);
        ck_assert_mem_eq(&back, &all[i], sizeof back);
    }
    free(all);
}
END_TEST

START_TEST(parse_rejects_bad_text) {
    xent_config c;
    char why[128];
    const char *bad[] = {
        "VEC=4",                                                                   /* knobs missing */
        "VEC=3 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",       /* illegal value */
        "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1 FOO=1", /* unknown */
        "VEC=4 VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1", /* twice */
        "VEC4 TPR=32",                                                             /* no '=' */
        "VEC=x TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",       /* not a number */
        /* past int range: these wrapped to VEC=4 and were taken (fuzz_config's property) */
        "VEC=4294967300 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",
        "VEC=-4294967292 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",
        "VEC=99999999999999999999 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",
        "VEC=4TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1",    /* no separator */
        "VEC=4.5 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1", /* not an integer */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        ck_assert_int_eq(xent_config_parse(bad[i], &c, why, sizeof why), XENT_EINVAL);
        ck_assert_msg(why[0], "no reason for '%s'", bad[i]);
    }
}
END_TEST

/* PREFETCH came after tune caches shipped: their text, without it, still
 * parses (as 0), and the older knobs stay required. It is the training
 * family's (no forward winner used it): the forward refuses it by name, and
 * no forward candidate has it. */
START_TEST(prefetch_is_optional_and_the_training_familys) {
    xent_config c;
    char why[160];
    parses_optional("VEC=4 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", "PREFETCH", 1, &c);
    ck_assert_msg(xent_config_legal_for(&c, XENT_FAMILY_GRAD, XENT_F32, why, sizeof why), "%s", why);
    ck_assert(!xent_config_legal(&c, XENT_F32, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "xent_fwd family takes PREFETCH=0"));
    xent_config other;
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 SPLIT=1 PERSIST=1 PREFETCH=0",
                                       &other, why, sizeof why),
                     XENT_EINVAL);
    ck_assert_ptr_nonnull(strstr(why, "TILE"));
    size_t n;
    xent_config *cands = candidates_for(XENT_F32, 32768, 4096, &n);
    ck_assert_uint_gt(n, 0);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(cands[i].prefetch, 0);
    free(cands);
}
END_TEST

/* A retired knob: its text in older caches reads at the value every config
 * had (ASYNC=0), prints no more, and any other value is refused by name. */
static const struct {
    const char *text;
    int ok;
    const char *why; /* the refusal names this */
} retired_cases[] = {
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 PREFETCH=0 ASYNC=0 POLY=0", 1, NULL},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 ASYNC=0", 1, NULL},
    {"ASYNC=0 VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 1, NULL},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 ASYNC=1", 0, "ASYNC was retired"},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 ASYNC=00", 0, "ASYNC was retired"},
    {"VEC=4 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 ASYNC=", 0, "ASYNC was retired"},
};

START_TEST(retired_knob_reads_as_zero) {
    const int i = _i;
    xent_config c;
    char why[160] = "", text[256];
    int rc = xent_config_parse(retired_cases[i].text, &c, why, sizeof why);
    ck_assert_msg((rc == XENT_OK) == retired_cases[i].ok, "'%s': rc %d (%s)", retired_cases[i].text, rc, why);
    if (!retired_cases[i].ok) {
        ck_assert_msg(strstr(why, retired_cases[i].why), "'%s': %s", retired_cases[i].text, why);
        return;
    }
    ck_assert_int_eq(xent_config_format(&c, text, sizeof text), XENT_OK);
    ck_assert_ptr_null(strstr(text, "ASYNC"));
    xent_config again;
    ck_assert_int_eq(xent_config_parse(text, &again, why, sizeof why), XENT_OK);
    ck_assert_mem_eq(&again, &c, sizeof c);
}
END_TEST

/* POLY parses as 0 when left out; it is for 16-bit logits without TILE, and
 * the tuner offers it only for rows of 512 and more, where a chunk has at
 * least twice that many terms. */
START_TEST(poly_is_optional_and_constrained) {
    xent_config c;
    char why[160];
    parses_optional("VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", "POLY", 8, &c);
    ck_assert_msg(xent_config_legal(&c, XENT_BF16, why, sizeof why), "%s", why);
    ck_assert_msg(xent_config_legal(&c, XENT_F16, why, sizeof why), "%s", why);
    c.vec = 4;
    ck_assert(!xent_config_legal(&c, XENT_F32, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "POLY"));
    ck_assert_int_ne(xent_config_parse("VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 "
                                       "POLY=3",
                                       &c, why, sizeof why),
                     XENT_OK);
    ck_assert_int_eq(xent_config_parse("VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1 "
                                       "POLY=4",
                                       &c, why, sizeof why),
                     XENT_OK);
    ck_assert(!xent_config_legal(&c, XENT_BF16, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "TILE"));
    /* offered for bf16 32768x4096, never with fewer terms a chunk than POLY */
    size_t n;
    xent_config *cands = candidates_for(XENT_BF16, 32768, 4096, &n);
    int offered = 0;
    for (size_t i = 0; i < n; i++) {
        if (!cands[i].poly) continue;
        offered++;
        ck_assert_int_ge(cands[i].items * cands[i].vec, 2 * cands[i].poly);
    }
    ck_assert_int_gt(offered, 0);
    free(cands);
    /* not for short rows */
    cands = candidates_for(XENT_BF16, 1048576, 100, &n);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(cands[i].poly, 0);
    free(cands);
    /* and never for fp32 */
    cands = candidates_for(XENT_F32, 32768, 4096, &n);
    for (size_t i = 0; i < n; i++) ck_assert_int_eq(cands[i].poly, 0);
    free(cands);
}
END_TEST

/* The launch schedules (PERSIST) share a kernel; every other knob renders its own. */
START_TEST(same_kernel_across_static_grids) {
    static const struct {
        const char *a, *b;
        int same;
    } cases[] = {
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0",
         "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=3", 1},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
         "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 1},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
         "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=1", 0},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
         "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=1", 0},
        {"VEC=8 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0 POLY=8",
         "VEC=8 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=3 POLY=4", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xent_config a, b;
        ck_assert_int_eq(xent_config_parse(cases[i].a, &a, NULL, 0), XENT_OK);
        ck_assert_int_eq(xent_config_parse(cases[i].b, &b, NULL, 0), XENT_OK);
        ck_assert_msg(!xent_config_same_kernel(&a, &b) == !cases[i].same, "%s / %s", cases[i].a, cases[i].b);
        ck_assert_msg(!xent_config_same_kernel(&b, &a) == !cases[i].same, "%s / %s", cases[i].b, cases[i].a);
    }
}
END_TEST

START_TEST(persistent_grids) {
    ck_assert_int_eq(xent_persistent_grid(8192, 528, 0), 8192); /* not persistent: every group */
    ck_assert_int_eq(xent_persistent_grid(792, 396, 0), 792);   /* two whole rounds */
    ck_assert_int_eq(xent_persistent_grid(396, 396, 0), 396);   /* one round */
    ck_assert_int_eq(xent_persistent_grid(412, 396, 0), 206);   /* not a partial second round */
    ck_assert_int_eq(xent_persistent_grid(791, 396, 0), 396);
    ck_assert_int_eq(xent_persistent_grid(8192, 528, 1), 528);
    ck_assert_int_eq(xent_persistent_grid(8192, 528, 3), 512); /* 16 rounds each, none left over */
    ck_assert_int_eq(xent_persistent_grid(4096, 396, 3), 373); /* 11 rounds: 372 blocks would need 12 */
    ck_assert_int_eq(xent_persistent_grid(300, 528, 3), 300);  /* one round: unchanged */
    for (long long g = 1; g < 5000; g += 37)
        for (long long r = 1; r < 700; r += 53) {
            long long b = xent_persistent_grid(g, r, 3);
            long long rounds = (g + r - 1) / r;
            ck_assert(b >= 1 && b <= r && b <= g);
            ck_assert_int_eq((g + b - 1) / b, rounds); /* the same rounds as the full grid */
        }
}
END_TEST

START_TEST(constraints_hold) {
    xent_config c = {4, 32, 128, 8, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0};
    char why[160];
    ck_assert(xent_config_legal(&c, XENT_F32, why, sizeof why));
    c.vec = 8; /* 32 bytes per load */
    ck_assert(!xent_config_legal(&c, XENT_F32, why, sizeof why));
    ck_assert(xent_config_legal(&c, XENT_BF16, why, sizeof why));
    c.vec = 1; /* a 2-byte load is not offered */
    ck_assert(!xent_config_legal(&c, XENT_F16, why, sizeof why));
    c = (xent_config){4, 64, 128, 8, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0}; /* team wider than a warp needs BLOCK == TPR */
    ck_assert(!xent_config_legal(&c, XENT_F32, why, sizeof why));
    c.block = 64;
    ck_assert(xent_config_legal(&c, XENT_F32, why, sizeof why));
    c = (xent_config){4, 32, 512, 32, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0}; /* 128 words of chunk at 128 registers a thread */
    ck_assert(!xent_config_legal(&c, XENT_F32, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "registers"));
}
END_TEST

START_TEST(heuristic_is_legal_and_covers_rows) {
    const long long shapes[][2] = {{1, 1},        {1, 2},       {3, 7},         {1048576, 10},  {32768, 4096},
                                   {4096, 32000}, {64, 262144}, {8192, 128256}, {16384, 50257}, {2, 1000000}};
    for (int di = 0; di < 3; di++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            xent_problem p;
            xent_config c;
            char why[160];
            xent_problem_init(&p, shapes[i][0], shapes[i][1]);
            p.logits = dtypes[di];
            xent_config_heuristic(&p, 132, &c);
            ck_assert_msg(xent_config_legal(&c, p.logits, why, sizeof why), "%lldx%lld: %s", shapes[i][0], shapes[i][1],
                          why);
            ck_assert_int_ge(p.n * c.split, 1);
        }
}
END_TEST

START_TEST(relevant_candidates_are_a_legal_subset) {
    /* the last two: rows too long for any team's registers still get candidates */
    const long long shapes[][2] = {{32768, 4096},  {64, 262144},    {1048576, 10}, {1, 1},
                                   {16384, 50257}, {4096, 1048576}, {1, 134217728}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        xent_problem p;
        xent_problem_init(&p, shapes[i][0], shapes[i][1]);
        size_t n, nfull;
        xent_config *rel = enumerate_all(XENT_F32, &p, &n);
        free(enumerate_all(XENT_F32, NULL, &nfull));
        ck_assert_uint_gt(n, 0);
        for (size_t k = 0; k < n; k++) ck_assert(xent_config_legal(&rel[k], XENT_F32, NULL, 0));
        /* few rows: splitting must be among the candidates */
        int any_split = 0;
        for (size_t k = 0; k < n; k++) any_split |= rel[k].split > 1;
        ck_assert_int_eq(any_split, p.n < 2 * 132 && p.c > 4096);
        free(rel);
    }
}
END_TEST

/* PERSIST=2 (rows taken from a counter) won no tune and left the space: a
 * cache's config with it is refused by name, not run. */
START_TEST(retired_persist_refused) {
    xent_config c;
    char why[256] = "";
    ck_assert_int_eq(xent_config_parse("VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=2", &c,
                                       why, sizeof why),
                     XENT_EINVAL);
    ck_assert_msg(strstr(why, "PERSIST") && strstr(why, "'2'"), "%s", why);
}
END_TEST

/* TILE's dynamic shared memory is the template's layout (tile_region): per
 * warp, 32 rows plus VEC elements of room for the span's misalignment, each
 * region rounded up to 16 bytes; what does not fit 48 KB is refused. */
START_TEST(tile_shared_memory_is_per_warp) {
    xent_config c = {4, 1, 128, 1, 2, 0, 1, 1, 1, 0, 0, 0, 0, 0}; /* VEC=4 TPR=1 BLOCK=128 ... TILE=1 */
    char why[160] = "";
    ck_assert_msg(xent_config_legal(&c, XENT_F32, why, sizeof why), "%s", why); /* 16-byte loads */
    xent_problem p;
    xent_problem_init(&p, 1048576, 10);
    ck_assert_uint_eq(xent_config_smem(&c, &p), 4 * 1296); /* (32*10 + 4) * 4 bytes, 16-aligned already */
    c.vec = 2;
    p.logits = XENT_F16;
    p.c = p.row_stride = 3;
    ck_assert_uint_eq(xent_config_smem(&c, &p), 4 * 208); /* (32*3 + 2) * 2 = 196, rounded up */
    c.block = 512;
    p.logits = XENT_F32;
    p.c = 10;
    p.row_stride = 13;
    ck_assert_uint_eq(xent_config_smem(&c, &p), 16 * 1680); /* the stride, not c: (416 + 2) * 4 = 1672 */
    c.tile = 0;
    ck_assert_uint_eq(xent_config_smem(&c, &p), 0);
    /* 16 warps of 23 fp32 fit 48 KB (47360 bytes); of 24 (49408) they do not */
    c = (xent_config){4, 1, 512, 1, 2, 0, 1, 1, 1, 0, 0, 0, 0, 0};
    xent_problem_init(&p, 1048576, 23);
    ck_assert(xent_config_fits(&c, &p, NULL, 0));
    p.c = p.row_stride = 24;
    ck_assert(!xent_config_fits(&c, &p, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "TILE"));
    p.c = 10;
    p.row_stride = (int64_t)1 << 40; /* no overflow on the way to a refusal */
    ck_assert(!xent_config_fits(&c, &p, NULL, 0));
    /* the tuner offers TILE with 16-byte loads for tiny rows, and only what fits */
    xent_problem_init(&p, 1048576, 10);
    size_t n;
    xent_config *rel = enumerate_all(XENT_F32, &p, &n);
    int wide = 0;
    for (size_t i = 0; i < n; i++) {
        wide |= rel[i].tile && rel[i].vec == 4;
        ck_assert(!rel[i].tile || xent_config_smem(&rel[i], &p) <= 48 * 1024);
    }
    ck_assert(wide);
    free(rel);
}
END_TEST

START_TEST(defines_follow_the_problem) {
    xent_config c = {4, 32, 128, 8, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    xent_problem p;
    xent_problem_init(&p, 10, 100);
    p.has_weights = 1;
    p.label_smoothing = 0.1f;
    p.write_lse = 1;
    p.reduction = XENT_REDUCE_SUM;
    p.targets = XENT_I32;
    char *d = xent_render_defines(&c, &p);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_WEIGHTS 1\n"));
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_SMOOTHING 1\n"));
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_LSE 1\n"));
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_REDUCTION 1\n"));
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_TARGET 0\n"));
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_PASSES 2\n"));
    ck_assert_ptr_null(strstr(d, "XENT_SPLIT"));              /* launch knobs are not compiled in */
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_C 100\n")); /* short rows: c is compiled in */
    free(d);
    p.c = p.row_stride = 257;
    d = xent_render_defines(&c, &p);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_null(strstr(d, "XENT_C ")); /* longer rows share a kernel across c */
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_SEGMENTED 0\n"));
    free(d);
    c.split = 32; /* split rows share one kernel across their splits, whole rows leave out its combine */
    d = xent_render_defines(&c, &p);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(strstr(d, "#define XENT_SEGMENTED 1\n"));
    ck_assert_ptr_null(strstr(d, "XENT_SPLIT"));
    free(d);
}
END_TEST

/* XENT_FINISH_APART is rendered exactly for a sum or mean of whole rows of
 * 32 MB of logits or more (counted at the row stride) that is not one block;
 * none, split rows and the training kernels keep their own finish. */
#define ONE_PASS " PASSES=1 CACHE=0 TILE=0 "
START_TEST(finish_apart_define_follows_the_bytes) {
    static const struct {
        long long n, c, stride;
        xent_dtype dt;
        xent_reduction red;
        const char *cfg;
        int grad, apart;
    } cases[] = {
        {8192, 1024, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=32 BLOCK=128 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=1", 0,
         1},
        {8191, 1024, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=32 BLOCK=128 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=1", 0,
         0},
        {8191, 1000, 1024, XENT_F32, XENT_REDUCE_SUM, "VEC=4 TPR=32 BLOCK=128 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=0", 0,
         0},
        {8192, 1000, 1024, XENT_F32, XENT_REDUCE_SUM, "VEC=4 TPR=32 BLOCK=128 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=0", 0,
         1},
        {16384, 1024, 0, XENT_BF16, XENT_REDUCE_MEAN, "VEC=8 TPR=32 BLOCK=128 ITEMS=4" ONE_PASS "SPLIT=1 PERSIST=3", 0,
         1},
        {16383, 1024, 0, XENT_F16, XENT_REDUCE_MEAN, "VEC=8 TPR=32 BLOCK=128 ITEMS=4" ONE_PASS "SPLIT=1 PERSIST=3", 0,
         0},
        {1048576, 10, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=2 TPR=1 BLOCK=512 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=3", 0,
         1},
        {32768, 4096, 0, XENT_F32, XENT_REDUCE_NONE, "VEC=4 TPR=32 BLOCK=256 ITEMS=16" ONE_PASS "SPLIT=1 PERSIST=3", 0,
         0},
        {64, 262144, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=256 BLOCK=256 ITEMS=8" ONE_PASS "SPLIT=4 PERSIST=0", 0,
         0},
        {1, 16777216, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=512 BLOCK=512 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=0", 0,
         0},
        {32768, 4096, 0, XENT_F32, XENT_REDUCE_MEAN, "VEC=4 TPR=32 BLOCK=128 ITEMS=8" ONE_PASS "SPLIT=1 PERSIST=0", 1,
         0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xent_config c;
        char why[200];
        ck_assert_msg(xent_config_parse(cases[i].cfg, &c, why, sizeof why) == XENT_OK, "%s: %s", cases[i].cfg, why);
        xent_problem p;
        xent_problem_init(&p, cases[i].n, cases[i].c);
        p.logits = cases[i].dt;
        p.reduction = cases[i].red;
        p.row_stride = cases[i].stride;
        if (cases[i].grad) p.op = XENT_OP_FUSED;
        ck_assert_msg(!!xent_fwd_finish_apart(&c, &p) == cases[i].apart, "case %zu", i);
        char *d = xent_render_defines(&c, &p);
        ck_assert_ptr_nonnull(d);
        ck_assert_msg(!strstr(d, "#define XENT_FINISH_APART 1\n") == !cases[i].apart, "case %zu: %s", i, d);
        free(d);
    }
}
END_TEST
#undef ONE_PASS

/* XENT_ONE_BLOCK is rendered exactly for a sum or mean of whole rows whose
 * teams take them all in one block: as many rows as teams, whatever PERSIST;
 * XENT_EDGES_ONCE for those of the online pass whose c or row stride is not a
 * multiple of VEC. */
START_TEST(one_block_define_follows_the_launch) {
    static const struct {
        const char *cfg;
        long long n, c, stride;
        xent_reduction red;
        int grad, one, edges;
    } cases[] = {
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1000, 0, XENT_REDUCE_MEAN, 0,
         1, 0}, /* 4 teams, 4 rows */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1001, 0, XENT_REDUCE_MEAN, 0,
         1, 1}, /* rows end off a vector */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1000, 1002, XENT_REDUCE_SUM,
         0, 1, 1}, /* rows start off one */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 5, 1001, 0, XENT_REDUCE_MEAN, 0,
         0, 0}, /* a fifth row: 2 blocks */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=3", 1, 1000, 0, XENT_REDUCE_SUM, 0, 1,
         0},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1001, 0, XENT_REDUCE_NONE, 0,
         0, 0}, /* no finish */
        {"VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 1, 1000, 0, XENT_REDUCE_MEAN, 0,
         1, 0}, /* a block a row */
        {"VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 2, 1000, 0, XENT_REDUCE_MEAN, 0,
         0, 0},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=2 PERSIST=0", 1, 1001, 0, XENT_REDUCE_MEAN, 0,
         0, 0}, /* split rows finish apart */
        {"VEC=1 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=0", 128, 1001, 0, XENT_REDUCE_MEAN, 0,
         1, 0}, /* staged tiles: no online pass */
        {"VEC=1 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=0", 129, 1000, 0, XENT_REDUCE_MEAN, 0,
         0, 0},
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1001, 0, XENT_REDUCE_MEAN, 0,
         1, 0}, /* max then sum: no online pass */
        {"VEC=1 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1", 4, 1001, 0, XENT_REDUCE_MEAN, 0,
         1, 0}, /* scalar loads have no edges */
        {"VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 2, 1001, 0, XENT_REDUCE_MEAN, 1,
         0, 0}, /* the training kernels */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        xent_config c;
        char why[200];
        ck_assert_msg(xent_config_parse(cases[i].cfg, &c, why, sizeof why) == XENT_OK, "%s: %s", cases[i].cfg, why);
        xent_problem p;
        xent_problem_init(&p, cases[i].n, cases[i].c);
        p.row_stride = cases[i].stride;
        p.reduction = cases[i].red;
        if (cases[i].grad) p.op = XENT_OP_FUSED;
        ck_assert_int_eq(!!xent_fwd_one_block(&c, &p), cases[i].one);
        ck_assert_int_eq(!!xent_fwd_edges_once(&c, &p), cases[i].edges);
        char *d = xent_render_defines(&c, &p);
        ck_assert_ptr_nonnull(d);
        ck_assert_msg(!strstr(d, "#define XENT_ONE_BLOCK 1\n") == !cases[i].one, "case %zu: %s", i, d);
        ck_assert_msg(!strstr(d, "#define XENT_EDGES_ONCE 1\n") == !cases[i].edges, "case %zu: %s", i, d);
        free(d);
        if (!cases[i].grad && c.split == 1) { /* one group is one block, and more are more */
            const long long groups = xent_fwd_groups(&c, &p);
            for (int persist = 0; persist <= 3; persist += persist ? 2 : 1)
                ck_assert_int_eq(xent_persistent_grid(groups, 528, persist) == 1, groups == 1);
        }
    }
}
END_TEST

/* Only split rows need the per-row workspace: unsplit configs fit however many
 * rows there are, the tuner lists candidates and the heuristic's config fits. */
START_TEST(many_rows_fit_unsplit) {
    static const struct {
        long long n, c;
    } shapes[] = {
        {4194305, 10}, {8388608, 10}, {16777216, 128}, {1LL << 30, 64}, {INT64_MAX / 128 / 2, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int di = 0; di < 3; di++) {
            xent_problem p;
            xent_config c;
            char why[160] = "";
            xent_problem_init(&p, shapes[i].n, shapes[i].c);
            p.logits = dtypes[di];
            ck_assert_int_eq(xent_problem_check(&p, why, sizeof why), XENT_OK);
            xent_config_heuristic(&p, 132, &c);
            ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why), "%lldx%lld heuristic: %s", shapes[i].n,
                          shapes[i].c, why);
            size_t n;
            xent_config *rel = enumerate_all(dtypes[di], &p, &n);
            ck_assert_msg(n > 0, "%lldx%lld: no candidates", shapes[i].n, shapes[i].c);
            for (size_t k = 0; k < n; k++) ck_assert(xent_config_fits(&rel[k], &p, NULL, 0));
            free(rel);
        }
    /* split rows still stop at the workspace limit, without overflowing on the way */
    xent_config c = {4, 32, 128, 8, 1, 0, 2, 1, 0, 0, 0, 0, 0, 0};
    xent_problem p;
    char why[160] = "";
    xent_problem_init(&p, 1 << 21, 4096);
    ck_assert(xent_config_fits(&c, &p, NULL, 0));
    p.n = (1 << 21) + 1;
    ck_assert(!xent_config_fits(&c, &p, why, sizeof why));
    ck_assert_ptr_nonnull(strstr(why, "SPLIT"));
    p.n = INT64_MAX;
    ck_assert(!xent_config_fits(&c, &p, NULL, 0));
    c.split = 1;
    ck_assert(xent_config_fits(&c, &p, NULL, 0));
}
END_TEST

/* got is the config text want (parsed: the knobs it leaves out read as
 * their first values), for problem p. */
static void assert_config_is(const xent_config *got, const char *want, const xent_problem *p) {
    xent_config w;
    char a[200], b[200], why[160];
    ck_assert_msg(xent_config_parse(want, &w, why, sizeof why) == XENT_OK, "%s", why);
    xent_config_format(got, a, sizeof a);
    xent_config_format(&w, b, sizeof b);
    ck_assert_msg(!strcmp(a, b), "%lldx%lld dtype %d: %s, want %s", (long long)p->n, (long long)p->c, (int)p->logits, a,
                  b);
}

/* The heuristic's table (tools/heuristic-table.py over tunecache/h200.sql)
 * answers with the tuned winner of each cell's entry, the chunk read at this
 * dtype's vector width; other shapes of a cell take its knobs, few rows
 * split by the rule, and a 16-bit dtype without entries of its own the
 * other size's cell. The expected texts are the shipped winners where the
 * shape is the cell's entry. */
typedef struct heur_case {
    int64_t n, c;
    xent_dtype d;
    const char *want;
} heur_case;

static const heur_case heur_cases[] = {
    /* cells' own entries: the shipped winners, their plain loads evict-first */
    {1048576, 10, XENT_F32, "VEC=2 TPR=1 BLOCK=512 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=3"},
    {1048576, 100, XENT_F32, "VEC=4 TPR=4 BLOCK=128 ITEMS=8 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    {65536, 4096, XENT_F32, "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    {16384, 50257, XENT_F32, "VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3"},
    {16, 262144, XENT_BF16, "VEC=8 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=16 PERSIST=1"},
    {65536, 4096, XENT_BF16, "VEC=8 TPR=8 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    {1048576, 100, XENT_BF16, "VEC=4 TPR=2 BLOCK=128 ITEMS=16 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* a shape between entries: its band's cell (fp16 reads the 2-byte cells) */
    {65536, 8192, XENT_F16, "VEC=8 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    {12288, 50257, XENT_BF16, "VEC=8 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3"},
    /* a cell's chunk halved where a row's last chunk would be mostly empty (fit_chunks) */
    {8192, 20000, XENT_F32, "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* 8x50257's VEC=1 ITEMS=32 chunk is 128 bytes: ITEMS=8 at VEC=4; its 16 segments
     * are the rule's 64 (8 rows x 64 x 128 threads within 497 threads an SM) */
    {8, 50257, XENT_F32, "VEC=4 TPR=128 BLOCK=128 ITEMS=8 PASSES=2 CACHE=2 TILE=0 SPLIT=64 PERSIST=1"},
    /* few rows: 7 rows x 32 segments x 256 threads within 497 threads an SM (64 segments exceed it) */
    {7, 1000003, XENT_F32, "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=32 PERSIST=0"},
    /* tiny rows: a thread per row, staged in shared memory */
    {3, 7, XENT_F32, "VEC=1 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1"},
    /* a cell's team is no wider than the row: 15 vectors in the c <= 173 band's 32-thread cell */
    {1, 120, XENT_BF16, "VEC=8 TPR=16 BLOCK=128 ITEMS=1 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* short rows load their alignment's vector, the cell's chunk in bytes as as many of them:
     * 555 fp32 rows start 4-byte aligned (128 bytes, 32 of them), 434 fp16 rows 4-byte
     * aligned (64 bytes, 16 of them) */
    {373, 555, XENT_F32, "VEC=1 TPR=32 BLOCK=128 ITEMS=32 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    {14309, 434, XENT_F16, "VEC=2 TPR=2 BLOCK=256 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* rows aligned to 2 bytes take the widest vector and scalar edges */
    {18242, 1151, XENT_F16, "VEC=8 TPR=8 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* and so do fp32 rows of 100-255 classes, however aligned (xent_row_vec) */
    {300000, 201, XENT_F32, "VEC=4 TPR=4 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"},
    /* short 16-bit rows on an odd stride staged by warps (stage_odd_rows), as a fitted entry's are */
    {3, 11, XENT_BF16, "VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1"},
};

/* A config made for other rows (a nearest entry's, of n_from rows), fitted
 * to a problem's: its segments a row scaled to keep the entry's rows x
 * segments; narrowed to the vector short rows' alignment takes, as many
 * elements a chunk; its team narrowed to the row's vectors and its chunk to
 * the team's share; two passes made one over rows longer than its chunk;
 * left alone for rows it already suits, long rows, split rows whose segments
 * it suits, the tile path and the training family. */
typedef struct fit_case {
    int64_t n, c, stride;
    xent_dtype d;
    xent_op op;
    const char *config, *want;
    int64_t n_from; /* the entry's rows; 0: the same as the problem's */
} fit_case;

#define FIT_FROM "VEC=4 TPR=16 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1"
/* FIT_FROM as a plan for another problem: its plain loads evict-first (evict_first) */
#define FIT_EVICT "VEC=4 TPR=16 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"
static const fit_case fit_cases[] = {
    {159110, 857, 857, XENT_F32, XENT_OP_FORWARD, FIT_FROM,
     "VEC=1 TPR=16 BLOCK=128 ITEMS=32 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {718339, 822, 822, XENT_F32, XENT_OP_FORWARD, FIT_FROM,
     "VEC=2 TPR=16 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* fp32 rows of 100-255 classes keep the wide vector with scalar edges; shorter ones and 16-bit narrow */
    {66502, 215, 215, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=1 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=1 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {325269, 75, 75, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=4 BLOCK=128 ITEMS=8 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=1 TPR=4 BLOCK=128 ITEMS=32 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {614587, 145, 145, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=2 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=2 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* 16-bit rows too few for 3.2 blocks an SM take a warp team twice as wide, half the chunk a lane */
    {4863, 1104, 1104, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=16 BLOCK=128 ITEMS=2 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {7741, 1152, 1152, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {14309, 434, 434, XENT_F16, XENT_OP_FORWARD,
     "VEC=2 TPR=4 BLOCK=128 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=4 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* fp32 keeps its team below the bound (as many faster as slower or equal) */
    {2096, 739, 740, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=8 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=8 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* aligned rows, and a padded stride that aligns them */
    {8192, 1000, 1000, XENT_F32, XENT_OP_FORWARD, FIT_FROM, FIT_EVICT, 0},
    {8192, 999, 1000, XENT_F32, XENT_OP_FORWARD, FIT_FROM, FIT_EVICT, 0},
    /* rows past 8 KB */
    {4096, 2049, 2049, XENT_F32, XENT_OP_FORWARD, FIT_FROM, FIT_EVICT, 0},
    /* a team wider than the row, a chunk longer than a lane's share */
    {600, 249, 249, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=128 BLOCK=128 ITEMS=1 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* a sum or mean of a few KB whose rows fit one block takes one: teams
     * narrowed until the block holds every row, each row one chunk; a wider
     * block where 128 threads do not hold them (reduction none: below) */
    {5, 249, 249, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=16 BLOCK=128 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {25, 175, 175, XENT_F16, XENT_OP_FORWARD,
     "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 POLY=4",
     "VEC=2 TPR=4 BLOCK=128 ITEMS=32 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=0", 0},
    {200, 16, 16, XENT_F32, XENT_OP_FORWARD, "VEC=4 TPR=4 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=1 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {0, 175, 175, XENT_F16, XENT_OP_FORWARD, /* no rows: nothing to fit them to */
     "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=0",
     "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=0", 0},
    {367696, 217, 217, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=8 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=8 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {1024, 100, 100, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3",
     "VEC=4 TPR=32 BLOCK=128 ITEMS=1 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3", 0},
    {8, 100000, 100000, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=8 PERSIST=1",
     "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=8 PERSIST=1", 0},
    /* split rows keep about the entry's rows x segments: more segments for
     * fewer rows, none where the rows alone are as many */
    {7, 1000003, 1000003, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=16 PERSIST=0",
     "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=32 PERSIST=0", 16},
    {229, 12489, 12489, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=2 PERSIST=1 POLY=8",
     "VEC=8 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1 POLY=8", 64},
    {100, 100000, 100000, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=8 PERSIST=1",
     "VEC=4 TPR=512 BLOCK=512 ITEMS=8 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=1", 8},
    {1, 4096, 4096, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=8 PERSIST=1",
     "VEC=4 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=8 PERSIST=1", 1},
    /* two passes over rows longer than the chunk take one (the row is not read twice) */
    {367696, 217, 217, XENT_BF16, XENT_OP_FORWARD,
     "VEC=4 TPR=2 BLOCK=128 ITEMS=16 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=2 BLOCK=128 ITEMS=32 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 1048576},
    {1048576, 100, 100, XENT_BF16, XENT_OP_FORWARD,
     "VEC=4 TPR=2 BLOCK=128 ITEMS=16 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=2 BLOCK=128 ITEMS=16 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* a last chunk mostly empty: the chunk halves while a quarter of its
     * loads would be masked out, down to 64 bytes a lane */
    {5501, 16908, 16912, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3",
     "VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3", 4096},
    {13, 8296, 8296, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=128 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 64},
    {4096, 32000, 32000, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3",
     "VEC=4 TPR=256 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3", 0},
    /* a 16-bit row of two chunks a quarter empty whose lanes load 64 bytes
     * narrows its warp team where the rows still fill every SM's threads (132
     * SMs: 270336); fp32 rows, rows of three chunks and rows that fill a
     * quarter keep it (and widen it, as few 16-bit rows do) */
    {18242, 1151, 1151, XENT_F16, XENT_OP_FORWARD,
     "VEC=8 TPR=32 BLOCK=512 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 POLY=8",
     "VEC=8 TPR=16 BLOCK=512 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 POLY=8", 16384},
    {45188, 703, 703, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=16 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {20777, 649, 649, XENT_F32, XENT_OP_FORWARD,
     "VEC=1 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=1 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {88315, 2179, 2179, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0",
     "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0", 0},
    {3951, 529, 529, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=8 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0 POLY=8",
     "VEC=8 TPR=16 BLOCK=256 ITEMS=2 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0 POLY=8", 8192},
    /* a row of two short lane chunks takes one chunk of twice the items;
     * not 16 scalar loads a lane */
    {4166, 232, 252, XENT_F16, XENT_OP_FORWARD,
     "VEC=4 TPR=8 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=16 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 16384},
    {1461, 171, 171, XENT_F32, XENT_OP_FORWARD,
     "VEC=4 TPR=32 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=32 BLOCK=128 ITEMS=2 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 1024},
    {159110, 857, 857, XENT_F32, XENT_OP_FORWARD,
     "VEC=1 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=1 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 262144},
    /* 16-bit rows of up to 32 bytes on an odd stride are staged by a warp
     * (stage_odd_rows); longer ones, even strides and fp32 keep their teams */
    {2, 2, 37, XENT_BF16, XENT_OP_FORWARD,
     "VEC=2 TPR=1 BLOCK=128 ITEMS=1 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=1 SPLIT=1 PERSIST=1", 1},
    {3, 11, 11, XENT_BF16, XENT_OP_FORWARD,
     "VEC=8 TPR=32 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1", 1},
    {564, 5, 31, XENT_BF16, XENT_OP_FORWARD,
     "VEC=2 TPR=4 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1 POLY=8",
     "VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=1 SPLIT=1 PERSIST=1", 0},
    {7, 27, 27, XENT_F16, XENT_OP_FORWARD,
     "VEC=2 TPR=16 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=16 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {3, 12, 12, XENT_BF16, XENT_OP_FORWARD,
     "VEC=4 TPR=4 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=4 TPR=4 BLOCK=128 ITEMS=1 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {3, 11, 11, XENT_F32, XENT_OP_FORWARD,
     "VEC=1 TPR=4 BLOCK=128 ITEMS=4 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=1 TPR=4 BLOCK=128 ITEMS=4 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    {8192, 11, 11, XENT_BF16, XENT_OP_FORWARD, /* 176 KB: past the problems timed */
     "VEC=2 TPR=2 BLOCK=128 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1",
     "VEC=2 TPR=4 BLOCK=128 ITEMS=2 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1", 0},
    /* the tile path and the training family */
    {1048576, 7, 7, XENT_F32, XENT_OP_FORWARD,
     "VEC=1 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1",
     "VEC=1 TPR=1 BLOCK=128 ITEMS=1 PASSES=2 CACHE=0 TILE=1 SPLIT=1 PERSIST=1", 0},
    {8192, 857, 857, XENT_F32, XENT_OP_FUSED,
     "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0",
     "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0", 0},
};

START_TEST(fit_rows_to_the_problem) {
    const fit_case *t = &fit_cases[_i];
    xent_problem p;
    xent_config got;
    char why[160];
    xent_problem_init(&p, t->n, t->c);
    p.row_stride = t->stride;
    p.logits = t->d;
    p.op = t->op;
    ck_assert_msg(xent_config_parse(t->config, &got, why, sizeof why) == XENT_OK, "%s", why);
    xent_config_fit_rows(&got, t->n_from ? t->n_from : t->n, &p, 132);
    assert_config_is(&got, t->want, &p);
}
END_TEST

/* Rows without a sum to finish keep their blocks: one block would only serialize them. */
START_TEST(reduction_none_keeps_its_blocks) {
    const char *config = "VEC=2 TPR=32 BLOCK=128 ITEMS=4 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=0";
    xent_problem p;
    xent_config got;
    xent_problem_init(&p, 25, 175);
    p.logits = XENT_F16;
    p.reduction = XENT_REDUCE_NONE;
    ck_assert_int_eq(xent_config_parse(config, &got, NULL, 0), XENT_OK);
    xent_config_fit_rows(&got, 25, &p, 132);
    assert_config_is(&got, config, &p);
    p.reduction = XENT_REDUCE_SUM; /* the same rows summed take one block */
    xent_config_fit_rows(&got, 25, &p, 132);
    ck_assert_int_eq(xent_fwd_groups(&got, &p), 1);
}
END_TEST

START_TEST(heuristic_follows_the_table) {
    const heur_case *t = &heur_cases[_i];
    xent_problem p;
    xent_config got;
    xent_problem_init(&p, t->n, t->c);
    p.logits = t->d;
    xent_config_heuristic(&p, 132, &got);
    assert_config_is(&got, t->want, &p);
}
END_TEST

/* gen/heuristic.c's table is what tools/heuristic-table.py derives from the
 * shipped tunecache/h200.sql: a retuned cache without a regenerated table
 * fails here (docs/cache.md, "How the heuristic is derived"). Skipped, with
 * a line saying so, where there is no python3. */
START_TEST(heuristic_table_is_derived_from_the_cache) {
    if (system("command -v python3 > /dev/null 2>&1") != 0) {
        fprintf(stderr, "heuristic table: no python3, not checked\n");
        return;
    }
    int rc = system("python3 tools/heuristic-table.py tunecache/h200.sql --check gen/heuristic.c > /dev/null");
    ck_assert_msg(rc == 0, "gen/heuristic.c's heuristic table differs from tools/heuristic-table.py's output "
                           "(run it with --check gen/heuristic.c to see how)");
}
END_TEST

/* Row-count bands scale with the SM count: 100 rows are few on 132 SMs
 * (split), not on 78 (an H20: one team a row). */
START_TEST(heuristic_bands_follow_the_sm_count) {
    xent_problem p;
    xent_config c;
    xent_problem_init(&p, 100, 262144);
    xent_config_heuristic(&p, 132, &c);
    ck_assert_int_gt(c.split, 1);
    xent_config_heuristic(&p, 78, &c);
    ck_assert_int_eq(c.split, 1);
}
END_TEST

/* Every problem the random harness may draw gets a config that runs it:
 * each dtype, reduction and option, n from 1 to 4M, c from 1 to 1M,
 * strided rows among them (a tile cell whose stride does not fit falls
 * back to the rule). */
START_TEST(heuristic_fits_every_problem) {
    static const int64_t ns[] = {1, 2, 7, 16, 100, 131, 132, 1000, 4223, 4224, 65536, 4194304};
    static const int64_t cs[] = {1,    2,    3,    5,     10,    31,    32,    100,    255,    256,    317,
                                 1000, 2024, 4096, 11449, 32000, 50257, 80286, 151936, 262144, 1000000};
    char why[160];
    int checked = 0;
    for (int di = 0; di < 3; di++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t j = 0; j < sizeof cs / sizeof cs[0]; j++)
                for (int v = 0; v < 4; v++) {
                    xent_problem p;
                    xent_config c;
                    xent_problem_init(&p, ns[i], cs[j]);
                    p.logits = dtypes[di];
                    p.reduction = (xent_reduction)(v % 3);
                    p.has_weights = v == 3;
                    p.label_smoothing = v == 3 ? 0.1f : 0.0f;
                    p.write_lse = v == 1;
                    p.row_stride = v == 2 ? cs[j] + 4096 : cs[j];
                    xent_config_heuristic(&p, 132, &c);
                    ck_assert_msg(xent_config_fits(&c, &p, why, sizeof why), "%lldx%lld dtype %d v%d: %s",
                                  (long long)ns[i], (long long)cs[j], di, v, why);
                    checked++;
                }
    ck_assert_int_eq(checked, 3 * 12 * 21 * 4);
}
END_TEST

int main(void) {
    Suite *s = suite_create("space");
    TCase *tc = tcase_create("space");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, knob_table_is_consistent);
    tcase_add_test(tc, every_config_renders);
    tcase_add_test(tc, text_round_trip);
    tcase_add_test(tc, parse_rejects_bad_text);
    tcase_add_test(tc, prefetch_is_optional_and_the_training_familys);
    tcase_add_loop_test(tc, retired_knob_reads_as_zero, 0, (int)(sizeof retired_cases / sizeof retired_cases[0]));
    tcase_add_test(tc, poly_is_optional_and_constrained);
    tcase_add_test(tc, persistent_grids);
    tcase_add_test(tc, same_kernel_across_static_grids);
    tcase_add_test(tc, constraints_hold);
    tcase_add_test(tc, heuristic_is_legal_and_covers_rows);
    tcase_add_test(tc, relevant_candidates_are_a_legal_subset);
    tcase_add_test(tc, defines_follow_the_problem);
    tcase_add_test(tc, one_block_define_follows_the_launch);
    tcase_add_test(tc, finish_apart_define_follows_the_bytes);
    tcase_add_test(tc, retired_persist_refused);
    tcase_add_test(tc, tile_shared_memory_is_per_warp);
    tcase_add_test(tc, many_rows_fit_unsplit);
    tcase_add_loop_test(tc, heuristic_follows_the_table, 0, (int)(sizeof heur_cases / sizeof heur_cases[0]));
    tcase_add_loop_test(tc, fit_rows_to_the_problem, 0, (int)(sizeof fit_cases / sizeof fit_cases[0]));
    tcase_add_test(tc, reduction_none_keeps_its_blocks);
    tcase_add_test(tc, heuristic_bands_follow_the_sm_count);
    tcase_add_test(tc, heuristic_table_is_derived_from_the_cache);
    tcase_add_test(tc, heuristic_fits_every_problem);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
