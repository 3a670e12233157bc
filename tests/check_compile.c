/* check_compile — NVRTC compiles configurations to sm_90 CUBINs with no GPU;
 * the ptxas report shows no spills; the kernel cache works in memory and on
 * disk. The full space compiles with XENT_COMPILE_ALL=1 (a few minutes on
 * 16 cores); by default a stated sample: every 24th fp32 config, every 48th
 * fp16 and bf16 config, every TILE config, every 96th fp32 and 128th bf16 config
 * for short rows (c compiled in: XENT_C), the heuristic's config for the
 * benchmark shapes (and, slow, for sm_80 to sm_120), and the configs the GPU
 * sweep once found spilling. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gen/gen.h"
#include "tune/tune.h"
#include "tests/files.h"
#include "tests/run_suite.h"

#define ARCH 90

static int cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Compile n configs for one problem (nprobs 1) or each for its own (nprobs n). */
static void compile_and_check_each(const xent_config *cfgs, int n, const xent_problem *p, int nprobs) {
    int *status = calloc((size_t)n, sizeof *status);
    xent_cubin *bins = calloc((size_t)n, sizeof *bins);
    char(*errs)[512] = calloc((size_t)n, sizeof *errs);
    ck_assert(status && bins && errs);
    xent_compile_many(cfgs, n, p, nprobs, ARCH, cpus(), status, bins, errs);
    for (int i = 0; i < n; i++) {
        char cfg[200];
        xent_config_format(&cfgs[i], cfg, sizeof cfg);
        ck_assert_msg(status[i] == XENT_OK, "%s: %s", cfg, errs[i]);
        ck_assert_msg(bins[i].size > 1000, "%s: CUBIN of %zu bytes", cfg, bins[i].size);
        ck_assert_msg(bins[i].registers > 0, "%s: no ptxas report", cfg);
        ck_assert_msg(bins[i].spill_bytes == 0, "%s: %d bytes spilled (%d registers)", cfg, bins[i].spill_bytes,
                      bins[i].registers);
        ck_assert_msg(bins[i].stack_bytes == 0, "%s: %d bytes stack frame", cfg, bins[i].stack_bytes);
        xent_cubin_free(&bins[i]);
    }
    free(status);
    free(bins);
    free(errs);
}

static void compile_and_check(const xent_config *cfgs, int n, const xent_problem *p) {
    compile_and_check_each(cfgs, n, p, 1);
}

static void compile_space(xent_dtype d, int every) {
    if (getenv("XENT_COMPILE_ALL")) every = 1;
    size_t n = xent_space_enumerate(d, NULL, 132, NULL, 0);
    xent_config *all = calloc(n, sizeof *all), *pick = calloc(n, sizeof *pick);
    ck_assert(all && pick);
    xent_space_enumerate(d, NULL, 132, all, n);
    int k = 0;
    for (size_t i = 0; i < n; i += (size_t)every) pick[k++] = all[i];
    xent_problem p;
    xent_problem_init(&p, 1000, 1000);
    p.logits = d;
    /* vary the problem defines across the sample too */
    for (int part = 0; part < 4; part++) {
        int lo = k * part / 4, hi = k * (part + 1) / 4;
        p.reduction = (xent_reduction)(part % 3);
        p.has_weights = part == 1 || part == 3;
        p.label_smoothing = part >= 2 ? 0.1f : 0.0f;
        p.write_lse = part == 3;
        p.targets = part % 2 ? XENT_I32 : XENT_I64;
        compile_and_check(pick + lo, hi - lo, &p);
    }
    fprintf(stderr, "compiled %d of %zu configs for dtype %d\n", k, n, (int)d);
    free(all);
    free(pick);
}

START_TEST(sample_f32) { compile_space(XENT_F32, 24); }
END_TEST
START_TEST(sample_f16) { compile_space(XENT_F16, 48); }
END_TEST
START_TEST(sample_bf16) { compile_space(XENT_BF16, 48); }
END_TEST

/* Every TILE config: the staging code differs by VEC and dtype, and the
 * sample above reaches few of them. Problem defines vary across them. */
START_TEST(tile_configs_compile) {
    for (int d = 0; d < 3; d++) {
        size_t n = xent_space_enumerate((xent_dtype)d, NULL, 132, NULL, 0);
        xent_config *all = calloc(n, sizeof *all);
        ck_assert_ptr_nonnull(all);
        xent_space_enumerate((xent_dtype)d, NULL, 132, all, n);
        int k = 0;
        for (size_t i = 0; i < n; i++)
            if (all[i].tile) all[k++] = all[i];
        ck_assert_int_gt(k, 0);
        xent_problem p;
        xent_problem_init(&p, 1048576, 10);
        p.logits = (xent_dtype)d;
        for (int part = 0; part < 3; part++) {
            int lo = k * part / 3, hi = k * (part + 1) / 3;
            /* rows of 10 and 3 unrolled, of 48 past TILE_UNROLL_C in loops */
            p.c = p.row_stride = part == 0 ? 10 : part == 1 ? 48 : 3;
            p.reduction = (xent_reduction)((part + 2) % 3);
            p.has_weights = part == 2;
            p.label_smoothing = part == 2 ? 0.1f : 0.0f;
            p.write_lse = part == 1;
            p.targets = part == 1 ? XENT_I32 : XENT_I64;
            compile_and_check(all + lo, hi - lo, &p);
        }
        fprintf(stderr, "compiled the %d TILE configs for dtype %d\n", k, d);
        free(all);
    }
}
END_TEST

/* Short rows render XENT_C (items no row fills are dropped, loops unroll):
 * class counts below a vector, around a chunk, and the largest rendered. */
START_TEST(fixed_c_configs_compile) {
    static const int cs[] = {1, 2, 3, 7, 10, 33, 100, 256};
    for (int d = XENT_F32; d <= XENT_BF16; d += XENT_BF16 - XENT_F32) {
        int every = getenv("XENT_COMPILE_ALL") ? 1 : d == XENT_F32 ? 96 : 128;
        size_t n = xent_space_enumerate((xent_dtype)d, NULL, 132, NULL, 0);
        xent_config *all = calloc(n, sizeof *all), *pick = calloc(n, sizeof *pick);
        xent_problem *probs = calloc(n, sizeof *probs);
        ck_assert(all && pick && probs);
        xent_space_enumerate((xent_dtype)d, NULL, 132, all, n);
        int k = 0;
        for (size_t i = 5; i < n; i += (size_t)every, k++) { /* offset: not the configs sample_* takes */
            xent_problem *p = &probs[k];
            pick[k] = all[i];
            xent_problem_init(p, 1000, cs[k % 8]);
            p->logits = (xent_dtype)d;
            p->reduction = (xent_reduction)(k % 3);
            p->has_weights = k % 4 == 1;
            p->label_smoothing = k % 4 >= 2 ? 0.1f : 0.0f;
            p->write_lse = k % 5 == 0;
            p->targets = k % 2 ? XENT_I32 : XENT_I64;
        }
        compile_and_check_each(pick, k, probs, k);
        fprintf(stderr, "compiled %d configs with XENT_C for dtype %d\n", k, d);
        free(all);
        free(pick);
        free(probs);
    }
}
END_TEST

START_TEST(heuristic_configs_compile) {
    const long long shapes[][2] = {{32768, 4096}, {4096, 32000}, {8192, 128256}, {16384, 50257},
                                   {64, 262144},  {1048576, 10}, {1, 1},         {3, 7}};
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            xent_problem p;
            xent_config c;
            xent_problem_init(&p, shapes[i][0], shapes[i][1]);
            p.logits = (xent_dtype)d;
            xent_config_heuristic(&p, 132, &c);
            compile_and_check(&c, 1, &p);
        }
}
END_TEST

/* The heuristic's plans, fitted to the architecture as the runtime fits
 * them, compile for the other architectures the library builds for (NVRTC
 * targets the GPU at hand): Turing, Ampere, Ada, Blackwell. The forward of
 * long rows, split rows and short rows, each dtype; the training family's
 * fused, backward and rescale kernels, but for 16-bit logits on Turing,
 * which the space refuses (xent_config_arch_fits). */
static const int other_archs[] = {75, 80, 86, 89, 100, 120};

START_TEST(heuristic_configs_compile_elsewhere) {
    static const struct {
        long long n, c;
        xent_dtype d;
        xent_op op;
    } plans[] = {
        {32768, 4096, XENT_F32, XENT_OP_FORWARD},   {32768, 4096, XENT_BF16, XENT_OP_FORWARD},
        {7, 1000003, XENT_F32, XENT_OP_FORWARD},    {1048576, 10, XENT_F16, XENT_OP_FORWARD},
        {32768, 4096, XENT_BF16, XENT_OP_FUSED},    {16384, 50257, XENT_F32, XENT_OP_FUSED},
        {16384, 50257, XENT_F32, XENT_OP_BACKWARD}, {4096, 4096, XENT_BF16, XENT_OP_RESCALE},
    };
    const int n = (int)(sizeof plans / sizeof plans[0]);
    xent_config cfgs[sizeof plans / sizeof plans[0]];
    xent_problem probs[sizeof plans / sizeof plans[0]];
    for (int i = 0; i < n; i++) {
        xent_problem_init(&probs[i], plans[i].n, plans[i].c);
        probs[i].logits = plans[i].d;
        probs[i].op = plans[i].op;
        xent_config_heuristic(&probs[i], 132, &cfgs[i]);
        xent_config_for_arch(&cfgs[i], &probs[i], other_archs[_i]);
    }
    int status[sizeof plans / sizeof plans[0]];
    xent_cubin bins[sizeof plans / sizeof plans[0]];
    char errs[sizeof plans / sizeof plans[0]][512];
    memset(bins, 0, sizeof bins);
    xent_compile_many(cfgs, n, probs, n, other_archs[_i], cpus(), status, bins, errs);
    for (int i = 0; i < n; i++) {
        const int refused = !xent_config_arch_fits(&cfgs[i], &probs[i], other_archs[_i], NULL, 0);
        ck_assert_int_eq(refused, other_archs[_i] < 80 && plans[i].op != XENT_OP_FORWARD && plans[i].d != XENT_F32);
        if (refused) {
            xent_cubin_free(&bins[i]);
            continue;
        }
        ck_assert_msg(status[i] == XENT_OK, "sm_%d, %lldx%lld op %d: %s", other_archs[_i], plans[i].n, plans[i].c,
                      plans[i].op, errs[i]);
        ck_assert_msg(bins[i].size > 1000, "sm_%d: CUBIN of %zu bytes", other_archs[_i], bins[i].size);
        xent_cubin_free(&bins[i]);
    }
}
END_TEST

/* A listed config, legal for its dtype. */
typedef struct {
    xent_dtype d;
    const char *cfg;
} listed_config;

/* Each config under four problem variants (reductions, weights, smoothing,
 * the lse output): compiled, no spills, no stack. */
static void compile_listed(const listed_config *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        xent_config c;
        char why[256];
        ck_assert_msg(xent_config_parse(list[i].cfg, &c, why, sizeof why) == XENT_OK, "%s", why);
        ck_assert_msg(xent_config_legal(&c, list[i].d, why, sizeof why), "%s: %s", list[i].cfg, why);
        for (int v = 0; v < 4; v++) {
            xent_problem p;
            xent_problem_init(&p, 1000, 1000);
            p.logits = list[i].d;
            p.reduction = (xent_reduction)(v % 3);
            p.has_weights = v >= 2;
            p.label_smoothing = v >= 2 ? 0.1f : 0.0f;
            p.write_lse = v == 3;
            compile_and_check(&c, 1, &p);
        }
    }
}

/* Configs that spill unless the template asks for more registers for
 * weighted smoothing (the GPU sweep checks every config for spills): under
 * every problem variant, none may spill. */
START_TEST(sweep_spills_stay_fixed) {
    static const listed_config found[] = {
        {XENT_BF16, "VEC=2 TPR=1 BLOCK=128 ITEMS=32 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=0"},
        {XENT_BF16, "VEC=2 TPR=1 BLOCK=128 ITEMS=32 PASSES=2 CACHE=1 TILE=0 SPLIT=1 PERSIST=0"},
        /* the GPU suite's prewarm, 12:53: 8 bytes at 96 registers (a select tree over 64 words) */
        {XENT_F32, "VEC=4 TPR=32 BLOCK=128 ITEMS=16 PASSES=2 CACHE=1 TILE=0 SPLIT=1 PERSIST=1"},
    };
    compile_listed(found, sizeof found / sizeof found[0]);
}
END_TEST

/* Weighted smoothing's weights four a load (16-bit items of 4 or 8 logits, teams of a warp or more),
 * at the most registers any candidate of 4096x50257 f16 took (two-pass chunks of 32 words, POLY)
 * and at a 512-thread block's 128, under the problem variants: no spills, no stack. */
START_TEST(weight_vector_configs_compile) {
    static const listed_config cases[] = {
        {XENT_F16, "VEC=8 TPR=256 BLOCK=256 ITEMS=8 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=1 POLY=4"},
        {XENT_BF16, "VEC=8 TPR=512 BLOCK=512 ITEMS=4 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=3 POLY=8"},
        {XENT_BF16, "VEC=4 TPR=32 BLOCK=128 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1"},
    };
    compile_listed(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* POLY's polynomial beside the MUFU terms, both shares, both 16-bit types,
 * a whole-block team and a thread per row, under the problem variants: no
 * spills, no stack. */
START_TEST(poly_configs_compile) {
    static const listed_config cases[] = {
        {XENT_BF16, "VEC=8 TPR=32 BLOCK=128 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 POLY=8"},
        {XENT_BF16, "VEC=8 TPR=128 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1 POLY=4"},
        {XENT_F16, "VEC=8 TPR=16 BLOCK=128 ITEMS=8 PASSES=2 CACHE=2 TILE=0 SPLIT=1 PERSIST=3 POLY=4"},
        {XENT_F16, "VEC=4 TPR=64 BLOCK=64 ITEMS=16 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 POLY=8"},
        {XENT_BF16, "VEC=2 TPR=1 BLOCK=128 ITEMS=32 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=1 POLY=4"},
    };
    compile_listed(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(compile_error_keeps_the_log) {
    xent_cubin bin;
    char err[4096];
    int rc =
        xent_nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing = 1; }", ARCH, &bin, err, sizeof err);
    ck_assert_int_eq(rc, XENT_ECOMPILE);
    ck_assert_ptr_null(bin.data);
    ck_assert_ptr_nonnull(strstr(err, "undeclared_thing"));
    ck_assert_ptr_nonnull(strstr(err, "NVRTC compile"));
}
END_TEST

START_TEST(ptxas_report_parses) {
    xent_cubin c;
    memset(&c, 0, sizeof c);
    xent_parse_ptxas("ptxas info    : Compiling entry function 'xent_fwd' for 'sm_90'\n"
                     "ptxas info    : Function properties for xent_fwd\n"
                     "    24 bytes stack frame, 52 bytes spill stores, 48 bytes spill loads\n"
                     "ptxas info    : Used 168 registers, used 1 barriers, 513 bytes smem\n",
                     &c);
    ck_assert_int_eq(c.registers, 168);
    ck_assert_int_eq(c.stack_bytes, 24);
    ck_assert_int_eq(c.spill_bytes, 100);
    ck_assert_int_eq(c.smem_bytes, 513);
    /* several entry points: the worst of each field, the spills of all */
    xent_parse_ptxas("ptxas info    : Function properties for xent_grad_combine\n"
                     "    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
                     "ptxas info    : Used 32 registers, used 1 barriers, 520 bytes smem\n"
                     "ptxas info    : Function properties for xent_grad\n"
                     "    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                     "ptxas info    : Used 94 registers, used 1 barriers, 384 bytes smem\n",
                     &c);
    ck_assert_int_eq(c.registers, 94);
    ck_assert_int_eq(c.stack_bytes, 8);
    ck_assert_int_eq(c.spill_bytes, 8);
    ck_assert_int_eq(c.smem_bytes, 520);
}
END_TEST

START_TEST(nvrtc_version_known) { ck_assert_int_ge(xent_nvrtc_version(), 1200); }
END_TEST

/* The tuner's floor: both read kernels of the template, and its head start's
 * spin, for each unroll it times, compile for sm_90 without spilling (they
 * cannot be run here). */
START_TEST(read_floor_compiles) {
    static const char *kernels[] = {"xent_read_floor", "xent_read_once", "xent_spin"};
    for (int unroll = 4; unroll <= 8; unroll += 4) {
        char *src = NULL, err[4096];
        xent_cubin bin;
        ck_assert_int_ge(asprintf(&src, "#define XENT_UNROLL %d\n%s", unroll, xent_template_read_floor), 0);
        int rc = xent_nvrtc_compile(src, ARCH, &bin, err, sizeof err);
        free(src);
        ck_assert_msg(rc == XENT_OK, "unroll %d: %s", unroll, err);
        ck_assert_int_eq(bin.spill_bytes, 0);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(memmem(bin.data, bin.size, kernels[k], strlen(kernels[k]) + 1), "unroll %d: no %s", unroll,
                          kernels[k]);
        xent_cubin_free(&bin);
    }
}
END_TEST

/* A tune-cache stamp is the hash of the family's own template text. */
START_TEST(template_hash_of_family) {
    char h[17], want[17];
    ck_assert_int_eq(xent_template_hash("xent_fwd", h, sizeof h), XENT_OK);
    snprintf(want, sizeof want, "%016llx", (unsigned long long)xent_code_hash(xent_template_xent_fwd));
    ck_assert_str_eq(h, want);
    ck_assert_ptr_eq(xent_family_template("xent_fwd"), xent_template_xent_fwd);
    ck_assert_ptr_null(xent_family_template("no_such_family"));
    ck_assert_int_eq(xent_template_hash("no_such_family", h, sizeof h), XENT_EINVAL);
    ck_assert_int_eq(xent_template_hash("xent_fwd", h, 16), XENT_EINVAL);
}
END_TEST

/* Pairs of sources: whether the code hash must call them the same code. */
static const struct {
    const char *a, *b;
    int same;
} code_pairs[] = {
    {"int x = 1;", "int  x=1;", 0}, /* a space dropped between tokens is code */
    {"int x = 1;", "int x = 1; // why", 1},
    {"int x = 1;", "/* why,\n * at length */\nint x = 1;", 1},
    {"int x = 1;", "int\tx\n  = 1;", 1}, /* layout */
    {"a /**/ b", "a b", 1},
    {"a/**/b", "a b", 1}, /* a comment separates tokens */
    {"a/**/b", "ab", 0},
    {"int x = 1;", "int x = 2;", 0},
    {"s = \"a  b\";", "s = \"a b\";", 0}, /* spaces inside a string are code */
    {"s = \"/* not a comment */\";", "s = \"\";", 0},
    {"s = \"\\\" // still a string\";", "s = \"\\\"\";", 0}, /* an escaped quote keeps the string open */
    {"c = '\"'; // why", "c = '\"';", 1},
    {"#define X 1 // why\n#define Y 2", "#define X 1\n#define Y 2", 1},
    {"x; /* unterminated", "x;", 1},
};

START_TEST(code_hash_ignores_comments_and_layout) {
    int i = _i;
    uint64_t a = xent_code_hash(code_pairs[i].a), b = xent_code_hash(code_pairs[i].b);
    ck_assert_msg((a == b) == code_pairs[i].same, "pair %d: \"%s\" and \"%s\" should %s the same hash", i,
                  code_pairs[i].a, code_pairs[i].b, code_pairs[i].same ? "have" : "not have");
}
END_TEST

/* tools/embed.sh inlines the shared parts: NVRTC is given no include path. */
START_TEST(embedded_templates_are_whole) {
    const char *tpl[] = {xent_template_xent_fwd, xent_template_xent_grad, xent_template_read_floor};
    for (size_t i = 0; i < sizeof tpl / sizeof tpl[0]; i++) {
        ck_assert_msg(!strstr(tpl[i], "\n#include"), "template %zu holds an #include", i);
        ck_assert_ptr_nonnull(strstr(tpl[i], "__global__"));
    }
    /* both families hold the shared defaults (shared/problem.cuh) */
    ck_assert_ptr_nonnull(strstr(xent_template_xent_fwd, "#ifndef XENT_LSE"));
    ck_assert_ptr_nonnull(strstr(xent_template_xent_grad, "#ifndef XENT_LSE"));
}
END_TEST

static xent_problem small_problem(void) {
    xent_problem p;
    xent_problem_init(&p, 100, 333);
    return p;
}

static const xent_config small_cfg = {4, 8, 128, 4, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0};

START_TEST(kernel_cache_memory_and_disk) {
    char dir[] = "/tmp/xent_kc_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XENT_KERNEL_CACHE", dir, 1);
    xent_problem p = small_problem();
    char err[2048];
    pid_t pid = fork();
    if (pid == 0) { /* a first process compiles and writes the disk entry */
        xent_cubin b;
        _exit(xent_kernel_get(&small_cfg, &p, ARCH, &b, err, sizeof err) == XENT_OK && b.from_cache == 0 ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    xent_cubin a, b;
    ck_assert_int_eq(xent_kernel_get(&small_cfg, &p, ARCH, &a, err, sizeof err), XENT_OK);
    ck_assert_int_eq(a.from_cache, 2); /* this process: from disk */
    ck_assert_int_eq(xent_kernel_get(&small_cfg, &p, ARCH, &b, err, sizeof err), XENT_OK);
    ck_assert_int_eq(b.from_cache, 1); /* then from memory */
    ck_assert_uint_eq(a.size, b.size);
    ck_assert_mem_eq(a.data, b.data, a.size);
    ck_assert_int_eq(a.registers, b.registers);
    xent_cubin_free(&a);
    xent_cubin_free(&b);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Candidates that differ only in launch knobs share a kernel, which xent_compile_many compiles
 * once however its threads meet them: the first candidate of each kernel compiles it, and the
 * others find it in memory, the same CUBIN. */
START_TEST(compile_many_compiles_a_kernel_once) {
    char dir[] = "/tmp/xent_kc_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XENT_KERNEL_CACHE", dir, 1);
    xent_problem p;
    xent_problem_init(&p, 100, 335);
    static const struct {
        int items, persist, compiled; /* compiled: the first of its kernel */
    } cands[] = {{4, 0, 1}, {4, 1, 0}, {2, 0, 1}, {4, 3, 0}, {2, 1, 0}, {4, 1, 0}};
    enum { N = sizeof cands / sizeof cands[0] };
    xent_config cfgs[N];
    int status[N];
    xent_cubin bins[N];
    char errs[N][512];
    for (int i = 0; i < N; i++) {
        cfgs[i] = small_cfg;
        cfgs[i].items = cands[i].items;
        cfgs[i].persist = cands[i].persist;
    }
    xent_compile_many(cfgs, N, &p, 1, ARCH, 4, status, bins, errs);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(status[i] == XENT_OK, "candidate %d: %s", i, errs[i]);
        ck_assert_msg((bins[i].from_cache == 0) == cands[i].compiled, "candidate %d: from_cache %d", i,
                      bins[i].from_cache);
        const int first = cands[i].items == 4 ? 0 : 2;
        ck_assert_uint_eq(bins[i].size, bins[first].size);
        ck_assert_mem_eq(bins[i].data, bins[first].data, bins[i].size);
    }
    for (int i = 0; i < N; i++) xent_cubin_free(&bins[i]);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(kernel_cache_rejects_a_tampered_entry) {
    char dir[] = "/tmp/xent_kc_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XENT_KERNEL_CACHE", dir, 1);
    xent_problem p = small_problem();
    p.c = 334; /* a key no other test compiled in this process */
    char err[2048], cmd[512];
    pid_t pid = fork();
    if (pid == 0) {
        xent_cubin b;
        _exit(xent_kernel_get(&small_cfg, &p, ARCH, &b, err, sizeof err) == XENT_OK ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* flip a byte inside the stored key: the entry must not be used */
    snprintf(cmd, sizeof cmd, "f=$(ls %s/*.cubin) && printf 'Z' | dd of=$f bs=1 seek=40 conv=notrunc 2>/dev/null", dir);
    ck_assert_int_eq(system(cmd), 0);
    xent_cubin a;
    ck_assert_int_eq(xent_kernel_get(&small_cfg, &p, ARCH, &a, err, sizeof err), XENT_OK);
    ck_assert_int_eq(a.from_cache, 0);
    xent_cubin_free(&a);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Damage done to a stored kernel by a crash before its bytes reached the
 * disk, by a disk, or by hand: each must be noticed and compiled again (the
 * file rewritten whole), never handed to the driver. */
typedef enum { FLIP_CUBIN, FLIP_HASH, FLIP_COUNTERS, CUT_ONE, CUT_HALF, EMPTY, APPEND } damage_kind;

typedef struct damage {
    const char *what;
    damage_kind kind;
} damage;

static const damage damages[] = {
    {"a byte of the CUBIN flipped", FLIP_CUBIN},
    {"a byte of the hash flipped", FLIP_HASH},
    {"a byte of the ptxas counters flipped", FLIP_COUNTERS},
    {"cut by one byte", CUT_ONE},
    {"cut in half", CUT_HALF},
    {"left empty", EMPTY},
    {"16 bytes appended", APPEND},
};

/* The damaged copy of a good file of len bytes (bad has room for 16 more); its length. */
static size_t apply_damage(damage_kind kind, const unsigned char *good, size_t len, unsigned char *bad) {
    uint64_t klen;
    memcpy(bad, good, len);
    memcpy(&klen, good + 8, 8);
    switch (kind) {
    case FLIP_CUBIN: bad[len - 500] ^= 0x20; return len;
    case FLIP_HASH: bad[len - 3] ^= 0x20; return len;
    case FLIP_COUNTERS: bad[16 + klen] ^= 0x01; return len; /* the register count */
    case CUT_ONE: return len - 1;
    case CUT_HALF: return len / 2;
    case EMPTY: return 0;
    case APPEND: memset(bad + len, 'j', 16); return len + 16;
    }
    return len;
}

/* In a child, so that this process's memory cache never answers: the
 * status is 0 when the kernel came from where `want` says. */
static void get_in_child(const xent_problem *p, int want_from) {
    pid_t pid = fork();
    if (pid == 0) {
        xent_cubin b;
        char err[2048];
        _exit(xent_kernel_get(&small_cfg, p, ARCH, &b, err, sizeof err) == XENT_OK && b.from_cache == want_from ? 0
                                                                                                                : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the kernel did not come from %s",
                  want_from == 0 ? "a compile" : "the disk");
}

START_TEST(kernel_cache_recompiles_a_damaged_entry) {
    const damage *d = &damages[_i];
    char dir[] = "/tmp/xent_kc_XXXXXX", cmd[512], path[600];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    setenv("XENT_KERNEL_CACHE", dir, 1);
    xent_problem p = small_problem();
    get_in_child(&p, 0);
    snprintf(cmd, sizeof cmd, "ls %s/*.cubin", dir);
    FILE *ls = popen(cmd, "r");
    ck_assert_ptr_nonnull(ls);
    ck_assert_ptr_nonnull(fgets(path, sizeof path, ls));
    pclose(ls);
    path[strcspn(path, "\n")] = 0;
    size_t len, len2;
    unsigned char *good = (unsigned char *)read_all(path, &len), *bad = malloc(len + 16);
    ck_assert_ptr_nonnull(bad);
    size_t bad_len = apply_damage(d->kind, good, len, bad);
    write_file(path, bad, bad_len);
    get_in_child(&p, 0); /* noticed: compiled again */
    unsigned char *again = (unsigned char *)read_all(path, &len2);
    ck_assert_msg(len2 == len && !memcmp(again, good, len), "%s: the file was not rewritten whole", d->what);
    get_in_child(&p, 2); /* and the rewritten file is used */
    free(good);
    free(bad);
    free(again);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(kernel_cache_can_be_off) {
    setenv("XENT_KERNEL_CACHE", "off", 1);
    char dir[64];
    ck_assert_int_eq(xent_kernel_cache_dir(dir, sizeof dir), 0);
    setenv("XENT_KERNEL_CACHE", "/some/where", 1);
    ck_assert_int_eq(xent_kernel_cache_dir(dir, sizeof dir), 1);
    ck_assert_str_eq(dir, "/some/where");
}
END_TEST

int main(void) {
    Suite *s = suite_create("compile");
    TCase *tc = tcase_create("nvrtc");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, compile_error_keeps_the_log);
    tcase_add_test(tc, ptxas_report_parses);
    tcase_add_test(tc, nvrtc_version_known);
    tcase_add_test(tc, read_floor_compiles);
    tcase_add_test(tc, template_hash_of_family);
    tcase_add_test(tc, embedded_templates_are_whole);
    tcase_add_loop_test(tc, code_hash_ignores_comments_and_layout, 0, (int)(sizeof code_pairs / sizeof code_pairs[0]));
    tcase_add_test(tc, heuristic_configs_compile);
    tcase_add_test(tc, sweep_spills_stay_fixed);
    tcase_add_test(tc, weight_vector_configs_compile);
    tcase_add_test(tc, tile_configs_compile);
    tcase_add_test(tc, fixed_c_configs_compile);
    suite_add_tcase(s, tc);
    /* samples of the whole space, about 800 kernels: `make test-slow` (CI runs both tiers) */
    TCase *sl = tcase_create("samples");
    tcase_set_timeout(sl, getenv("XENT_COMPILE_ALL") ? 7200 : 900);
    tcase_set_tags(sl, "slow");
    tcase_add_test(sl, poly_configs_compile);
    tcase_add_loop_test(sl, heuristic_configs_compile_elsewhere, 0, (int)(sizeof other_archs / sizeof other_archs[0]));
    tcase_add_test(sl, sample_f32);
    tcase_add_test(sl, sample_f16);
    tcase_add_test(sl, sample_bf16);
    suite_add_tcase(s, sl);
    /* a case of its own: CK_RUN_CASE=kcache runs it alone */
    TCase *kc = tcase_create("kcache");
    tcase_set_timeout(kc, 300);
    tcase_add_test(kc, kernel_cache_memory_and_disk);
    tcase_add_test(kc, compile_many_compiles_a_kernel_once);
    tcase_add_test(kc, kernel_cache_rejects_a_tampered_entry);
    tcase_add_loop_test(kc, kernel_cache_recompiles_a_damaged_entry, 0, (int)(sizeof damages / sizeof damages[0]));
    tcase_add_test(kc, kernel_cache_can_be_off);
    suite_add_tcase(s, kc);
    return run_suite(s);
}
