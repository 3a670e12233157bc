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

#define MAX_SHAPES 4096
#define MAX_GIVEN 64

typedef struct cli {
    const char *command; /* NULL (tune), "show", "export", "import" */
    const char *import_path, *output, *db_path, *gpu;
    int64_t shapes[MAX_SHAPES][2];
    int nshapes;
    xent_problem base;
    xent_config given[MAX_GIVEN]; /* --config: these instead of the search space */
    int ngiven;
    double budget;
    int json, dry_run, compile_only, exhaustive, quiet, device, top, jobs, arch;
    int stamp;          /* import --stamp */
    int64_t row_stride; /* --row-stride: elements between row starts (0: c, contiguous rows) */
} cli;

static const char *prog = "xent-tune";

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [options]                 tune problems on the GPU and store the winners\n"
            "       %s show [--db PATH] [--gpu KEY]\n"
            "       %s export --gpu KEY [--db PATH] [--output FILE]\n"
            "       %s import FILE [--db PATH] [--stamp]\n"
            "\n"
            "problem:\n"
            "  -s, --shape NxC            rows x classes (repeatable), e.g. 32768x4096\n"
            "  -f, --shapes-file FILE     one NxC per line ('#' comments)\n"
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
            "                             and listed, never stored as the winner\n"
            "  -j, --jobs N               compile threads (default: CPUs)\n"
            "      --device N             CUDA device ordinal (default 0)\n"
            "      --db PATH              tune cache (default $XENT_TUNECACHE, else ~/.cache/xent/tune.db)\n"
            "      --stamp                import: mark the cache's unstamped entries as made by this\n"
            "                             build's templates and NVRTC (only for a cache tuned with them)\n"
            "no GPU needed:\n"
            "  -n, --dry-run              print the candidate configurations\n"
            "  -c, --compile-only         compile the candidates and print registers and spills\n"
            "  -a, --arch sm_XX           architecture for those two (default sm_90)\n"
            "output:\n"
            "      --json                 JSON on stdout instead of tables (tune, show, --dry-run,\n"
            "                             --compile-only); numbers JSON cannot hold are null\n"
            "      --top K                rows of the result table (default 10)\n"
            "  -q, --quiet                no progress on stderr\n"
            "  -h, --help, -V, --version\n",
            prog, prog, prog, prog);
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry '%s --help'.\n", prog);
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

static int add_shape(cli *o, const char *s) {
    if (o->nshapes == MAX_SHAPES) return bad_usage("more than 4096 shapes", "");
    if (parse_shape(s, &o->shapes[o->nshapes][0], &o->shapes[o->nshapes][1]))
        return bad_usage("bad shape '%s' (expected NxC with N, C >= 1, e.g. 32768x4096)", s);
    o->nshapes++;
    return 0;
}

/* A shape line is short; a longer one is refused by number rather than read
 * in pieces, each piece a shape of its own. */
#define MAX_SHAPE_LINE 255

static int shapes_file_error(const char *path, const char *what) {
    fprintf(stderr, "%s: shapes file %s%s\nTry '%s --help'.\n", prog, path, what, prog);
    return EXIT_USAGE;
}

static int read_shapes_file(cli *o, const char *path) {
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f) {
        fprintf(stderr, "%s: cannot open shapes file '%s': %s\n", prog, path, strerror(errno));
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
        char *s = line + strspn(line, " \t");
        if (*s == '#' || !*s) continue;
        rc = add_shape(o, s);
    }
    if (!rc && ferror(f)) rc = shapes_file_error(path, ": cannot be read");
    free(line);
    fclose(f);
    return rc;
}

static int parse_enum(const char *arg, const char *const *names, int *out, const char *what) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(arg, names[i])) {
            *out = i;
            return 0;
        }
    fprintf(stderr, "%s: bad %s '%s'\nTry '%s --help'.\n", prog, what, arg, prog);
    return EXIT_USAGE;
}

static int parse_number(const char *arg, double lo, double hi, double *out, const char *what) {
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: bad %s '%s' (expected a number in [%g, %g])\nTry '%s --help'.\n", prog, what, arg, lo, hi,
                prog);
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
        fprintf(stderr, "%s: bad %s '%s'\nTry '%s --help'.\n", prog, what, arg, prog);
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
        fprintf(stderr, "%s: --config '%s': %s\nTry '%s --help'.\n", prog, text, why, prog);
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
    case 's': return add_shape(o, arg);
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
    default: return EXIT_USAGE;
    }
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
            printf("xent-tune %d.%d.%d (template %d)\n", XENT_VERSION / 10000, XENT_VERSION / 100 % 100,
                   XENT_VERSION % 100, XENT_TEMPLATE_VERSION);
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
        if (!strcmp(o->command, "export") && !strcmp(o->gpu, "auto")) return bad_usage("export needs --gpu KEY%s", "");
        return 0;
    }
    if (!o->nshapes) return bad_usage("no problem given: use --shape NxC or --shapes-file FILE%s", "");
    if (o->dry_run && o->compile_only) return bad_usage("--dry-run and --compile-only exclude each other%s", "");
    if (o->ngiven && o->exhaustive) return bad_usage("--config and --exhaustive exclude each other%s", "");
    return 0;
}

/* ---- the tune cache ---- */

/* The environment variable tc_user_path took the path from, for messages. */
static const char *user_path_source(void) {
    const char *v = getenv("XENT_TUNECACHE"), *from;
    char home[4096];
    if (v && *v) return "XENT_TUNECACHE";
    xent_cache_home(home, sizeof home, &from);
    return from;
}

static int cache_path(const cli *o, char *path, size_t len) {
    if (o->db_path) {
        if (snprintf(path, len, "%s", o->db_path) < (int)len) return 0;
        fprintf(stderr, "%s: the --db path is too long (%zu bytes, at most %zu)\n", prog, strlen(o->db_path), len - 1);
        return EXIT_CACHE;
    }
    if (tc_user_path(path, len) == XENT_OK) return 0;
    const char *from = user_path_source();
    if (from)
        fprintf(stderr, "%s: the tune cache path made from $%s is too long (at most %zu bytes); pass --db\n", prog,
                from, len - 1);
    else
        fprintf(stderr, "%s: no tune cache path: set XENT_TUNECACHE or HOME, or pass --db\n", prog);
    return EXIT_CACHE;
}

static int open_db(const cli *o, int readonly, tc_db **db) {
    char path[4096], err[1024];
    int rc = cache_path(o, path, sizeof path);
    if (rc) return rc;
    if (!readonly) xent_mkdirs(path, 0);
    if (tc_open(path, readonly, db, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return EXIT_CACHE;
    }
    return 0;
}

static const char *dtype_name(int d) { return d == XENT_F32 ? "f32" : d == XENT_F16 ? "f16" : "bf16"; }
static const char *red_name(int r) { return r == XENT_REDUCE_NONE ? "none" : r == XENT_REDUCE_SUM ? "sum" : "mean"; }
static const char *targets_name(int t) { return t == XENT_I64 ? "i64" : "i32"; }

/* The fields a problem and a tune-cache key share, named alike in both. */
static void json_shape(json *j, int64_t n, int64_t c, int logits, int targets, int reduction) {
    json_int(j, "n", n);
    json_int(j, "c", c);
    json_string(j, "dtype", dtype_name(logits));
    json_string(j, "targets", targets_name(targets));
    json_string(j, "reduction", red_name(reduction));
}

/* A problem as --json writes it: every field that selects a kernel. */
static void json_problem(json *j, const char *key, const xent_problem *p) {
    static const char *ops[] = {"forward", "fused", "backward", "combine", "rescale"};
    json_object(j, key);
    json_shape(j, p->n, p->c, p->logits, p->targets, p->reduction);
    json_int(j, "ignore_index", p->ignore_index);
    json_number(j, "label_smoothing", p->label_smoothing);
    json_bool(j, "weights", p->has_weights);
    json_bool(j, "lse", p->write_lse);
    json_string(j, "op", ops[p->op]);
    json_number(j, "z_loss", p->z_loss);
    json_number(j, "softcap", p->softcap);
    json_int(j, "row_stride", p->row_stride);
    json_end(j);
}

typedef struct show_state {
    json *j; /* NULL: a table */
    int rows;
} show_state;

static void show_json_row(json *j, const tc_key *k, const tc_entry *e) {
    json_object(j, NULL);
    json_string(j, "gpu", k->gpu);
    json_int(j, "arch", k->arch);
    json_int(j, "sm_count", k->sm_count);
    json_string(j, "family", k->family);
    json_shape(j, k->n, k->c, k->logits, k->targets, k->reduction);
    json_int(j, "options", k->options);
    json_number(j, "us", e->us);
    json_number(j, "gbps", e->gbps);
    json_string(j, "config", e->config);
    json_string(j, "settings", e->settings);
    json_int(j, "when", e->when);
    json_string(j, "template_hash", e->template_hash);
    json_int(j, "nvrtc", e->nvrtc);
    json_end(j);
}

static int show_row(void *arg, const tc_key *k, const tc_entry *e) {
    show_state *s = arg;
    if (s->j) {
        s->rows++;
        show_json_row(s->j, k, e);
        return 0;
    }
    if (!s->rows++)
        printf("%-6s %-5s %4s %-5s %-4s %-4s %3s %9s %7s %9s %7s  %s\n", "gpu", "arch", "sms", "dtype", "tgt", "red",
               "opt", "n", "c", "us", "GB/s", "config");
    printf("%-6s sm_%-2d %4d %-5s %-4s %-4s %3d %9lld %7lld %9.2f %7.0f  %s\n", k->gpu, k->arch, k->sm_count,
           dtype_name(k->logits), targets_name(k->targets), red_name(k->reduction), k->options, (long long)k->n,
           (long long)k->c, e->us, e->gbps, e->config);
    return 0;
}

/* The entries of a cache that exists; EXIT_CACHE when it cannot be read. */
static int show_entries(const cli *o, show_state *s) {
    tc_db *db;
    int rc = open_db(o, 1, &db);
    if (rc) return rc;
    const char *gpu = strcmp(o->gpu, "auto") ? o->gpu : NULL;
    rc = tc_foreach(db, gpu, show_row, s);
    if (rc) fprintf(stderr, "%s: %s\n", prog, tc_errmsg(db));
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}

/* --json: {"db": path, "entries": [...]}, closed even when reading failed. */
static int cmd_show(const cli *o) {
    char path[4096];
    struct stat st;
    json j;
    show_state s = {o->json ? &j : NULL, 0};
    int rc = cache_path(o, path, sizeof path);
    if (rc) return rc;
    /* before the first tune there is no file: an empty cache, not an error */
    int none = stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
    if (o->json) {
        json_start(&j, stdout);
        json_object(&j, NULL);
        json_string(&j, "db", path);
        json_array(&j, "entries");
    }
    rc = none ? 0 : show_entries(o, &s);
    if (o->json) {
        json_end(&j);
        json_end(&j);
    } else if (none) {
        printf("0 entries (no tune cache at %s yet)\n", path);
    } else if (!rc) {
        printf("%d entr%s\n", s.rows, s.rows == 1 ? "y" : "ies");
    }
    return rc;
}

/* --output is written as a temporary file beside it and renamed into place,
 * so a reader sees the old export or the whole new one, never a part; a
 * failed export leaves the old file. A path that is not a regular file
 * (/dev/stdout, a FIFO) cannot be replaced and is written directly. */
typedef struct out_file {
    FILE *f;
    char tmp[4200]; /* "" when written directly */
} out_file;

static int open_output(const char *path, out_file *o) {
    struct stat st;
    o->tmp[0] = 0;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return (o->f = fopen(path, "w")) ? 0 : -1;
    char target[4096];
    /* a symbolic link is followed, so the file it names is the one replaced */
    const char *real = realpath(path, target) ? target : path;
    if (snprintf(o->tmp, sizeof o->tmp, "%s.XXXXXX", real) >= (int)sizeof o->tmp) return errno = ENAMETOOLONG, -1;
    int fd = mkstemp(o->tmp);
    if (fd < 0) return o->tmp[0] = 0, -1;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask); /* as fopen would have made it */
    if (!(o->f = fdopen(fd, "w"))) {
        close(fd);
        unlink(o->tmp);
        return -1;
    }
    return 0;
}

/* Closes, then renames into place when ok; else removes the temporary.
 * -1 (errno set) when what was to be written is not in place. */
static int close_output(out_file *o, const char *path, int ok) {
    int bad = fflush(o->f) != 0 || ferror(o->f);
    if (!bad && ok && o->tmp[0]) bad = fsync(fileno(o->f)) != 0;
    bad |= fclose(o->f) != 0;
    if (!o->tmp[0]) return bad ? -1 : 0;
    char target[4096];
    const char *real = realpath(path, target) ? target : path;
    if (ok && !bad && rename(o->tmp, real) == 0) return 0;
    int err = errno;
    unlink(o->tmp);
    errno = err;
    return -1;
}

static int cmd_export(const cli *o) {
    tc_db *db;
    int rc = open_db(o, 1, &db);
    if (rc) return rc;
    out_file out = {stdout, ""};
    if (o->output && open_output(o->output, &out)) {
        fprintf(stderr, "%s: cannot write '%s': %s\n", prog, o->output, strerror(errno));
        tc_close(db);
        return EXIT_CACHE;
    }
    rc = tc_export(db, o->gpu, out.f);
    if (rc) fprintf(stderr, "%s: %s%s\n", prog, tc_errmsg(db), o->output ? " (the output file is unchanged)" : "");
    if (o->output && close_output(&out, o->output, !rc) && !rc) {
        fprintf(stderr, "%s: cannot write '%s': %s\n", prog, o->output, strerror(errno));
        rc = XENT_ECACHE;
    }
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}

static int cmd_import(const cli *o) {
    tc_db *db;
    int rc = open_db(o, 0, &db), rows = 0;
    if (rc) return rc;
    rc = tc_import_file(db, o->import_path, &rows);
    if (rc)
        fprintf(stderr, "%s: %s (nothing was imported)\n", prog, tc_errmsg(db));
    else
        printf("imported %d entr%s from %s\n", rows, rows == 1 ? "y" : "ies", o->import_path);
    if (!rc && o->stamp && (rc = tc_stamp(db, xent_template_hash, xent_nvrtc_version(), &rows)))
        fprintf(stderr, "%s: %s\n", prog, tc_errmsg(db));
    else if (!rc && o->stamp)
        printf("stamped %d entr%s\n", rows, rows == 1 ? "y" : "ies");
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}

/* ---- no-GPU modes ---- */

static void problem_for(const cli *o, int i, xent_problem *p) {
    *p = o->base;
    p->n = o->shapes[i][0];
    p->c = o->shapes[i][1];
    p->row_stride = o->row_stride ? o->row_stride : p->c;
}

/* Every problem passes the library's own check before anything computes with
 * its fields: a shape can parse and still overflow n * row_stride. */
static int check_problems(const cli *o) {
    char why[256];
    for (int i = 0; i < o->nshapes; i++) {
        xent_problem p;
        problem_for(o, i, &p);
        if (xent_problem_check(&p, why, sizeof why)) {
            fprintf(stderr, "%s: shape %lldx%lld: %s\nTry '%s --help'.\n", prog, (long long)p.n, (long long)p.c, why,
                    prog);
            return EXIT_USAGE;
        }
    }
    return 0;
}

static void describe_problem(const xent_problem *p, char *buf, size_t len) {
    static const char *ops[] = {"", " fused", " backward", " combine", " rescale"};
    char stride[40] = "";
    if (p->row_stride != p->c) snprintf(stride, sizeof stride, " stride %lld", (long long)p->row_stride);
    snprintf(buf, len, "%lldx%lld %s %s %s%s%s%s%s%s%s%s", (long long)p->n, (long long)p->c, dtype_name(p->logits),
             p->targets == XENT_I64 ? "i64" : "i32", red_name(p->reduction), p->has_weights ? " weights" : "",
             p->label_smoothing > 0 ? " smoothing" : "", p->write_lse ? " lse" : "", stride, ops[p->op],
             p->z_loss > 0 ? " z-loss" : "", p->softcap > 0 ? " softcap" : "");
}

static int offline_sm_count(const cli *o) {
    const xent_gpu_spec *g = strcmp(o->gpu, "auto") ? xent_gpu_find(o->gpu) : NULL;
    return g ? g->sms[0] : 132;
}

/* 0 when every --config can run p, else EXIT_USAGE with the reason on stderr. */
static int check_given(const cli *o, const xent_problem *p) {
    char why[256], cfg[200], what[160];
    for (int k = 0; k < o->ngiven; k++)
        if (!xent_config_fits(&o->given[k], p, why, sizeof why)) {
            xent_config_format(&o->given[k], cfg, sizeof cfg);
            describe_problem(p, what, sizeof what);
            fprintf(stderr, "%s: --config '%s' cannot run %s: %s\nTry '%s --help'.\n", prog, cfg, what, why, prog);
            return EXIT_USAGE;
        }
    return 0;
}

/* The configs to list or compile for p (malloc'd): the --config ones, else
 * the space's. Returns the count, or -1 (out of memory) or -EXIT_USAGE. */
static int candidates(const cli *o, const xent_problem *p, xent_config **out) {
    if (o->ngiven) {
        if (check_given(o, p)) return -EXIT_USAGE;
        *out = calloc((size_t)o->ngiven, sizeof **out);
        if (!*out) return -1;
        memcpy(*out, o->given, (size_t)o->ngiven * sizeof **out);
        return o->ngiven;
    }
    int sms = offline_sm_count(o);
    size_t n = xent_space_enumerate(p->logits, p, sms, NULL, 0);
    *out = calloc(n + 1, sizeof **out);
    if (!*out) return -1;
    xent_space_enumerate(p->logits, p, sms, *out, n);
    return (int)n;
}

/* The heuristic's config for p, offline (the SM count of --gpu, else an H200's). */
static void heuristic_text(const cli *o, const xent_problem *p, char *buf, size_t len) {
    xent_config h;
    xent_config_heuristic(p, offline_sm_count(o), &h);
    xent_config_format(&h, buf, len);
}

static int cmd_dry_run(const cli *o) {
    json j;
    if (o->json) {
        json_start(&j, stdout);
        json_array(&j, NULL);
    }
    int rc = 0;
    for (int i = 0; !rc && i < o->nshapes; i++) {
        xent_problem p;
        char what[160], cfg[200];
        xent_config *cfgs;
        problem_for(o, i, &p);
        describe_problem(&p, what, sizeof what);
        int n = candidates(o, &p, &cfgs);
        if (n < 0) {
            rc = n == -EXIT_USAGE ? EXIT_USAGE : 1;
            break;
        }
        if (o->json) {
            json_object(&j, NULL);
            json_problem(&j, "problem", &p);
            json_int(&j, "arch", o->arch);
            json_int(&j, "sm_count", offline_sm_count(o));
            json_array(&j, "candidates");
        } else {
            printf("# %s: %d candidates (sm_%d, %d SMs)\n", what, n, o->arch, offline_sm_count(o));
        }
        for (int k = 0; k < n; k++) {
            xent_config_format(&cfgs[k], cfg, sizeof cfg);
            if (o->json)
                json_string(&j, NULL, cfg);
            else
                printf("%s\n", cfg);
        }
        heuristic_text(o, &p, cfg, sizeof cfg);
        if (o->json) {
            json_end(&j);
            json_string(&j, "heuristic", cfg);
            json_end(&j);
        } else {
            printf("# heuristic: %s\n", cfg);
        }
        free(cfgs);
    }
    if (o->json) json_end(&j);
    return rc;
}

typedef struct bar {
    int tty, quiet, last;
} bar;

/* Progress on stderr: a bar on a terminal, else a line every 25 candidates
 * (every chunk, when compiling) and at the end. best_us <= 0: nothing timed yet. */
static void progress(void *arg, int done, int total, double best_us, const char *stage) {
    bar *b = arg;
    char best[40] = "";
    if (b->quiet) return;
    if (best_us > 0) snprintf(best, sizeof best, b->tty ? " best %8.2f us" : ", best %.2f us", best_us);
    if (b->tty) {
        int width = 30, fill = total ? done * width / total : 0;
        fprintf(stderr, "\r  %-10s [%.*s%*s] %4d/%-4d%s", stage, fill, "##############################", width - fill,
                "", done, total, best);
        fflush(stderr);
    } else if (done - b->last >= 25 || done == total) {
        fprintf(stderr, "  %s: %d/%d candidates%s\n", stage, done, total, best);
        b->last = done;
    }
}

/* Compile n candidates in chunks, so that progress shows between them; a
 * chunk is several per thread, so threads seldom wait on the last of one.
 * Only each kernel's counters are kept: a space's CUBINs would not fit. */
static void compile_all(const cli *o, const xent_problem *p, const xent_config *cfgs, int n, int *status,
                        xent_cubin *bins, char (*errs)[512]) {
    xent_tune_opts defaults;
    xent_tune_opts_init(&defaults); /* --jobs defaults to the CPUs, as for a tune */
    int threads = o->jobs ? o->jobs : defaults.threads, chunk = threads * 16;
    bar b = {isatty(2), o->quiet, 0};
    for (int at = 0; at < n; at += chunk) {
        int m = n - at < chunk ? n - at : chunk;
        xent_compile_many(cfgs + at, m, p, 1, o->arch, threads, status + at, bins + at, errs + at);
        for (int k = at; k < at + m; k++) xent_cubin_free(&bins[k]);
        progress(&b, at + m, n, 0, "compile");
    }
    if (b.tty && !b.quiet) fputc('\n', stderr);
}

static void compile_report(json *j, const xent_config *c, int status, const xent_cubin *bin, const char *err) {
    char cfg[200];
    xent_config_format(c, cfg, sizeof cfg);
    if (!j) {
        if (status)
            printf("FAILED %s: %s\n", cfg, err);
        else
            printf("%5d %6d %6d %6d  %s\n", bin->registers, bin->spill_bytes, bin->stack_bytes, bin->smem_bytes, cfg);
        return;
    }
    json_object(j, NULL);
    json_string(j, "config", cfg);
    if (status) {
        json_string(j, "error", err);
    } else {
        json_int(j, "registers", bin->registers);
        json_int(j, "spill_bytes", bin->spill_bytes);
        json_int(j, "stack_bytes", bin->stack_bytes);
        json_int(j, "smem_bytes", bin->smem_bytes);
    }
    json_end(j);
}

/* One problem's candidates compiled and reported; the failures are counted into *failed. */
static int compile_problem(const cli *o, json *j, int i, int *failed) {
    xent_problem p;
    char what[160];
    xent_config *cfgs;
    problem_for(o, i, &p);
    describe_problem(&p, what, sizeof what);
    int n = candidates(o, &p, &cfgs);
    if (n < 0) return n == -EXIT_USAGE ? EXIT_USAGE : 1;
    int *status = calloc((size_t)n + 1, sizeof *status);
    xent_cubin *bins = calloc((size_t)n + 1, sizeof *bins);
    char(*errs)[512] = calloc((size_t)n + 1, sizeof *errs);
    int rc = status && bins && errs ? 0 : 1;
    if (!rc) {
        if (!o->quiet) fprintf(stderr, "compiling %d candidates of %s for sm_%d\n", n, what, o->arch);
        compile_all(o, &p, cfgs, n, status, bins, errs);
        if (j) {
            json_object(j, NULL);
            json_problem(j, "problem", &p);
            json_int(j, "arch", o->arch);
            json_array(j, "results");
        } else {
            printf("# %s: %d candidates compiled for sm_%d\n%5s %6s %6s %6s  %s\n", what, n, o->arch, "regs", "spill",
                   "stack", "smem", "config");
        }
        for (int k = 0; k < n; k++) {
            *failed += status[k] != 0;
            compile_report(j, &cfgs[k], status[k], &bins[k], errs[k]);
        }
        if (j) {
            json_end(j);
            json_end(j);
        }
    }
    free(status);
    free(bins);
    free(errs);
    free(cfgs);
    return rc;
}

static int cmd_compile_only(const cli *o) {
    json j;
    int failed = 0, rc = 0;
    if (o->json) {
        json_start(&j, stdout);
        json_array(&j, NULL);
    }
    for (int i = 0; !rc && i < o->nshapes; i++) rc = compile_problem(o, o->json ? &j : NULL, i, &failed);
    if (o->json) json_end(&j);
    if (failed) fprintf(stderr, "%s: %d candidates failed to compile\n", prog, failed);
    return rc ? rc : failed ? 1 : 0;
}

/* ---- tuning ---- */

static int check_gpu(const cli *o, const xent_device_info *info) {
    if (!strcmp(o->gpu, "auto")) return 0;
    const xent_gpu_spec *g = xent_gpu_find(o->gpu);
    int cc = info->cc_major * 10 + info->cc_minor, sm_ok = !g;
    for (int i = 0; g && i < 3 && g->sms[i]; i++) sm_ok |= g->sms[i] == info->sm_count;
    if (strcmp(info->key, o->gpu) || (g && g->cc != cc) || !sm_ok) {
        fprintf(stderr,
                "%s: the GPU present is %s (key %s, sm_%d, %d SMs), not %s%s; refusing to store entries for it\n", prog,
                info->name, info->key, cc, info->sm_count, o->gpu, g ? "" : " (unknown key)");
        return EXIT_DEVICE;
    }
    return 0;
}

static void config_text(const xent_config *c, char *buf, size_t len) { xent_config_format(c, buf, len); }

/* Why a search ended with no winner, by what became of its candidates. */
static void no_winner_reason(const xent_tune_result *r, char *why, size_t cap) {
    int n[TRIAL_PRUNED + 1] = {0};
    for (int i = 0; i < r->ntrials; i++) n[r->trials[i].status]++;
    snprintf(why, cap, "no candidate was timed: %d wrong, %d failed to compile, %d failed to launch, %d pruned",
             n[TRIAL_WRONG], n[TRIAL_COMPILE_ERROR], n[TRIAL_LAUNCH_ERROR], n[TRIAL_PRUNED]);
}

static void print_table(const cli *o, const xent_problem *p, const xent_device_info *info, const xent_tune_result *r) {
    char what[160], cfg[200];
    describe_problem(p, what, sizeof what);
    printf("%s %s: %d candidates, %d timed, %d failed, %.1f s\n", info->key, what, r->candidates, r->timed, r->failed,
           r->wall_s);
    /* a short budget on a cold kernel cache can end the search before any
     * variant (cache hint, block, persistence, POLY...) was tried */
    if (r->unreached)
        printf("budget: %d variants of the fastest structures left untimed (--budget %.0f s; a larger one times "
               "them)\n",
               r->unreached, o->budget);
    printf("floor (streaming read of the same %.1f MB): %.2f us = %.2f TB/s\n", r->bytes / 1e6, r->floor_us,
           r->bytes / (r->floor_us * 1e6));
    printf("%4s %9s %7s %7s %8s  %s\n", "rank", "us", "GB/s", "%floor", "vs heur", "config");
    int shown = 0;
    for (int i = 0; i < r->ntrials && shown < o->top; i++) {
        const xent_trial *t = &r->trials[i];
        if (t->status != TRIAL_OK) continue;
        config_text(&t->config, cfg, sizeof cfg);
        printf("%4d %9.2f %7.0f %6.1f%% %7.2fx  %s\n", ++shown, t->us, t->gbps, 100.0 * r->floor_us / t->us,
               r->heuristic.us / t->us, cfg);
    }
    config_text(&r->heuristic.config, cfg, sizeof cfg);
    printf("heuristic %9.2f us  %s\n", r->heuristic.us, cfg);
    config_text(&r->best.config, cfg, sizeof cfg);
    if (r->best.status == TRIAL_OK)
        printf("%s %9.2f us  %.2fx the heuristic, %.1f%% of the floor  %s%s\n", o->ngiven ? "fastest  " : "winner   ",
               r->best.us, r->heuristic.us / r->best.us, 100.0 * r->floor_us / r->best.us, cfg,
               o->ngiven ? "  (of the --config list; not stored)" : "");
    for (int i = 0, n = 0; i < r->ntrials && n < 5; i++)
        if (r->trials[i].status == TRIAL_WRONG || r->trials[i].status == TRIAL_COMPILE_ERROR) {
            config_text(&r->trials[i].config, cfg, sizeof cfg);
            printf("skipped: %s: %s\n", cfg, r->trials[i].reason);
            n++;
        }
}

static void json_trial(json *j, const char *key, const xent_trial *t) {
    char cfg[200];
    config_text(&t->config, cfg, sizeof cfg);
    json_object(j, key);
    json_string(j, "config", cfg);
    json_number(j, "us", t->us);
    json_number(j, "gbps", t->gbps);
    json_end(j);
}

/* One tuned problem: the measurements a table shows (unmeasured ones null). */
static void print_json(json *j, const cli *o, const xent_problem *p, const xent_device_info *info,
                       const xent_tune_result *r) {
    json_object(j, NULL);
    json_string(j, "gpu", info->key);
    json_string(j, "device", info->name);
    json_problem(j, "problem", p);
    json_number(j, "bytes", r->bytes);
    json_number(j, "floor_us", r->floor_us);
    json_number(j, "wall_s", r->wall_s);
    json_int(j, "candidates", r->candidates);
    json_int(j, "timed", r->timed);
    json_int(j, "failed", r->failed);
    json_int(j, "unreached", r->unreached);
    json_bool(j, "given", o->ngiven > 0);
    json_trial(j, "heuristic", &r->heuristic);
    if (r->best.status == TRIAL_OK)
        json_trial(j, "best", &r->best);
    else
        json_string(j, "best", NULL);
    json_array(j, "top");
    for (int i = 0, n = 0; i < r->ntrials && n < o->top; i++)
        if (r->trials[i].status == TRIAL_OK) {
            json_trial(j, NULL, &r->trials[i]);
            n++;
        }
    json_end(j);
    json_end(j);
}

static int open_context(const cli *o, xent_context **ctx, xent_device_info *info) {
    int rc = xent_context_create(ctx, o->device);
    if (!rc) rc = xent_device_get_info(*ctx, info);
    if (rc) {
        fprintf(stderr, "%s: %s: %s\n", prog, xent_errstr(rc), xent_errmsg(*ctx));
        xent_context_destroy(*ctx);
        *ctx = NULL;
        return rc == XENT_ENODRIVER || rc == XENT_ENODEVICE ? EXIT_DEVICE : 1;
    }
    return check_gpu(o, info);
}

static int tune_one(const cli *o, xent_context *ctx, const xent_device_info *info, tc_db *db, json *j, int i) {
    xent_problem p;
    xent_tune_opts opts;
    xent_tune_result r;
    char settings[200], what[160];
    bar b = {isatty(2), o->quiet, 0};
    problem_for(o, i, &p);
    describe_problem(&p, what, sizeof what);
    xent_tune_opts_init(&opts);
    opts.budget_s = o->budget;
    opts.exhaustive = o->exhaustive;
    if (o->jobs) opts.threads = o->jobs;
    opts.progress = progress;
    opts.progress_arg = &b;
    opts.db = db;
    snprintf(settings, sizeof settings, "budget=%g exhaustive=%d reps=%d", o->budget, o->exhaustive, opts.reps);
    opts.settings = settings;
    if (check_given(o, &p)) return EXIT_USAGE;
    opts.only = o->ngiven ? o->given : NULL;
    opts.nonly = o->ngiven;
    if (!b.quiet) fprintf(stderr, "tuning %s on %s\n", what, info->name);
    int rc = xent_tune(ctx, &p, &opts, &r);
    if (b.tty && !b.quiet) fprintf(stderr, "\n");
    /* a winner the cache refused is still shown: the search's result is not lost with it */
    int unstored = rc == XENT_ECACHE && r.best.status == TRIAL_OK;
    if (rc && !unstored) {
        fprintf(stderr, "%s: %s: %s: %s\n", prog, what, xent_errstr(rc), xent_errmsg(ctx));
        return rc == XENT_ECACHE ? EXIT_CACHE : 1;
    }
    if (j)
        print_json(j, o, &p, info, &r);
    else
        print_table(o, &p, info, &r);
    int ok = r.best.status == TRIAL_OK;
    char why[160];
    no_winner_reason(&r, why, sizeof why);
    xent_tune_result_free(&r);
    if (unstored) {
        fprintf(stderr, "%s: %s: %s: %s\n", prog, what, xent_errstr(rc), xent_errmsg(ctx));
        return EXIT_CACHE;
    }
    if (!ok) fprintf(stderr, "%s: %s: %s\n", prog, what, why);
    return ok ? 0 : 1;
}

static int cmd_tune(const cli *o) {
    xent_context *ctx = NULL;
    xent_device_info info;
    tc_db *db = NULL;
    json j, *list = NULL;
    int rc = open_context(o, &ctx, &info);
    if (!rc) rc = open_db(o, 0, &db);
    if (!rc && o->json) {
        json_start(list = &j, stdout);
        json_array(list, NULL);
    }
    for (int i = 0; !rc && i < o->nshapes; i++) rc = tune_one(o, ctx, &info, db, list, i);
    if (list) json_end(list); /* a failure ends the list early, but it stays a list */
    tc_close(db);
    xent_context_destroy(ctx);
    return rc;
}

/* At exit, whatever the path to it: output that did not reach stdout (a full
 * disk, a closed pipe) makes the run a failure, said on stderr. */
static void close_stdout(void) {
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && !bad) bad = 1, err = errno;
    if (bad) {
        fprintf(stderr, "%s: write error on standard output: %s\n", prog, strerror(err ? err : EIO));
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
    o.arch = 90;
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
