/*
 * xent-tune-cache.c — xent-tune show, export and import: the tune cache as a user sees it.
 */
#include <errno.h>
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
        fprintf(stderr, "%s: the --db path is too long (%zu bytes, at most %zu)\n", PROG, strlen(o->db_path), len - 1);
        return EXIT_CACHE;
    }
    if (tc_user_path(path, len) == XENT_OK) return 0;
    const char *from = user_path_source();
    if (from)
        fprintf(stderr, "%s: the tune cache path made from $%s is too long (at most %zu bytes); pass --db\n", PROG,
                from, len - 1);
    else
        fprintf(stderr, "%s: no tune cache path: set XENT_TUNECACHE or HOME, or pass --db\n", PROG);
    return EXIT_CACHE;
}

int open_db(const cli *o, int readonly, tc_db **db) {
    char path[4096], err[1024];
    int rc = cache_path(o, path, sizeof path);
    if (rc) return rc;
    if (!readonly) xent_mkdirs(path, 0);
    if (tc_open(path, readonly, db, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return EXIT_CACHE;
    }
    return 0;
}

const char *dtype_name(int d) { return d == XENT_F32 ? "f32" : d == XENT_F16 ? "f16" : "bf16"; }
const char *red_name(int r) { return r == XENT_REDUCE_NONE ? "none" : r == XENT_REDUCE_SUM ? "sum" : "mean"; }
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
void json_problem(json *j, const char *key, const xent_problem *p) {
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
    const char *gpu = named_gpu(o);
    rc = tc_foreach(db, gpu, show_row, s);
    if (rc) fprintf(stderr, "%s: %s\n", PROG, tc_errmsg(db));
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}

/* --json: {"db": path, "entries": [...]}, closed even when reading failed. */
int cmd_show(const cli *o) {
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

int cmd_export(const cli *o) {
    tc_db *db;
    int rc = open_db(o, 1, &db);
    if (rc) return rc;
    out_file out = {stdout, ""};
    if (o->output && open_output(o->output, &out)) {
        fprintf(stderr, "%s: cannot write '%s': %s\n", PROG, o->output, strerror(errno));
        tc_close(db);
        return EXIT_CACHE;
    }
    rc = tc_export(db, o->gpu, out.f);
    if (rc) fprintf(stderr, "%s: %s%s\n", PROG, tc_errmsg(db), o->output ? " (the output file is unchanged)" : "");
    if (o->output && close_output(&out, o->output, !rc) && !rc) {
        fprintf(stderr, "%s: cannot write '%s': %s\n", PROG, o->output, strerror(errno));
        rc = XENT_ECACHE;
    }
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}

int cmd_import(const cli *o) {
    tc_db *db;
    int rc = open_db(o, 0, &db), rows = 0;
    if (rc) return rc;
    rc = tc_import_file(db, o->import_path, &rows);
    if (rc)
        fprintf(stderr, "%s: %s (nothing was imported)\n", PROG, tc_errmsg(db));
    else
        printf("imported %d entr%s from %s\n", rows, rows == 1 ? "y" : "ies", o->import_path);
    if (!rc && o->stamp && (rc = tc_stamp(db, xent_template_hash, xent_nvrtc_version(), &rows)))
        fprintf(stderr, "%s: %s\n", PROG, tc_errmsg(db));
    else if (!rc && o->stamp)
        printf("stamped %d entr%s\n", rows, rows == 1 ? "y" : "ies");
    tc_close(db);
    return rc ? EXIT_CACHE : 0;
}
