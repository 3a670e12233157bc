/* xent-tune-cli.h — what the parts of xent-tune share: the parsed command
 * line and the commands each part runs (xent-tune.c parses and dispatches;
 * xent-tune-cache.c: show, export, import; xent-tune-offline.c: the problems,
 * --dry-run, --compile-only; xent-tune-search.c: the tune). */
#ifndef XENT_TOOLS_XENT_TUNE_CLI_H
#define XENT_TOOLS_XENT_TUNE_CLI_H

#include <stdint.h>
#include <string.h>

#include "gen/gen.h"
#include "tools/json.h"
#include "tunecache/tunecache.h"

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
    int store_given;    /* --store-config: the fastest --config is stored as the winner */
    int64_t row_stride; /* --row-stride: elements between row starts (0: c, contiguous rows) */
} cli;

#define PROG "xent-tune"

/* The GPU --gpu names, NULL for "auto" (the device as it is). */
static inline const char *named_gpu(const cli *o) { return strcmp(o->gpu, "auto") ? o->gpu : NULL; }

/* xent-tune-cache.c */
int cmd_show(const cli *o);
int cmd_export(const cli *o);
int cmd_import(const cli *o);
/* The tune cache of --db, $XENT_TUNECACHE or the default path; EXIT_CACHE, said on stderr, if not. */
int open_db(const cli *o, int readonly, tc_db **db);
const char *dtype_name(int d);
const char *red_name(int r);
/* p as a JSON object under key: its shape, dtypes, reduction and options. */
void json_problem(json *j, const char *key, const xent_problem *p);

/* xent-tune-offline.c */
int check_problems(const cli *o);
int cmd_dry_run(const cli *o);
int cmd_compile_only(const cli *o);
/* The i-th problem of the command line: its shape on the options' base. */
void problem_for(const cli *o, int i, xent_problem *p);
/* p in one line of text, e.g. "32768x4096 f32 i64 mean weights". */
void describe_problem(const xent_problem *p, char *buf, size_t len);
/* 0 when every --config runs p, else EXIT_USAGE, said on stderr. */
int check_given(const cli *o, const xent_problem *p);
/* Progress of a stage on stderr (arg: a bar): a bar on a terminal, else lines. */
typedef struct bar {
    int tty, quiet, last;
} bar;
void progress(void *arg, int done, int total, double best_us, const char *stage);

/* xent-tune-search.c */
int cmd_tune(const cli *o);

#endif
