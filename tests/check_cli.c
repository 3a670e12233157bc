/*
 * check_cli.c — tests of the xent-tune command (tools/xent-tune*.c), run as a
 * child process: exit codes, messages, --dry-run, --compile-only, a tune
 * without a GPU, and the tune-cache commands (show, export, import).
 *
 * Run from the repository root (as `make test` does):
 *   make build/tests/check_cli && build/tests/check_cli
 * XENT_TUNE_BIN overrides the binary (default build/xent-tune). Every test
 * works in its own temporary directory; children get XENT_KERNEL_CACHE and
 * XENT_TUNECACHE pointing into it, so nothing outside it is written.
 */
#include "gen/gen.h"
#include "gen/space.h"
#include "runtime/runtime.h"
#include "tunecache/tunecache.h"
#include "xent.h"

#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tests/files.h"
#include "tests/run_suite.h"
#include "tests/tmpdir.h"
#include "tools/xent-tune.h"

/* ---- running the tool -------------------------------------------------- */

#define QUICK_S 30    /* time limit of a command that needs no compiler */
#define COMPILE_S 240 /* time limit of a --compile-only run */
#define DRY_S 120     /* a dry run of 32768x4096 is 7 s of CPU, some 20 under ASan */

static const char *tool(void) {
    const char *b = getenv("XENT_TUNE_BIN");
    return b && *b ? b : "build/xent-tune";
}

#include "tests/proc.h"

#define RUN(...) RUN_T(QUICK_S, __VA_ARGS__)

/* Bad usage: exit 2, nothing on stdout, and on stderr the reason (containing
 * each needle) and the pointer to --help. */
static void expect_usage(const result *r, const char *needle1, const char *needle2) {
    expect_failure(r, EXIT_USAGE, "xent-tune: ");
    expect_in("stderr", r->err, needle1, r);
    if (needle2) expect_in("stderr", r->err, needle2, r);
    expect_in("stderr", r->err, "Try 'xent-tune --help'.", r);
}

#define USAGE(n1, n2, ...)                                                                                             \
    do {                                                                                                               \
        result r_ = RUN(__VA_ARGS__);                                                                                  \
        expect_usage(&r_, (n1), (n2));                                                                                 \
        result_free(&r_);                                                                                              \
    } while (0)

/* Each value of an option is refused as "bad WHAT 'VALUE'" (and also, when
 * given, with `also` in the message). */
static void reject_values(const char *opt, const char *what, const char *also, const char *const *bad, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char msg[96];
        snprintf(msg, sizeof msg, "bad %s '%s'", what, bad[i]);
        USAGE(msg, also, "--dry-run", "--shape", "8x8", opt, bad[i]);
    }
}
#define REJECT(opt, what, also, list) reject_values((opt), (what), (also), (list), sizeof(list) / sizeof((list)[0]))

/* ---- fixtures ---------------------------------------------------------------- */

/* Each test's directory lies in one directory of the run, which main removes
 * at the end: a failed assertion ends a forked test before its teardown. */
static char rundir[64];

static void make_tmpdir(void) {
    memset(child_env, 0, sizeof child_env);
    child_stdout = NULL;
    snprintf(tmpdir, sizeof tmpdir, "%s/t.XXXXXX", rundir);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    ck_assert_msg(access(tool(), X_OK) == 0,
                  "%s is not an executable (build it with make, run from the repo root, "
                  "or set XENT_TUNE_BIN)",
                  tool());
}

/* ---- text helpers ------------------------------------------------------------ */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The lines of s (a copy, split in place); *n gets the count. */
static char **split_lines(const char *s, int *n) {
    char *copy = strdup(s);
    int cap = count_lines(s) + 2, k = 0;
    char **lines = calloc((size_t)cap, sizeof *lines);
    ck_assert(copy && lines);
    for (char *p = copy; *p;) {
        char *nl = strchr(p, '\n');
        lines[k++] = p;
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    *n = k;
    return lines;
}

static void free_lines(char **lines) {
    if (lines) {
        free(lines[0]);
        free(lines);
    }
}

/* A whole configuration line ("VEC=4 TPR=32 BLOCK=256 ..."): every knob of the
 * library's table once, legal for dtype d, in the library's own text form. */
static int is_config(const char *s, xent_dtype d) {
    xent_config cfg;
    char why[200], again[256];
    if (xent_config_parse(s, &cfg, why, sizeof why) != XENT_OK) return 0;
    if (!xent_config_legal(&cfg, d, why, sizeof why)) return 0;
    return xent_config_format(&cfg, again, sizeof again) == XENT_OK && strcmp(again, s) == 0;
}

static xent_dtype dtype_of(const char *what) {
    return strstr(what, " bf16 ") ? XENT_BF16 : strstr(what, " f16 ") ? XENT_F16 : XENT_F32;
}

/* One --dry-run section: its header line, candidate configs and heuristic. */
typedef struct section {
    char what[160];
    int count, arch, sms;
    char **configs; /* pointers into the caller's lines */
    const char *heuristic;
} section;

/* Parses the section starting at lines[*at], advancing *at past it. */
static void parse_section(char **lines, int nlines, int *at, section *s, const result *r) {
    memset(s, 0, sizeof *s);
    ck_assert_msg(*at < nlines, "%s: missing a section:\n%s", r->cmd, r->out);
    const char *h = lines[*at];
    const char *colon = strstr(h, ": ");
    ck_assert_msg(h[0] == '#' && h[1] == ' ' && colon, "%s: bad section header '%s'", r->cmd, h);
    snprintf(s->what, sizeof s->what, "%.*s", (int)(colon - h - 2), h + 2);
    int end = -1;
    ck_assert_msg(sscanf(colon, ": %d candidates (sm_%d, %d SMs)%n", &s->count, &s->arch, &s->sms, &end) == 3 &&
                      end >= 0 && colon[end] == '\0',
                  "%s: bad section header '%s'", r->cmd, h);
    ck_assert_msg(s->count > 0, "%s: no candidates in '%s'", r->cmd, h);
    ck_assert_msg(*at + s->count + 1 < nlines, "%s: header says %d candidates but only %d lines follow", r->cmd,
                  s->count, nlines - *at - 1);
    s->configs = lines + *at + 1;
    for (int k = 0; k < s->count; k++) {
        if (!is_config(s->configs[k], dtype_of(s->what)))
            ck_abort_msg("%s: candidate %d of '%s' is not a config line: '%s'", r->cmd, k + 1, s->what, s->configs[k]);
        /* Plain ifs: a passing Check assertion costs a write in fork mode. */
        for (int j = 0; j < k; j++)
            if (strcmp(s->configs[j], s->configs[k]) == 0)
                ck_abort_msg("%s: candidate listed twice: %s", r->cmd, s->configs[k]);
    }
    const char *heur = lines[*at + s->count + 1];
    ck_assert_msg(strncmp(heur, "# heuristic: ", 13) == 0 && is_config(heur + 13, dtype_of(s->what)),
                  "%s: after %d candidates expected '# heuristic: CONFIG', got '%s'", r->cmd, s->count, heur);
    s->heuristic = heur + 13;
    *at += s->count + 2;
    if (*at < nlines && strncmp(lines[*at], "# lookup on ", 12) == 0) ++*at; /* with --gpu KEY */
}

/* ---- usage errors: exit 2 and the reason ------------------------------------- */

START_TEST(test_no_shape) {
    USAGE("no problem given", "--shape", "--dtype", "bf16");
    USAGE("no problem given", NULL, "--dry-run");
    USAGE("no problem given", NULL, "--compile-only", "--arch", "sm_90");
    /* Nothing at all is the same mistake. */
    result r = run_argv(QUICK_S, (const char *const[]){NULL});
    expect_usage(&r, "no problem given", NULL);
    result_free(&r);
}
END_TEST

START_TEST(test_bad_shapes) {
    static const char *const bad[] = {
        "0x5",
        "5x0",
        "axb",
        "5x",
        "12",
        "3x4x5",
        "-5x5",
        "5x-5",
        "-1x-1",
        "x5",
        "",
        "5x5x",
        "1x2147483648",
        "1x99999999999",
        "99999999999999999999x5",
        "5*5",
        "5x5 junk",
        "0x0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char quoted[64];
        snprintf(quoted, sizeof quoted, "bad shape '%s'", bad[i]);
        /* --dry-run would exit 0 had the shape been taken. */
        USAGE(quoted, "NxC", "--dry-run", "--shape", bad[i]);
        char eq[64];
        snprintf(eq, sizeof eq, "--shape=%s", bad[i]);
        USAGE(quoted, NULL, "--dry-run", eq);
    }
    /* A class count past an int says the bound. */
    USAGE("bad shape '1x2147483648'", "C <= 2147483647", "--dry-run", "--shape", "1x2147483648");
    /* A bad shape after good ones still fails. */
    USAGE("bad shape '5x0'", NULL, "--dry-run", "-s", "8x8", "-s", "5x0");
    /* Well-formed, but a problem the library refuses: its reason, before any arithmetic on it. */
    USAGE("shape 9223372036854775807x2: n * row_stride is too large", NULL, "--dry-run", "--shape",
          "9223372036854775807x2");
    USAGE("n * row_stride is too large", NULL, "--compile-only", "-s", "8x8", "-s", "72057594037927936x1");

    /* The edges that are legal: C = 2^31-1, and an upper-case X. */
    result r = RUN("--dry-run", "--shape", "1x2147483647");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "# 1x2147483647 f32 i64 mean: ", &r);
    result_free(&r);
    r = RUN("--dry-run", "--shape", "7X3");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "# 7x3 f32 i64 mean: ", &r);
    result_free(&r);
}
END_TEST

START_TEST(test_unknown_option) {
    USAGE("unknown option '--bogus'", NULL, "--shape", "8x8", "--bogus");
    USAGE("unknown option '-Z'", NULL, "--shape", "8x8", "-Z");
    /* In a group, the option is named, not the argument before the group. */
    USAGE("unknown option '-Z'", NULL, "--shape", "8x8", "-Zq");
    USAGE("unknown option '-Z'", NULL, "-s", "8x8", "-qZ");
    /* A flag given a value. */
    USAGE("unknown option '--dry-run=3'", NULL, "--shape", "8x8", "--dry-run=3");
    USAGE("unknown option '--lse=1'", NULL, "--shape", "8x8", "--lse=1");
    /* Before a command too. */
    USAGE("unknown option '--frob'", NULL, "--frob", "show");
}
END_TEST

START_TEST(test_missing_value) {
    static const char *const opts[] = {
        "--shape",
        "-s",
        "--shapes-file",
        "-f",
        "--dtype",
        "-d",
        "--targets",
        "-t",
        "--reduction",
        "-r",
        "--ignore-index",
        "-i",
        "--label-smoothing",
        "-l",
        "--gpu",
        "-g",
        "--budget",
        "-b",
        "--jobs",
        "-j",
        "--device",
        "--db",
        "--arch",
        "-a",
        "--top",
        "--output",
        "-o",
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "option '%s' needs a value", opts[i]);
        USAGE(msg, NULL, "--dry-run", "--shape", "8x8", opts[i]);
    }
}
END_TEST

START_TEST(test_bad_enums) {
    static const char *const dtypes[] = {"fp32", "F32", "f64", "half", ""};
    REJECT("--dtype", "dtype", "(expected f32, f16 or bf16)", dtypes);
    static const char *const targets[] = {"i16", "int64", "u32", "I64", ""};
    REJECT("--targets", "targets dtype", "(expected i32 or i64)", targets);
    static const char *const reductions[] = {"avg", "MEAN", "max", "summ", ""};
    REJECT("--reduction", "reduction", "(expected none, sum or mean)", reductions);
    static const char *const ops[] = {"fwd", "bwd", "combine", ""};
    REJECT("--op", "op", "(expected forward, fused or backward)", ops);
    /* Every legal value is taken (and shows in the dry-run header). */
    result r = RUN("--dry-run", "--shape", "8x8", "-d", "f16", "-t", "i32", "-r", "none");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "# 8x8 f16 i32 none: ", &r);
    result_free(&r);
}
END_TEST

START_TEST(test_bad_label_smoothing) {
    static const char *const bad[] = {"1.5", "-0.1", "1.0000001", "abc", "nan", "inf", "0.5x", "", "1e3"};
    REJECT("--label-smoothing", "label smoothing", "[0, 1]", bad);
    /* The ends of [0, 1] are legal. */
    static const char *const good[] = {"0", "1", "0.1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        result r = RUN("--dry-run", "--shape", "8x8", "-l", good[i]);
        expect_code(&r, 0);
        expect_in("stdout", r.out, strcmp(good[i], "0") ? "mean smoothing: " : "mean: ", &r);
        result_free(&r);
    }
}
END_TEST

START_TEST(test_bad_budget) {
    static const char *const bad[] = {"0", "-1", "0.05", "abc", "", "1e9", "30s", "nan"};
    REJECT("--budget", "budget", NULL, bad);
    result r = RUN("--dry-run", "--shape", "8x8", "-b", "0.1");
    expect_code(&r, 0);
    result_free(&r);
}
END_TEST

START_TEST(test_bad_jobs) {
    static const char *const bad[] = {"0", "-1", "65", "x", "2.5", "", "4 "};
    REJECT("--jobs", "jobs", NULL, bad);
    result r = RUN("--dry-run", "--shape", "8x8", "-j", "64");
    expect_code(&r, 0);
    result_free(&r);
}
END_TEST

START_TEST(test_bad_arch) {
    static const char *const bad[] = {"sm_49", "sm_201", "sm_abc", "compute_90", "sm_90a", "sm_", "", "49"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        USAGE("bad architecture", NULL, "--dry-run", "--shape", "8x8", "--arch", bad[i]);
    /* Both spellings of a legal one, shown in the header. */
    result r = RUN("--dry-run", "--shape", "8x8", "--arch", "sm_80");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "(sm_80, ", &r);
    result_free(&r);
    r = RUN("--dry-run", "--shape", "8x8", "-a", "86");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "(sm_86, ", &r);
    result_free(&r);
}
END_TEST

START_TEST(test_other_bad_numbers) {
    USAGE("bad ignore index 'abc'", NULL, "--dry-run", "--shape", "8x8", "--ignore-index", "abc");
    USAGE("bad ignore index '99999999999999999999'", NULL, "--dry-run", "--shape", "8x8", "-i", "99999999999999999999");
    USAGE("bad device '-1'", NULL, "--dry-run", "--shape", "8x8", "--device", "-1");
    USAGE("bad top '0'", NULL, "--dry-run", "--shape", "8x8", "--top", "0");
}
END_TEST

START_TEST(test_dry_run_and_compile_only) {
    USAGE("--dry-run and --compile-only exclude each other", NULL, "--dry-run", "--compile-only", "--shape", "8x8");
    USAGE("--dry-run and --compile-only exclude each other", NULL, "-c", "-s", "1x1", "-n");
}
END_TEST

START_TEST(test_commands_usage) {
    USAGE("unknown command 'frobnicate'", "show, export or import", "frobnicate");
    USAGE("unknown command 'tune'", NULL, "--shape", "8x8", "tune");
    USAGE("unknown command 'Show'", NULL, "Show");
    USAGE("import needs a FILE", NULL, "import");
    USAGE("import needs a FILE", NULL, "import", "--db", tpath("a.db"));
    USAGE("export needs --gpu KEY", NULL, "export");
    USAGE("export needs --gpu KEY", NULL, "export", "--gpu", "auto", "--db", tpath("a.db"));
    USAGE("unexpected argument 'extra'", NULL, "show", "extra");
    USAGE("unexpected argument 'b.sql'", NULL, "import", "a.sql", "b.sql");
    USAGE("unexpected argument 'x'", NULL, "export", "--gpu", "h200", "x");
    /* None of these touched the database. */
    ck_assert(!exists(tpath("a.db")));
}
END_TEST

START_TEST(test_shapes_file_errors) {
    const char *missing = tpath("no-such-shapes.txt");
    result r = RUN("--dry-run", "--shapes-file", missing);
    expect_failure(&r, EXIT_USAGE, "xent-tune: cannot open shapes file");
    expect_in("stderr", r.err, missing, &r);
    expect_in("stderr", r.err, "No such file", &r);
    result_free(&r);

    const char *bad = tpath("bad-shapes.txt");
    write_text(bad, "# shapes\n8x8\n\n  4x7\naxb\n16x16\n");
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, ":5: bad shape 'axb'", bad);
    result_free(&r);

    /* A comment after a shape is a comment, not part of it. */
    write_text(bad, "8x8 # the test's\n4x7# packed\n0x3 # no rows\n");
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, ":3: bad shape '0x3'", bad);
    result_free(&r);

    write_text(bad, "8x8\n3x4x5\r\n");
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, "bad shape '3x4x5'", NULL);
    result_free(&r);

    write_text(bad, "8x8\n0x5"); /* no final newline */
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, "bad shape '0x5'", NULL);
    result_free(&r);

    /* A line longer than the tool reads is an error naming it, not two lines. */
    char line[400];
    memset(line, ' ', sizeof line);
    strcpy(line + 300, "8x8\n");
    char text[512];
    snprintf(text, sizeof text, "4x4\n%s", line);
    write_text(bad, text);
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, ":2: line longer than 255 characters", bad);
    result_free(&r);

    /* A NUL byte is an error naming its line: the line read to it alone
     * would drop the rest unread (fuzz_shapes_file found "1x1\0..." taken as 1x1). */
    write_file(bad,
               "4x4\n1x1\0"
               "9x9\n2x2\n",
               16);
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, ":2: holds a NUL byte", bad);
    result_free(&r);

    /* A directory is said to be one. */
    r = RUN("--dry-run", "-f", tmpdir);
    expect_usage(&r, "is a directory", tmpdir);
    result_free(&r);

    /* More shapes than the tool holds. */
    size_t len = 4097 * 4;
    char *many = malloc(len + 1);
    ck_assert_ptr_nonnull(many);
    for (size_t i = 0; i < 4097; i++) memcpy(many + 4 * i, "1x1\n", 4);
    write_file(bad, many, len);
    free(many);
    r = RUN("--dry-run", "-f", bad);
    expect_usage(&r, "more than 4096 shapes", NULL);
    result_free(&r);
}
END_TEST

/* ---- help and version ----------------------------------------------------------- */

START_TEST(test_help) {
    const char *forms[] = {"--help", "-h"};
    for (int i = 0; i < 2; i++) {
        /* --help wins even over a mistake that comes later. */
        result r = RUN(forms[i], "--shape", "0x0");
        expect_code(&r, 0);
        ck_assert_msg(r.err_len == 0, "%s wrote to stderr: %s", r.cmd, r.err);
        ck_assert_msg(strncmp(r.out, "usage: xent-tune ", 17) == 0, "%s: no usage line:\n%s", r.cmd, r.out);
        const char *needles[] = {"--shape NxC", "--shapes-file", "--dtype", "--dry-run",        "--compile-only",
                                 "--arch",      "--db",          "show",    "export --gpu KEY", "import FILE"};
        for (size_t k = 0; k < sizeof needles / sizeof needles[0]; k++) expect_in("usage", r.out, needles[k], &r);
        result_free(&r);
    }
}
END_TEST

START_TEST(test_version) {
    const char *forms[] = {"--version", "-V"};
    for (int i = 0; i < 2; i++) {
        result r = RUN(forms[i]);
        expect_code(&r, 0);
        ck_assert_msg(r.err_len == 0, "%s wrote to stderr: %s", r.cmd, r.err);
        int a, b, c, t, major, minor, end = -1;
        char fwd[17], grad[17], want[32];
        ck_assert_msg(sscanf(r.out,
                             "xent-tune %d.%d.%d (template %d)\ntemplates xent_fwd %16[0-9a-f], xent_grad "
                             "%16[0-9a-f]; NVRTC %d.%d\n%n",
                             &a, &b, &c, &t, fwd, grad, &major, &minor, &end) == 8 &&
                          end > 0 && (size_t)end == r.out_len,
                      "%s: bad version lines '%s'", r.cmd, r.out);
        ck_assert_int_eq(a * 10000 + b * 100 + c, XENT_VERSION);
        ck_assert_int_ge(t, 1);
        /* the stamps a tune of this build writes, and the NVRTC it compiles with */
        ck_assert_int_eq(xent_template_hash("xent_fwd", want, sizeof want), XENT_OK);
        ck_assert_str_eq(fwd, want);
        ck_assert_int_eq(xent_template_hash("xent_grad", want, sizeof want), XENT_OK);
        ck_assert_str_eq(grad, want);
        ck_assert_int_eq(major * 100 + minor, xent_nvrtc_version());
        result_free(&r);
    }
}
END_TEST

/* ---- --dry-run --------------------------------------------------------------------- */

START_TEST(test_dry_run_one_shape) {
    result r = RUN("--dry-run", "--shape", "32768x4096");
    expect_code(&r, 0);
    ck_assert_msg(r.err_len == 0, "%s wrote to stderr: %s", r.cmd, r.err);
    int n, at = 0;
    char **lines = split_lines(r.out, &n);
    section s;
    parse_section(lines, n, &at, &s, &r);
    ck_assert_str_eq(s.what, "32768x4096 f32 i64 mean");
    ck_assert_int_eq(s.arch, 90);
    ck_assert_int_eq(s.sms, 132);
    /* Header, one line per candidate, heuristic, and nothing else. */
    ck_assert_int_eq(at, n);
    ck_assert_int_eq(count_lines(r.out), s.count + 2);
    ck_assert_msg(s.count > 1, "a 32768x4096 problem has %d candidates", s.count);
    free_lines(lines);
    result_free(&r);

    /* The same again, and the SM count and architecture follow --gpu. */
    result again = RUN("--dry-run", "--shape", "32768x4096");
    expect_code(&again, 0);
    result a100 = RUN("--dry-run", "--shape", "32768x4096", "--gpu", "a100");
    expect_code(&a100, 0);
    expect_in("stdout", a100.out, "candidates (sm_80, 108 SMs)", &a100);
    result_free(&again);
    result_free(&a100);
}
END_TEST

START_TEST(test_dry_run_problem_options) {
    result r = RUN("--dry-run", "-s", "64x1000", "-d", "bf16", "-t", "i32", "-r", "sum", "-w", "-l", "0.1", "--lse",
                   "-i", "-1", "--gpu", "a100", "--arch", "sm_80");
    expect_code(&r, 0);
    int n, at = 0;
    char **lines = split_lines(r.out, &n);
    section s;
    parse_section(lines, n, &at, &s, &r);
    ck_assert_str_eq(s.what, "64x1000 bf16 i32 sum weights smoothing lse");
    ck_assert_int_eq(s.arch, 80);
    ck_assert_int_eq(s.sms, 108);
    ck_assert_int_eq(at, n);
    free_lines(lines);
    result_free(&r);
}
END_TEST

/* --row-stride: rows of a wider tensor. Below any shape's C it is refused
 * with the library's reason; at or above, the problem says its stride and the
 * heuristic is the one for that stride (the vector the stride keeps aligned). */
START_TEST(test_row_stride) {
    static const char *const bad[] = {"0", "-3", "x", "", "1.5"};
    REJECT("--row-stride", "row stride", NULL, bad);
    USAGE("row_stride must be >= c", "10x20", "--dry-run", "-s", "10x10", "-s", "10x20", "--row-stride", "16");
    result r = RUN("--dry-run", "-s", "2x10", "--row-stride", "13");
    expect_code(&r, 0);
    int n, at = 0;
    char **lines = split_lines(r.out, &n);
    section s;
    parse_section(lines, n, &at, &s, &r);
    ck_assert_str_eq(s.what, "2x10 f32 i64 mean stride 13");
    free_lines(lines);
    expect_in("stdout", r.out, "# heuristic: VEC=1 ", &r); /* 13 floats: only scalars stay aligned */
    result_free(&r);
    r = RUN("--dry-run", "-s", "2x10", "--row-stride", "10");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "# 2x10 f32 i64 mean: ", &r); /* the stride of contiguous rows is no option */
    result_free(&r);
}
END_TEST

START_TEST(test_dry_run_shapes_file) {
    static const char *const shapes[] = {"1x1", "4x7", "32768x4096", "8x50257", "1024x128"};
    const int nshapes = 5;
    const char *file = tpath("shapes.txt");
    /* Comments (a line's or after a shape), blank lines, indentation, CRLF and no final newline. */
    write_text(file,
               "# benchmark shapes\n1x1\n\n   4x7\n\t# indented comment\n32768x4096\r\n8x50257  # GPT-2\n1024x128");
    result r = RUN_T(DRY_S, "--dry-run", "--shapes-file", file);
    expect_code(&r, 0);
    ck_assert_msg(r.err_len == 0, "%s wrote to stderr: %s", r.cmd, r.err);
    int n, at = 0;
    char **lines = split_lines(r.out, &n);
    for (int i = 0; i < nshapes; i++) {
        section s;
        parse_section(lines, n, &at, &s, &r);
        char want[64];
        snprintf(want, sizeof want, "%s f32 i64 mean", shapes[i]);
        ck_assert_str_eq(s.what, want);

        /* Each section is what the shape alone gives. */
        result one = RUN_T(DRY_S, "--dry-run", "--shape", shapes[i]);
        expect_code(&one, 0);
        int n1, at1 = 0;
        char **lines1 = split_lines(one.out, &n1);
        section s1;
        parse_section(lines1, n1, &at1, &s1, &one);
        ck_assert_int_eq(s.count, s1.count);
        for (int k = 0; k < s.count; k++)
            if (strcmp(s.configs[k], s1.configs[k]) != 0)
                ck_abort_msg("%s: candidate %d differs alone: '%s' vs '%s'", r.cmd, k + 1, s.configs[k], s1.configs[k]);
        ck_assert_str_eq(s.heuristic, s1.heuristic);
        free_lines(lines1);
        result_free(&one);
    }
    ck_assert_int_eq(at, n);
    free_lines(lines);
    result_free(&r);

    /* --shape and --shapes-file add up, in order. */
    r = RUN_T(DRY_S, "--dry-run", "--shape", "2x3", "-f", file, "--shape", "5x6");
    expect_code(&r, 0);
    lines = split_lines(r.out, &n);
    at = 0;
    section s;
    parse_section(lines, n, &at, &s, &r);
    ck_assert_str_eq(s.what, "2x3 f32 i64 mean");
    for (int i = 0; i < nshapes; i++) parse_section(lines, n, &at, &s, &r);
    parse_section(lines, n, &at, &s, &r);
    ck_assert_str_eq(s.what, "5x6 f32 i64 mean");
    ck_assert_int_eq(at, n);
    free_lines(lines);
    result_free(&r);

    /* A file of comments only gives no problem. */
    write_text(file, "# nothing here\n\n");
    r = RUN("--dry-run", "-f", file);
    expect_usage(&r, "no problem given", NULL);
    result_free(&r);
}
END_TEST

/* ---- --compile-only ----------------------------------------------------------------- */

/* Most candidates a sample may have, to keep the suite short. */
#define SAMPLE_MAX 300

static void compile_sample(const char *shape, const char *dtype, const char *what) {
    /* How many candidates, per the dry run. */
    result dry = RUN("--dry-run", "--shape", shape, "--dtype", dtype);
    expect_code(&dry, 0);
    int nd, atd = 0;
    char **dl = split_lines(dry.out, &nd);
    section ds;
    parse_section(dl, nd, &atd, &ds, &dry);
    ck_assert_msg(ds.count <= SAMPLE_MAX, "sample %s %s has %d candidates: too many for CI", shape, dtype, ds.count);

    double t0 = now_s();
    result r = RUN_T(COMPILE_S, "--compile-only", "--arch", "sm_90", "--shape", shape, "--dtype", dtype);
    double took = now_s() - t0;
    expect_code(&r, 0);
    /* stderr has the progress alone, up to every candidate */
    char done[80];
    snprintf(done, sizeof done, "compile: %d/%d candidates\n", ds.count, ds.count);
    ck_assert_msg(strstr(r.err, done) && !strstr(r.err, "xent-tune:"), "%s: stderr is not the progress: %s", r.cmd,
                  r.err);
    int n;
    char **lines = split_lines(r.out, &n);
    char head[200];
    snprintf(head, sizeof head, "# %s: %d candidates compiled for sm_90", what, ds.count);
    ck_assert_msg(n >= 2, "%s: output too short:\n%s", r.cmd, r.out);
    ck_assert_str_eq(lines[0], head);
    char c1[16], c2[16], c3[16], c4[16], c5[16];
    ck_assert_msg(sscanf(lines[1], "%15s %15s %15s %15s %15s", c1, c2, c3, c4, c5) == 5 && !strcmp(c1, "regs") &&
                      !strcmp(c2, "spill") && !strcmp(c3, "stack") && !strcmp(c4, "smem") && !strcmp(c5, "config"),
                  "%s: bad column header '%s'", r.cmd, lines[1]);
    ck_assert_msg(n == ds.count + 2, "%s: %d lines for %d candidates", r.cmd, n, ds.count);
    int spilling = 0;
    for (int k = 0; k < ds.count; k++) {
        const char *l = lines[2 + k];
        int regs, spill, stack, smem, off = -1;
        ck_assert_msg(strncmp(l, "FAILED", 6) != 0, "%s: a candidate failed to compile: %s", r.cmd, l);
        ck_assert_msg(sscanf(l, "%d %d %d %d  %n", &regs, &spill, &stack, &smem, &off) == 4 && off > 0,
                      "%s: bad row '%s'", r.cmd, l);
        ck_assert_msg(regs > 0 && regs <= 255, "%s: %d registers in '%s'", r.cmd, regs, l);
        ck_assert_msg(stack >= 0 && smem >= 0 && smem < 228 * 1024, "%s: bad counters in '%s'", r.cmd, l);
        /* Same candidates, same order as the dry run. */
        ck_assert_str_eq(l + off, ds.configs[k]);
        if (spill != 0) {
            fprintf(stderr, "check_cli: %s %s spills %d bytes: %s\n", shape, dtype, spill, l + off);
            spilling++;
        }
    }
    ck_assert_msg(spilling == 0, "%s: %d of %d candidates spill registers (listed above)", r.cmd, spilling, ds.count);
    fprintf(stderr, "check_cli: --compile-only %s %s: %d candidates in %.1f s\n", shape, dtype, ds.count, took);

    /* Again: from the kernel cache now, the same report; -q, nothing on stderr. */
    ck_assert_msg(exists(tpath("kernels")), "no kernel cache written at %s", tpath("kernels"));
    result again = RUN_T(COMPILE_S, "--compile-only", "-q", "--arch", "sm_90", "--shape", shape, "--dtype", dtype);
    expect_code(&again, 0);
    ck_assert_str_eq(again.out, r.out);
    ck_assert_msg(again.err_len == 0, "%s wrote to stderr: %s", again.cmd, again.err);

    free_lines(lines);
    free_lines(dl);
    result_free(&again);
    result_free(&r);
    result_free(&dry);
}

START_TEST(test_compile_only_1x1) { compile_sample("1x1", "f32", "1x1 f32 i64 mean"); }
END_TEST

START_TEST(test_compile_only_4x7_bf16) { compile_sample("4x7", "bf16", "4x7 bf16 i64 mean"); }
END_TEST

/* --config: exactly the configs given, in order, each checked against the
 * problem before anything is compiled or timed. */
START_TEST(test_config_option) {
    const char *a = "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3";
    /* b as a cache written before ASYNC was retired holds it */
    const char *b =
        "VEC=8 TPR=32 BLOCK=256 ITEMS=8 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1 PREFETCH=0 ASYNC=0 POLY=8";
    result r = RUN("--dry-run", "--shape", "32768x4096", "--config", a);
    expect_code(&r, 0);
    int n, at = 0;
    char **lines = split_lines(r.out, &n);
    section s;
    parse_section(lines, n, &at, &s, &r);
    ck_assert_int_eq(s.count, 1);
    ck_assert_str_eq(s.configs[0], "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 "
                                   "PREFETCH=0 POLY=0 EVICT=0 STASH=0 FLAT=0");
    free_lines(lines);
    result_free(&r);

    /* Two, for bf16, compiled in the order given. */
    r = RUN_T(COMPILE_S, "--compile-only", "--shape", "32768x4096", "--dtype", "bf16", "--config", b, "--config", a);
    expect_code(&r, 0);
    lines = split_lines(r.out, &n);
    ck_assert_msg(n == 4, "%s: %d lines:\n%s", r.cmd, n, r.out);
    ck_assert_str_eq(lines[0], "# 32768x4096 bf16 i64 mean: 2 candidates compiled for sm_90");
    ck_assert_msg(strstr(lines[2], "POLY=8") && strstr(lines[3], "ITEMS=16"), "%s: order lost:\n%s", r.cmd, r.out);
    free_lines(lines);
    result_free(&r);

    USAGE("--config 'VEC=3': VEC: illegal value '3'", NULL, "--dry-run", "-s", "8x8", "--config", "VEC=3");
    USAGE("cannot run 32768x4096 f32 i64 mean", "POLY takes 16-bit logits", "--dry-run", "-s", "32768x4096", "--config",
          "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 POLY=8");
    USAGE("cannot run 64x262144 f32 i64 mean fused", "SPLIT > 1 (a cluster of blocks) needs sm_90", "--dry-run", "-a",
          "sm_80", "--op", "fused", "-s", "64x262144", "--config",
          "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=4 PERSIST=0");
    USAGE("PERSIST: illegal value '2'", NULL, "--dry-run", "-s", "8x8", "--config",
          "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=2 PERSIST=2");
    USAGE("--config and --exhaustive exclude each other", NULL, "-s", "8x8", "--config", a, "--exhaustive");
    USAGE("--store-config needs --config", NULL, "-s", "8x8", "--store-config");
}
END_TEST

/* ---- tuning without a GPU ------------------------------------------------------------ */

static int driver_loadable(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

START_TEST(test_tune_without_gpu) {
    const char *db = tpath("tune.db");
    const char *variants[][2] = {{"--gpu", "auto"}, {"--gpu", "h200"}};
    for (int i = 0; i < 2; i++) {
        result r =
            RUN_T(COMPILE_S, "--shape", "8x8", "--db", db, "--budget", "1", "--quiet", variants[i][0], variants[i][1]);
        if (driver_loadable()) {
            /* A driver is here: whatever the outcome, the usage was fine. */
            ck_assert_msg(r.code != EXIT_USAGE, "%s: exit 2 on good usage: %s", r.cmd, r.err);
        } else {
            expect_failure(&r, EXIT_DEVICE, "xent-tune: ");
            expect_in("stderr", r.err, "libcuda.so.1", &r);
            /* It gave up before creating a tune cache. */
            ck_assert_msg(!exists(db), "%s created %s without a GPU", r.cmd, db);
            ck_assert_msg(!exists(tpath("user-tune.db")), "%s created the user tune cache", r.cmd);
        }
        result_free(&r);
    }
}
END_TEST

/* ---- the tune cache commands ------------------------------------------------------------ */

static tc_key mkkey(const char *gpu, int sms, int64_t n, int64_t c) {
    tc_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    k.arch = strcmp(gpu, "a100") ? 90 : 80;
    k.sm_count = sms;
    strcpy(k.family, "xent_fwd");
    k.logits = XENT_BF16;
    k.targets = XENT_I64;
    k.reduction = XENT_REDUCE_MEAN;
    k.n = n;
    k.c = c;
    k.template_version = 1;
    return k;
}

static tc_entry mkentry(const char *config, double us, double gbps) {
    tc_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.config, sizeof e.config, "%s", config);
    e.us = us;
    e.gbps = gbps;
    e.when = 1767225600;
    snprintf(e.settings, sizeof e.settings, "budget=30 exhaustive=0 reps=50");
    return e;
}

/* Configs the library parses, legal for the dtype of their rows (bf16; CFG_C fp32 too). */
#define CFG_A "VEC=8 TPR=32 BLOCK=256 ITEMS=4 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=0"
#define CFG_B "VEC=8 TPR=512 BLOCK=512 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=1 PERSIST=1"
#define CFG_C "VEC=4 TPR=256 BLOCK=256 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=4 PERSIST=0"

/* An export made by the library: two h200 winners and one a100 winner. */
static void library_export(const char *sql_path) {
    char err[512];
    tc_db *db;
    ck_assert_msg(tc_open(tpath("source.db"), 0, &db, err, sizeof err) == XENT_OK, "%s", err);
    tc_key k1 = mkkey("h200", 132, 4096, 32000), k2 = mkkey("h200", 132, 32768, 131072),
           k3 = mkkey("a100", 108, 4096, 32000);
    tc_entry e1 = mkentry(CFG_A, 118.253, 2216.5), e2 = mkentry(CFG_B, 1234.5, 4351.25),
             e3 = mkentry(CFG_C, 301.1, 870.0);
    ck_assert_int_eq(tc_put(db, &k1, &e1), XENT_OK);
    ck_assert_int_eq(tc_put(db, &k2, &e2), XENT_OK);
    ck_assert_int_eq(tc_put(db, &k3, &e3), XENT_OK);
    FILE *f = fopen(sql_path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(tc_export(db, NULL, f), XENT_OK);
    ck_assert_int_eq(fclose(f), 0);
    tc_close(db);
}

/* The rows `show` printed: count from the "N entries" line, checked against the rows. */
static int show_count(const char *db, const char *gpu, result *keep) {
    result r = gpu ? RUN("show", "--db", db, "--gpu", gpu) : RUN("show", "--db", db);
    expect_code(&r, 0);
    int n, rows = -1;
    char **lines = split_lines(r.out, &n);
    ck_assert_msg(n >= 1, "%s: no output", r.cmd);
    const char *last = lines[n - 1];
    char word[16];
    ck_assert_msg(sscanf(last, "%d %15s", &rows, word) == 2 && !strcmp(word, rows == 1 ? "entry" : "entries"),
                  "%s: bad last line '%s'", r.cmd, last);
    /* A header line when there are rows, then one line per row. */
    ck_assert_int_eq(n, rows ? rows + 2 : 1);
    free_lines(lines);
    if (keep)
        *keep = r;
    else
        result_free(&r);
    return rows;
}

/* The show row for (n, c) of gpu: checks its fields, returns 1 if present. */
static int show_has(const result *r, const char *gpu, int arch, int sms, long long n, long long c, const char *config,
                    double us) {
    int nl, found = 0;
    char **lines = split_lines(r->out, &nl);
    for (int i = 1; i < nl - 1; i++) {
        char g[32], dt[8], tg[8], rd[8];
        int a, s, opt, off = -1;
        long long rn, rc;
        double rus, gbps;
        if (sscanf(lines[i], "%31s sm_%d %d %7s %7s %7s %d %lld %lld %lf %lf  %n", g, &a, &s, dt, tg, rd, &opt, &rn,
                   &rc, &rus, &gbps, &off) != 11 ||
            off < 0)
            ck_abort_msg("%s: bad row '%s'", r->cmd, lines[i]);
        if (strcmp(g, gpu) || rn != n || rc != c) continue;
        found = 1;
        ck_assert_int_eq(a, arch);
        ck_assert_int_eq(s, sms);
        ck_assert_str_eq(dt, "bf16");
        ck_assert_str_eq(tg, "i64");
        ck_assert_str_eq(rd, "mean");
        ck_assert_str_eq(lines[i] + off, config);
        ck_assert_msg(rus > us - 0.01 && rus < us + 0.01, "%s: us %g, expected %g", r->cmd, rus, us);
    }
    free_lines(lines);
    return found;
}

START_TEST(test_show_missing_db) {
    /* No file yet (a fresh machine): an empty cache, said so. */
    const char *db = tpath("missing.db");
    result r = RUN("show", "--db", db);
    expect_code(&r, 0);
    expect_in("stdout", r.out, "0 entries (no tune cache at ", &r);
    expect_in("stdout", r.out, db, &r);
    /* show is read-only: it did not create the file. */
    ck_assert(!exists(db));
    result_free(&r);
    r = RUN("show", "--db", tpath("no/such/dir/t.db"));
    expect_code(&r, 0);
    expect_in("stdout", r.out, "0 entries (no tune cache at ", &r);
    result_free(&r);
    /* the default path, from the environment, too */
    child_env[0] = "XENT_TUNECACHE";
    child_env[1] = "XDG_CACHE_HOME";
    char home[600];
    snprintf(home, sizeof home, "HOME=%s", tmpdir);
    child_env[2] = home;
    r = RUN("show");
    expect_code(&r, 0);
    expect_in("stdout", r.out, "0 entries (no tune cache at ", &r);
    expect_in("stdout", r.out, "/.cache/xent/tune.db", &r);
    result_free(&r);
    memset(child_env, 0, sizeof child_env);

    /* Nor does export. */
    r = RUN("export", "--gpu", "h200", "--db", db);
    expect_code(&r, EXIT_CACHE);
    expect_in("stderr", r.err, db, &r);
    ck_assert(!exists(db));
    result_free(&r);

    /* A database that exists but holds nothing shows 0 entries. */
    char err[256];
    tc_db *h;
    ck_assert_int_eq(tc_open(tpath("empty.db"), 0, &h, err, sizeof err), XENT_OK);
    tc_close(h);
    ck_assert_int_eq(show_count(tpath("empty.db"), NULL, NULL), 0);
}
END_TEST

START_TEST(test_import_handwritten) {
    const char *sql = tpath("two.sql");
    write_text(sql,
               "-- two winners, written by hand\n"
               "INSERT OR REPLACE INTO tune(gpu, arch, sm_count, family, logits, targets, reduction, options, n, c, "
               "template_version, config, us, gbps, measured_at, settings) VALUES('h200', 90, 132, 'xent_fwd', 2, 1, "
               "2, 0, 4096, 32000, 1, '" CFG_A "', 118.253, 2216.5, 1767225600, 'budget=30');\n"
               "INSERT OR REPLACE INTO tune(gpu, arch, sm_count, family, logits, targets, reduction, options, n, c, "
               "template_version, config, us, gbps, measured_at, settings) VALUES('h200', 90, 132, 'xent_fwd', 2, 1, "
               "2, 0, 32768, 131072, 1, '" CFG_B "', 1234.5, 4351.25, 1767225600, 'budget=30');\n");
    const char *db = tpath("sub/dir/cache.db"); /* import creates the parent directories */
    result r = RUN("import", sql, "--db", db);
    expect_code(&r, 0);
    char want[700];
    snprintf(want, sizeof want, "imported 2 entries from %s\n", sql);
    ck_assert_str_eq(r.out, want);
    ck_assert_msg(r.err_len == 0, "%s wrote to stderr: %s", r.cmd, r.err);
    result_free(&r);

    result shown;
    ck_assert_int_eq(show_count(db, NULL, &shown), 2);
    ck_assert(show_has(&shown, "h200", 90, 132, 4096, 32000, CFG_A, 118.25));
    ck_assert(show_has(&shown, "h200", 90, 132, 32768, 131072, CFG_B, 1234.5));
    result_free(&shown);

    /* Filtered by GPU. */
    ck_assert_int_eq(show_count(db, "h200", NULL), 2);
    ck_assert_int_eq(show_count(db, "a100", NULL), 0);

    /* Importing the same file again replaces, it does not add. */
    r = RUN("import", sql, "--db", db);
    expect_code(&r, 0);
    result_free(&r);
    ck_assert_int_eq(show_count(db, NULL, NULL), 2);
}
END_TEST

START_TEST(test_export_import_roundtrip) {
    const char *all = tpath("all.sql"), *a = tpath("a.db"), *b = tpath("b.db");
    library_export(all);
    result r = RUN("import", all, "--db", a);
    expect_code(&r, 0);
    expect_in("stdout", r.out, "imported 3 entries", &r);
    result_free(&r);
    result shown;
    ck_assert_int_eq(show_count(a, NULL, &shown), 3);
    ck_assert(show_has(&shown, "a100", 80, 108, 4096, 32000, CFG_C, 301.1));
    result_free(&shown);
    ck_assert_int_eq(show_count(a, "h200", NULL), 2);
    ck_assert_int_eq(show_count(a, "a100", NULL), 1);

    /* export --gpu h200: a header and the two h200 rows, to stdout. */
    result e1 = RUN("export", "--gpu", "h200", "--db", a);
    expect_code(&e1, 0);
    ck_assert_msg(e1.err_len == 0, "%s wrote to stderr: %s", e1.cmd, e1.err);
    ck_assert_int_eq(count_lines(e1.out), 3);
    ck_assert_msg(strncmp(e1.out, "-- ", 3) == 0, "%s: no comment header:\n%s", e1.cmd, e1.out);
    ck_assert_msg(strstr(e1.out, "'a100'") == NULL, "%s: exported another GPU:\n%s", e1.cmd, e1.out);
    expect_in("export", e1.out, CFG_A, &e1);
    expect_in("export", e1.out, CFG_B, &e1);
    expect_in("export", e1.out, "118.253", &e1);

    /* It is what the library exports for that GPU. */
    {
        char err[256];
        tc_db *h;
        ck_assert_int_eq(tc_open(tpath("source.db"), 1, &h, err, sizeof err), XENT_OK);
        FILE *f = fopen(tpath("lib-h200.sql"), "w");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(tc_export(h, "h200", f), XENT_OK);
        fclose(f);
        tc_close(h);
        char *lib = read_all(tpath("lib-h200.sql"), NULL);
        ck_assert_str_eq(e1.out, lib);
        free(lib);
    }

    /* Into a second database and out again: byte-identical. */
    const char *h200 = tpath("h200.sql");
    write_file(h200, e1.out, e1.out_len);
    r = RUN("import", h200, "--db", b);
    expect_code(&r, 0);
    expect_in("stdout", r.out, "imported 2 entries", &r);
    result_free(&r);
    result e2 = RUN("export", "--gpu", "h200", "--db", b);
    expect_code(&e2, 0);
    ck_assert_uint_eq(e2.out_len, e1.out_len);
    ck_assert_msg(memcmp(e1.out, e2.out, e1.out_len) == 0, "exports differ:\n%s\n----\n%s", e1.out, e2.out);

    /* --output writes the same text to a file, nothing to stdout. */
    const char *outfile = tpath("out.sql");
    r = RUN("export", "--gpu", "h200", "--db", b, "--output", outfile);
    expect_code(&r, 0);
    ck_assert_uint_eq(r.out_len, 0);
    size_t len;
    char *text = read_all(outfile, &len);
    ck_assert_uint_eq(len, e1.out_len);
    ck_assert(memcmp(text, e1.out, len) == 0);
    free(text);
    result_free(&r);

    /* A GPU with no entries exports the header only. */
    r = RUN("export", "--gpu", "a100", "--db", b);
    expect_code(&r, 0);
    ck_assert_int_eq(count_lines(r.out), 1);
    result_free(&r);

    result_free(&e1);
    result_free(&e2);
}
END_TEST

START_TEST(test_import_malformed) {
    const char *good = tpath("good.sql"), *db = tpath("m.db");
    library_export(good);
    result r = RUN("import", good, "--db", db);
    expect_code(&r, 0);
    result_free(&r);
    ck_assert_int_eq(show_count(db, NULL, NULL), 3);
    size_t before_len;
    char *before = NULL;
    {
        result e = RUN("export", "--gpu", "h200", "--db", db);
        expect_code(&e, 0);
        before = strdup(e.out);
        before_len = e.out_len;
        result_free(&e);
    }

    /* A new valid row, then a broken statement: all or nothing. */
    const char *bad = tpath("bad.sql");
    static const char *const malformed[] = {
        "INSERT OR REPLACE INTO tune(gpu, arch, sm_count, family, logits, targets, reduction, options, n, c, "
        "template_version, config, us, gbps, measured_at, settings) VALUES('h200', 90, 132, 'xent_fwd', 2, 1, 2, 0, "
        "8, 8, 1, 'VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0', 3.5, 1.0, 1, '');\n"
        "INSERT INTO tune VALUES('h200', 90, oops\n",
        /* Right syntax, but a statement that is not an INSERT into tune. */
        "INSERT OR REPLACE INTO tune(gpu, arch, sm_count, family, logits, targets, reduction, options, n, c, "
        "template_version, config, us, gbps, measured_at, settings) VALUES('h200', 90, 132, 'xent_fwd', 2, 1, 2, 0, "
        "8, 8, 1, 'VEC=8 TPR=1 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0', 3.5, 1.0, 1, '');\n"
        "DELETE FROM tune;\n",
        "DROP TABLE tune;\n",
        /* A NOT NULL column missing. */
        "INSERT INTO tune(gpu, arch) VALUES('h200', 90);\n",
        "this is not SQL at all\n",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        write_text(bad, malformed[i]);
        r = RUN("import", bad, "--db", db);
        expect_failure(&r, EXIT_CACHE, "xent-tune: tune cache ");
        expect_in("stderr", r.err, "import", &r);
        expect_in("stderr", r.err, "nothing was imported", &r);
        result_free(&r);
        /* Unchanged: same count, same rows. */
        result shown;
        ck_assert_int_eq(show_count(db, NULL, &shown), 3);
        ck_assert(!show_has(&shown, "h200", 90, 132, 8, 8, "", 0));
        result_free(&shown);
        result e = RUN("export", "--gpu", "h200", "--db", db);
        expect_code(&e, 0);
        ck_assert_uint_eq(e.out_len, before_len);
        ck_assert_str_eq(e.out, before);
        result_free(&e);
    }

    /* A file that is not there: a cache error, not a usage one. */
    const char *missing = tpath("no-such.sql");
    r = RUN("import", missing, "--db", db);
    expect_code(&r, EXIT_CACHE);
    expect_in("stderr", r.err, missing, &r);
    result_free(&r);
    ck_assert_int_eq(show_count(db, NULL, NULL), 3);
    free(before);
}
END_TEST

/* Deterministic junk, so a failure reproduces. */
static void random_bytes(char *buf, size_t n, unsigned seed) {
    unsigned x = seed;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (char)(x >> 16);
    }
}

START_TEST(test_corrupt_db) {
    const char *db = tpath("junk.db");
    char junk[16384];
    random_bytes(junk, sizeof junk, 42);
    write_file(db, junk, sizeof junk);

    result r = RUN("show", "--db", db);
    expect_failure(&r, EXIT_CACHE, "xent-tune: tune cache ");
    expect_in("stderr", r.err, db, &r);
    expect_in("stderr", r.err, "not a database", &r);
    result_free(&r);

    r = RUN("export", "--gpu", "h200", "--db", db);
    expect_code(&r, EXIT_CACHE);
    expect_in("stderr", r.err, "not a database", &r);
    result_free(&r);

    /* import refuses it too and leaves the bytes alone. */
    const char *sql = tpath("one.sql");
    library_export(sql);
    r = RUN("import", sql, "--db", db);
    expect_code(&r, EXIT_CACHE);
    expect_in("stderr", r.err, "not a database", &r);
    result_free(&r);
    size_t len;
    char *after = read_all(db, &len);
    ck_assert_uint_eq(len, sizeof junk);
    ck_assert(memcmp(after, junk, len) == 0);
    free(after);
}
END_TEST

START_TEST(test_foreign_and_truncated_db) {
    /* A SQLite file that is not a tune cache. */
    const char *foreign = tpath("foreign.db");
    sqlite3 *s;
    ck_assert_int_eq(sqlite3_open(foreign, &s), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(s, "CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES('hi');", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(s);
    result r = RUN("show", "--db", foreign);
    expect_code(&r, EXIT_CACHE);
    expect_in("stderr", r.err, "not a tune cache", &r);
    result_free(&r);

    /* A tune cache cut short. */
    const char *sql = tpath("all.sql"), *db = tpath("t.db");
    library_export(sql);
    r = RUN("import", sql, "--db", db);
    expect_code(&r, 0);
    result_free(&r);
    ck_assert_int_eq(show_count(db, NULL, NULL), 3);
    ck_assert(!exists(tpath("t.db-wal")) || truncate(tpath("t.db-wal"), 0) == 0);
    struct stat st;
    ck_assert_int_eq(stat(db, &st), 0);
    ck_assert_int_gt(st.st_size, 4096);
    ck_assert_int_eq(truncate(db, 4096 + 100), 0);
    r = RUN("show", "--db", db);
    expect_code(&r, EXIT_CACHE);
    ck_assert_msg(r.out_len == 0 || strstr(r.out, "entries") == NULL, "%s: listed a truncated file:\n%s", r.cmd, r.out);
    expect_in("stderr", r.err, "xent-tune: tune cache ", &r);
    expect_in("stderr", r.err, db, &r);
    ck_assert_msg(strstr(r.err, "malformed") || strstr(r.err, "not a database"),
                  "%s: the message does not say the file is damaged: %s", r.cmd, r.err);
    result_free(&r);
}
END_TEST

/* export --output replaces the file whole or not at all: a failed export
 * leaves the old file and no temporary beside it. */
START_TEST(test_export_output_atomic) {
    const char *sql = tpath("all.sql"), *db = tpath("x.db"), *out = tpath("out/h200.sql");
    library_export(sql);
    result r = RUN("import", sql, "--db", db);
    expect_code(&r, 0);
    result_free(&r);
    ck_assert_int_eq(mkdir(tpath("out"), 0755), 0);
    write_text(out, "-- the previous export\n");

    /* a cache that cannot be read: the export fails, the old file stays */
    const char *junk = tpath("junk.db");
    char bytes[8192];
    random_bytes(bytes, sizeof bytes, 7);
    write_file(junk, bytes, sizeof bytes);
    r = RUN("export", "--gpu", "h200", "--db", junk, "--output", out);
    expect_code(&r, EXIT_CACHE);
    result_free(&r);
    char *text = read_all(out, NULL);
    ck_assert_str_eq(text, "-- the previous export\n");
    free(text);

    /* a cache with a row export cannot write: the same */
    sqlite3 *s;
    ck_assert_int_eq(sqlite3_open(db, &s), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(s, "UPDATE tune SET config = printf('%.500c', 'x') WHERE n = 32768", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
    r = RUN("export", "--gpu", "h200", "--db", db, "--output", out);
    expect_code(&r, EXIT_CACHE);
    result_free(&r);
    text = read_all(out, NULL);
    ck_assert_str_eq(text, "-- the previous export\n");
    free(text);

    /* nothing but the file in its directory */
    int n = 0;
    DIR *d = opendir(tpath("out"));
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(n, 1);

    /* a good export replaces it */
    ck_assert_int_eq(sqlite3_open(db, &s), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(s, "DELETE FROM tune WHERE n = 32768", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
    r = RUN("export", "--gpu", "h200", "--db", db, "--output", out);
    expect_code(&r, 0);
    result_free(&r);
    text = read_all(out, NULL);
    ck_assert_msg(strstr(text, CFG_A) != NULL, "%s", text);
    free(text);
}
END_TEST

/* Output that cannot be written is a failure, with the reason. */
START_TEST(test_stdout_write_error) {
    const char *sql = tpath("all.sql"), *db = tpath("w.db");
    library_export(sql);
    result r = RUN("import", sql, "--db", db);
    expect_code(&r, 0);
    result_free(&r);
    child_stdout = "/dev/full";
    const char *const cmds[][6] = {
        {"show", "--db", db, NULL},
        {"export", "--gpu", "h200", "--db", db, NULL},
        {"--dry-run", "--shape", "8x8", NULL},
        {"--help", NULL},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        r = run_argv(QUICK_S, cmds[i]);
        ck_assert_msg(r.code != 0, "%s: exit 0 with stdout on /dev/full", r.cmd);
        expect_in("stderr", r.err, "xent-tune: ", &r);
        expect_in("stderr", r.err, "No space left on device", &r);
        result_free(&r);
    }
}
END_TEST

/* A cache path too long to use is named as such, with where it came from. */
START_TEST(test_long_cache_path) {
    static char env[5000], db[5000];
    strcpy(env, "XENT_TUNECACHE=/");
    memset(env + 16, 'a', 4200);
    env[4216] = 0;
    child_env[0] = env;
    result r = RUN("show");
    expect_failure(&r, EXIT_CACHE, "xent-tune: ");
    expect_in("stderr", r.err, "XENT_TUNECACHE", &r);
    expect_in("stderr", r.err, "too long", &r);
    result_free(&r);
    memset(child_env, 0, sizeof child_env);
    memset(db, 'b', 4200);
    db[0] = '/';
    db[4200] = 0;
    r = RUN("show", "--db", db);
    expect_failure(&r, EXIT_CACHE, "xent-tune: ");
    expect_in("stderr", r.err, "--db", &r);
    expect_in("stderr", r.err, "too long", &r);
    result_free(&r);
}
END_TEST

/* --dry-run --gpu KEY: what the runtime on that GPU would run, from the
 * shipped caches of $XENT_DATADIR, without a GPU. */
typedef struct lookup_case {
    const char *gpu, *shape, *dtype;
    int arch;         /* in the header */
    const char *want; /* in the lookup line */
} lookup_case;

static const lookup_case lookup_cases[] = {
    {"h200", "32768x4096", "f32", 90, "VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 "},
    {"h200", "32768x4096", "f32", 90, " source=shipped cache=h200"},
    {"h100", "32768x4096", "f32", 90, " source=arch cache=h200"},
    {"h200", "13183x2505", "f16", 90, " source=nearest cache=h200\n"}, /* an f16 entry: no other kind's note */
    {"l40s", "32768x4096", "f32", 89,
     " source=heuristic note=no readable shipped tune cache for l40s or another sm_89 GPU in "},
    /* a key xent does not know is taken as an H200's architecture and SM count, with a note on
     * stderr, and answered by its sibling's cache */
    {"h10", "32768x4096", "f32", 90, " source=arch cache=h200"},
};

START_TEST(test_dry_run_lookup) {
    char datadir[4200], cwd[4096];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    snprintf(datadir, sizeof datadir, "XENT_DATADIR=%s/tunecache", cwd);
    child_env[0] = datadir;
    for (size_t i = 0; i < sizeof lookup_cases / sizeof lookup_cases[0]; i++) {
        const lookup_case *t = &lookup_cases[i];
        char header[40], line[40];
        result r = RUN("--dry-run", "--gpu", t->gpu, "--shape", t->shape, "--dtype", t->dtype, "--config",
                       "VEC=4 TPR=32 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1");
        expect_code(&r, 0);
        snprintf(header, sizeof header, "(sm_%d, ", t->arch);
        snprintf(line, sizeof line, "\n# lookup on %s: VEC=", t->gpu);
        expect_in("stdout", r.out, header, &r);
        expect_in("stdout", r.out, line, &r);
        expect_in("stdout", r.out, t->want, &r);
        if (xent_gpu_find(t->gpu))
            ck_assert_msg(!strstr(r.err, "none of the GPUs"), "%s: a note for a known key:\n%s", r.cmd, r.err);
        else
            expect_in("stderr", r.err, "is none of the GPUs xent knows (h200 h100 ", &r);
        result_free(&r);
    }
    /* and in JSON, an object of the same parts */
    result j = RUN("--dry-run", "--json", "--gpu", "h100", "--shape", "32768x4096", "--config",
                   "VEC=4 TPR=32 BLOCK=128 ITEMS=1 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1");
    expect_code(&j, 0);
    expect_in("stdout", j.out,
              "\"lookup\": {\"config\": \"VEC=4 TPR=32 BLOCK=256 ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3 ",
              &j);
    expect_in("stdout", j.out, "\"source\": \"arch\", \"cache\": \"h200\", \"note\": \"\"}", &j);
    result_free(&j);
    /* without a named GPU there is none to look up for */
    result r = RUN("--dry-run", "--shape", "8x8");
    expect_code(&r, 0);
    ck_assert_msg(!strstr(r.out, "# lookup on"), "%s: a lookup line without --gpu:\n%s", r.cmd, r.out);
    result_free(&r);
}
END_TEST

/* ---- suite ---------------------------------------------------------------------------------- */

static Suite *cli_suite(void) {
    Suite *s = suite_create("cli");
    const scratch_test groups[] = {
        {"usage", 60, test_no_shape},
        {"usage", 60, test_bad_shapes},
        {"usage", 60, test_unknown_option},
        {"usage", 60, test_missing_value},
        {"usage", 60, test_bad_enums},
        {"usage", 60, test_bad_label_smoothing},
        {"usage", 60, test_bad_budget},
        {"usage", 60, test_bad_jobs},
        {"usage", 60, test_bad_arch},
        {"usage", 60, test_other_bad_numbers},
        {"usage", 60, test_dry_run_and_compile_only},
        {"usage", 60, test_commands_usage},
        {"usage", 60, test_shapes_file_errors},
        {"info", 60, test_help},
        {"info", 60, test_version},
        /* a dry run of 32768x4096 is 7 s of CPU; the shapes-file test makes
         * twelve such runs, past a minute on two cores shared with check_compile,
         * minutes under ASan */
        {"dry-run", 600, test_dry_run_one_shape},
        {"dry-run", 60, test_dry_run_problem_options},
        {"dry-run", 60, test_row_stride},
        {"dry-run", 60, test_dry_run_shapes_file},
        {"dry-run", 60, test_dry_run_lookup},
        {"compile-only", 2 * COMPILE_S + 60, test_compile_only_1x1},
        {"compile-only", 2 * COMPILE_S + 60, test_compile_only_4x7_bf16},
        {"compile-only", COMPILE_S + 60, test_config_option},
        {"tune", 2 * COMPILE_S + 30, test_tune_without_gpu},
        {"cache", 60, test_show_missing_db},
        {"cache", 60, test_import_handwritten},
        {"cache", 60, test_export_import_roundtrip},
        {"cache", 60, test_import_malformed},
        {"cache", 60, test_corrupt_db},
        {"cache", 60, test_foreign_and_truncated_db},
        {"cache", 60, test_export_output_atomic},
        {"cache", 60, test_stdout_write_error},
        {"cache", 60, test_long_cache_path},
    };
    /* every candidate of a problem compiled: minutes on two cores */
    static const char *const slow[] = {"compile-only", NULL};
    add_scratch_tests(s, groups, sizeof groups / sizeof groups[0], make_tmpdir, slow);
    return s;
}

int main(void) {
    strcpy(rundir, "/tmp/check_cli.XXXXXX");
    if (!mkdtemp(rundir)) {
        perror("check_cli: mkdtemp");
        return EXIT_FAILURE;
    }
    int rc = run_suite(cli_suite());
    remove_tree(rundir);
    return rc;
}
