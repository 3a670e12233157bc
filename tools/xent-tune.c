/*
 * xent-tune — search kernel configurations on the GPU and store the winners.
 *
 *   xent-tune --gpu h200 --shape 32768x4096        tune one problem
 *   xent-tune --dry-run --shape 64x262144           list candidates (no GPU)
 *   xent-tune --compile-only --arch sm_90 ...       compile candidates (no GPU)
 *   xent-tune show | export --gpu h200 | import FILE
 *
 * Exit status: 0 done, 1 a failure, else one of tools/xent-tune.h.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/files.h"
#include "gen/gen.h"
#include "tools/json.h"
#include "tools/xent-tune.h"
#include "tune/tune.h"
#include "tools/xent-tune-cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [options]                 tune problems on the GPU and store the winners\n"
            "       %s show [--db PATH] [--gpu KEY]\n"
            "       %s export --gpu KEY [--db PATH] [--output FILE]\n"
            "       %s import FILE [--db PATH] [--stamp]\n"
            "\n"
            "problem:\n"
            "  -s, --shape NxC            rows x classes (repeatable), e.g. 32768x4096\n"
            "  -f, --shapes-file FILE     one NxC per line; '#' starts a comment (a line's or a shape's)\n"
            "  -d, --dtype f32|f16|bf16   logits dtype (default f32)\n"
            "  -t, --targets i64|i32      targets dtype (default i64)\n"
            "  -r, --reduction mean|sum|none   (default mean)\n"
            "  -i, --ignore-index N       (default -100)\n"
            "  -l, --label-smoothing X    in [0, 1] (default 0)\n"
            "  -w, --weights              with per-class weights\n"
            "      --lse                  also write the per-row log-sum-exp\n"
            "      --op forward|fused|backward   what to tune (default forward; fused: loss and\n"
            "                             gradient in one pass; backward: gradient from lse)\n"
            "      --z-loss X             z-loss coefficient (default 0)\n"
            "      --softcap X            logit soft-capping cap * tanh(x / cap) (default 0, off)\n"
            "      --row-stride N         elements between row starts, >= C (rows of a wider\n"
            "                             tensor, e.g. logits[:, :C]; default C)\n"
            "search:\n"
            "  -g, --gpu KEY|auto         refuse unless the GPU present is KEY (default auto)\n"
            "  -b, --budget SECONDS       wall-clock budget per problem (default 30)\n"
            "  -x, --exhaustive           time every candidate (ignores the budget)\n"
            "      --config TEXT          only this config (repeatable), e.g. \"VEC=4 TPR=32 BLOCK=256\n"
            "                             ITEMS=16 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=3\": timed\n"
            "                             and listed, not stored as the winner\n"
            "      --store-config         with --config: store the fastest of them as the winner\n"
            "                             (configs an earlier search found, timed again)\n"
            "  -j, --jobs N               compile threads (default: CPUs)\n"
            "      --device N             CUDA device ordinal (default 0)\n"
            "      --db PATH              tune cache (default $XENT_TUNECACHE, else ~/.cache/xent/tune.db)\n"
            "      --stamp                import: mark the cache's unstamped entries as made by this\n"
            "                             build's templates and NVRTC (only for a cache tuned with them)\n"
            "no GPU needed:\n"
            "  -n, --dry-run              print the candidate configurations (with --gpu KEY, also\n"
            "                             the config the runtime on KEY would run)\n"
            "  -c, --compile-only         compile the candidates and print registers and spills\n"
            "  -a, --arch sm_XX           architecture for those two (default: --gpu's, else sm_90)\n"
            "output:\n"
            "      --json                 JSON on stdout instead of tables (tune, show, --dry-run,\n"
            "                             --compile-only); numbers JSON cannot hold are null\n"
            "      --top K                rows of the result table (default 10)\n"
            "  -q, --quiet                no progress on stderr\n"
            "  -h, --help, -V, --version\n",
            PROG, PROG, PROG, PROG);
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", PROG);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry '%s --help'.\n", PROG);
    return EXIT_USAGE;
}

static int parse_shape(const char *s, int64_t *n, int64_t *c) {
    char *end;
    errno = 0;
    long long a = strtoll(s, &end, 10);
    if (end == s || (*end != 'x' && *end != 'X')) return -1;
    const char *rest = end + 1;
    long long b = strtoll(rest, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
    if (end == rest || *end || errno || a < 1 || b < 1 || b > 0x7fffffffLL) return -1;
    *n = a;
    *c = b;
    return 0;
}

#define SHAPE_FORM "expected NxC with N >= 1 and 1 <= C <= 2147483647, e.g. 32768x4096"

/* A shape line is short; a longer one is refused by number rather than read
 * in pieces, each piece a shape of its own. */
#define MAX_SHAPE_LINE 255

static int shapes_file_error(const char *path, const char *what) {
    fprintf(stderr, "%s: shapes file %s%s\nTry '%s --help'.\n", PROG, path, what, PROG);
    return EXIT_USAGE;
}

/* Shape s, from --shape (path NULL) or line `line` of a shapes file, whose
 * error names the line. */
static int add_shape(cli *o, const char *s, const char *path, int line) {
    if (o->nshapes == MAX_SHAPES) return bad_usage("more than 4096 shapes", "");
    if (!parse_shape(s, &o->shapes[o->nshapes][0], &o->shapes[o->nshapes][1])) {
        o->nshapes++;
        return 0;
    }
    if (!path) return bad_usage("bad shape '%s' (" SHAPE_FORM ")", s);
    char what[MAX_SHAPE_LINE + 160];
    snprintf(what, sizeof what, ":%d: bad shape '%s' (" SHAPE_FORM ")", line, s);
    return shapes_file_error(path, what);
}

static int read_shapes_file(cli *o, const char *path) {
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f) {
        fprintf(stderr, "%s: cannot open shapes file '%s': %s\n", PROG, path, strerror(errno));
        return EXIT_USAGE;
    }
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return shapes_file_error(path, " is a directory");
    }
    char *line = NULL, where[64];
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (int no = 1; !rc && (len = getline(&line, &cap, f)) >= 0; no++) {
        /* a NUL byte would end the line early and the rest be dropped unread */
        if (memchr(line, 0, (size_t)len)) {
            snprintf(where, sizeof where, ":%d: holds a NUL byte", no);
            rc = shapes_file_error(path, where);
            break;
        }
        line[strcspn(line, "\r\n")] = 0; /* the message quotes the shape, not its line break */
        if (strlen(line) > MAX_SHAPE_LINE) {
            snprintf(where, sizeof where, ":%d: line longer than %d characters", no, MAX_SHAPE_LINE);
            rc = shapes_file_error(path, where);
            break;
        }
        size_t k = strcspn(line, "#"); /* a comment runs to the end of its line */
        while (k && (line[k - 1] == ' ' || line[k - 1] == '\t')) k--;
        line[k] = 0;
        char *s = line + strspn(line, " \t");
        if (!*s) continue;
        rc = add_shape(o, s, path, no);
    }
    if (!rc && ferror(f)) rc = shapes_file_error(path, ": cannot be read");
    free(line);
    fclose(f);
    return rc;
}

/* names: the values in order, NULL-terminated; a bad value is answered with the list. */
static int parse_enum(const char *arg, const char *const *names, int *out, const char *what) {
    char list[128] = "";
    int n = 0;
    for (; names[n]; n++)
        if (!strcmp(arg, names[n])) {
            *out = n;
            return 0;
        }
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
                 names[i]);
    fprintf(stderr, "%s: bad %s '%s' (expected %s)\nTry '%s --help'.\n", PROG, what, arg, list, PROG);
    return EXIT_USAGE;
}

static int parse_number(const char *arg, double lo, double hi, double *out, const char *what) {
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: bad %s '%s' (expected a number in [%g, %g])\nTry '%s --help'.\n", PROG, what, arg, lo, hi,
                PROG);
        return EXIT_USAGE;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *arg, long long lo, long long hi, long long *out, const char *what) {
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (end == arg || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: bad %s '%s'\nTry '%s --help'.\n", PROG, what, arg, PROG);
        return EXIT_USAGE;
    }
    *out = v;
    return 0;
}

static int parse_arch(const char *arg, int *arch) {
    long long v;
    const char *digits = strncmp(arg, "sm_", 3) ? arg : arg + 3;
    if (parse_int(digits, 50, 200, &v, "architecture")) return EXIT_USAGE;
    *arch = (int)v;
    return 0;
}

/* The text is checked here; whether it suits each problem (dtype, shape) is
 * checked once the problems are known (given_for). */
static int add_given(cli *o, const char *text) {
    char why[256];
    if (o->ngiven == MAX_GIVEN) return bad_usage("at most 64 --config options%s", "");
    if (xent_config_parse(text, &o->given[o->ngiven], why, sizeof why)) {
        fprintf(stderr, "%s: --config '%s': %s\nTry '%s --help'.\n", PROG, text, why, PROG);
        return EXIT_USAGE;
    }
    o->ngiven++;
    return 0;
}

static int parse_option(cli *o, int opt, const char *arg) {
    static const char *const dtypes[] = {"f32", "f16", "bf16", NULL};
    static const char *const targets[] = {"i32", "i64", NULL};
    static const char *const reductions[] = {"none", "sum", "mean", NULL};
    static const char *const ops[] = {"forward", "fused", "backward", NULL};
    double d;
    long long v;
    int e, rc = 0;
    switch (opt) {
    case 's': return add_shape(o, arg, NULL, 0);
    case 'f': return read_shapes_file(o, arg);
    case 'd':
        rc = parse_enum(arg, dtypes, &e, "dtype");
        o->base.logits = (xent_dtype)e;
        return rc;
    case 't':
        rc = parse_enum(arg, targets, &e, "targets dtype");
        o->base.targets = (xent_index)e;
        return rc;
    case 'r':
        rc = parse_enum(arg, reductions, &e, "reduction");
        o->base.reduction = (xent_reduction)e;
        return rc;
    case 'i':
        rc = parse_int(arg, INT64_MIN, INT64_MAX, &v, "ignore index");
        o->base.ignore_index = v;
        return rc;
    case 'l':
        rc = parse_number(arg, 0, 1, &d, "label smoothing");
        o->base.label_smoothing = (float)d;
        return rc;
    case 'w': o->base.has_weights = 1; return 0;
    case 'L': o->base.write_lse = 1; return 0;
    case 'O':
        rc = parse_enum(arg, ops, &e, "op");
        o->base.op = (xent_op)e;
        return rc;
    case 'Z':
        rc = parse_number(arg, 0, 1e6, &d, "z-loss");
        o->base.z_loss = (float)d;
        return rc;
    case 'C':
        rc = parse_number(arg, 0, 1e30, &d, "softcap");
        o->base.softcap = (float)d;
        return rc;
    case 'R':
        rc = parse_int(arg, 1, INT64_MAX, &v, "row stride");
        o->row_stride = v;
        return rc;
    case 'g': o->gpu = arg; return 0;
    case 'b': return parse_number(arg, 0.1, 86400, &o->budget, "budget");
    case 'x': o->exhaustive = 1; return 0;
    case 'K': return add_given(o, arg);
    case 'j':
        rc = parse_int(arg, 1, 64, &v, "jobs");
        o->jobs = (int)v;
        return rc;
    case 'D':
        rc = parse_int(arg, 0, 1024, &v, "device");
        o->device = (int)v;
        return rc;
    case 'B': o->db_path = arg; return 0;
    case 'n': o->dry_run = 1; return 0;
    case 'c': o->compile_only = 1; return 0;
    case 'a': return parse_arch(arg, &o->arch);
    case 'J': o->json = 1; return 0;
    case 'T':
        rc = parse_int(arg, 1, 100000, &v, "top");
        o->top = (int)v;
        return rc;
    case 'q': o->quiet = 1; return 0;
    case 'o': o->output = arg; return 0;
    case 'S': o->stamp = 1; return 0;
    case 'P': o->store_given = 1; return 0;
    default: return EXIT_USAGE;
    }
}

/* The version, then what stamps the entries this build tunes (docs/cache.md): a cache made by
 * other templates or another NVRTC is stale here. */
static void print_version(void) {
    char fwd[32] = "?", grad[32] = "?";
    xent_template_hash("xent_fwd", fwd, sizeof fwd);
    xent_template_hash("xent_grad", grad, sizeof grad);
    const int nvrtc = xent_nvrtc_version();
    printf("xent-tune %d.%d.%d (template %d)\n", XENT_VERSION / 10000, XENT_VERSION / 100 % 100, XENT_VERSION % 100,
           XENT_TEMPLATE_VERSION);
    printf("templates xent_fwd %s, xent_grad %s; NVRTC %d.%d\n", fwd, grad, nvrtc / 100, nvrtc % 100);
}

static int parse_args(cli *o, int argc, char **argv) {
    static const struct option longs[] = {{"shape", required_argument, 0, 's'},
                                          {"shapes-file", required_argument, 0, 'f'},
                                          {"dtype", required_argument, 0, 'd'},
                                          {"targets", required_argument, 0, 't'},
                                          {"reduction", required_argument, 0, 'r'},
                                          {"ignore-index", required_argument, 0, 'i'},
                                          {"label-smoothing", required_argument, 0, 'l'},
                                          {"weights", no_argument, 0, 'w'},
                                          {"lse", no_argument, 0, 'L'},
                                          {"gpu", required_argument, 0, 'g'},
                                          {"op", required_argument, 0, 'O'},
                                          {"z-loss", required_argument, 0, 'Z'},
                                          {"softcap", required_argument, 0, 'C'},
                                          {"row-stride", required_argument, 0, 'R'},
                                          {"budget", required_argument, 0, 'b'},
                                          {"exhaustive", no_argument, 0, 'x'},
                                          {"config", required_argument, 0, 'K'},
                                          {"jobs", required_argument, 0, 'j'},
                                          {"device", required_argument, 0, 'D'},
                                          {"db", required_argument, 0, 'B'},
                                          {"dry-run", no_argument, 0, 'n'},
                                          {"compile-only", no_argument, 0, 'c'},
                                          {"arch", required_argument, 0, 'a'},
                                          {"json", no_argument, 0, 'J'},
                                          {"top", required_argument, 0, 'T'},
                                          {"quiet", no_argument, 0, 'q'},
                                          {"output", required_argument, 0, 'o'},
                                          {"stamp", no_argument, 0, 'S'},
                                          {"store-config", no_argument, 0, 'P'},
                                          {"help", no_argument, 0, 'h'},
                                          {"version", no_argument, 0, 'V'},
                                          {0, 0, 0, 0}};
    int opt, rc;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":s:f:d:t:r:i:l:wg:b:xj:na:cqo:hV", longs, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            exit(0);
        }
        if (opt == 'V') {
            print_version();
            exit(0);
        }
        if (opt == '?') {
            /* optopt is set for a short option (argv[optind - 1] may be the element before
             * its group) and for a long one given a value it does not take ("--lse=1"). */
            const char *a = argv[optind - 1], *eq = strchr(a, '=');
            int long_val = 0;
            for (const struct option *l = longs; optopt && eq && !strncmp(a, "--", 2) && l->name; l++)
                long_val |= l->val == optopt && !strncmp(l->name, a + 2, (size_t)(eq - a - 2));
            if (optopt && !long_val) {
                char name[3] = {'-', (char)optopt, 0};
                return bad_usage("unknown option '%s'", name);
            }
            return bad_usage("unknown option '%s'", a);
        }
        if (opt == ':') return bad_usage("option '%s' needs a value", argv[optind - 1]);
        if ((rc = parse_option(o, opt, optarg))) return rc;
    }
    if (optind < argc) {
        o->command = argv[optind++];
        if (strcmp(o->command, "show") && strcmp(o->command, "export") && strcmp(o->command, "import"))
            return bad_usage("unknown command '%s' (expected show, export or import)", o->command);
        if (!strcmp(o->command, "import")) {
            if (optind == argc) return bad_usage("import needs a FILE%s", "");
            o->import_path = argv[optind++];
        }
        if (optind < argc) return bad_usage("unexpected argument '%s'", argv[optind]);
        if (!strcmp(o->command, "export") && !named_gpu(o)) return bad_usage("export needs --gpu KEY%s", "");
        return 0;
    }
    if (!o->nshapes) return bad_usage("no problem given: use --shape NxC or --shapes-file FILE%s", "");
    if (o->dry_run && o->compile_only) return bad_usage("--dry-run and --compile-only exclude each other%s", "");
    if (o->ngiven && o->exhaustive) return bad_usage("--config and --exhaustive exclude each other%s", "");
    if (o->store_given && !o->ngiven) return bad_usage("--store-config needs --config%s", "");
    return 0;
}

/* At exit, whatever the path to it: output that did not reach stdout (a full
 * disk, a closed pipe) makes the run a failure, said on stderr. */
static void close_stdout(void) {
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        fprintf(stderr, "%s: write error on standard output: %s\n", PROG, strerror(err ? err : EIO));
        _exit(1);
    }
}

int main(int argc, char **argv) {
    static cli o;
    atexit(close_stdout);
    xent_problem_init(&o.base, 1, 1);
    o.gpu = "auto";
    o.budget = 30;
    o.top = 10;
    o.arch = 0; /* --gpu's, else sm_90 (offline_arch) */
    int rc = parse_args(&o, argc, argv);
    if (rc) return rc;
    if (o.command && !strcmp(o.command, "show")) return cmd_show(&o);
    if (o.command && !strcmp(o.command, "export")) return cmd_export(&o);
    if (o.command && !strcmp(o.command, "import")) return cmd_import(&o);
    if ((rc = check_problems(&o))) return rc;
    if (o.dry_run) return cmd_dry_run(&o);
    if (o.compile_only) return cmd_compile_only(&o);
    return cmd_tune(&o);
}
