/*
 * tunecache — the SQLite store of tuned kernel configurations.
 *
 * One database file holds the winners (table `tune`, one row per key) and
 * every measured candidate (table `trial`), with the schema version in
 * PRAGMA user_version. Files are opened in WAL mode with a busy timeout so
 * two tuners can write one file at once. Shipped caches are SQL text
 * (tunecache/h200.sql) made by tc_export and read back by tc_import.
 *
 * Internal to xent (not part of include/xent.h); status codes are xent's.
 */
#ifndef XENT_TUNECACHE_H
#define XENT_TUNECACHE_H

#include <stdint.h>
#include <stdio.h>

#define TC_SCHEMA_VERSION 1

typedef struct tc_db tc_db;

/* What a tuned configuration is valid for. Two keys are equal when every
 * field is equal; tc_nearest relaxes n and c only. */
typedef struct tc_key {
    char gpu[32];        /* GPU key, e.g. "h200" */
    int arch;            /* compute capability as 10*major+minor, e.g. 90 */
    int sm_count;        /* multiprocessors, e.g. 132 */
    char family[16];     /* kernel family, e.g. "xent_fwd" */
    int logits;          /* xent_dtype */
    int targets;         /* xent_index */
    int reduction;       /* xent_reduction */
    int options;         /* TC_OPT_* bits */
    int64_t n, c;        /* shape */
    int template_version;/* bumped when a template changes what configs mean */
} tc_key;

enum { TC_OPT_WEIGHTS = 1, TC_OPT_SMOOTHING = 2, TC_OPT_LSE = 4, TC_OPT_STRIDED = 8 };

typedef struct tc_entry {
    char config[160];    /* the configuration as text, "VEC=4 TPR=32 ..." */
    double us;           /* median microseconds per call */
    double gbps;         /* achieved GB/s */
    int64_t when;        /* unix seconds when measured */
    char settings[256];  /* tuner settings, e.g. "budget=30 reps=50 method=..." */
} tc_entry;

/* Where tc_lookup found an entry (numerically equal to xent_source). */
enum { TC_FROM_USER = 0, TC_FROM_SHIPPED = 1, TC_FROM_NEAREST = 2, TC_FROM_NONE = 3 };

/* Open (creating if needed, unless readonly) the file at path; ":memory:" works.
 * Creates the schema in a new file; refuses a file whose user_version is newer
 * than TC_SCHEMA_VERSION, that is not a tune cache, or whose winners' table is
 * damaged (XENT_ECACHE, reason in err), before writing anything to it. A
 * read-only open of a file that this process may not write, or whose folder
 * it may not write, reads it as immutable: no journal files are made. */
int tc_open(const char *path, int readonly, tc_db **db, char *err, size_t errlen);
void tc_close(tc_db *db);
/* The last error message of this handle. */
const char *tc_errmsg(const tc_db *db);

/* Insert or replace the winner for key. */
int tc_put(tc_db *db, const tc_key *key, const tc_entry *e);
/* The exact entry for key; XENT_ENOTFOUND if none. */
int tc_get(tc_db *db, const tc_key *key, tc_entry *e);
/* The entry of the same gpu/arch/sm_count/family/dtypes/reduction/options/
 * template_version whose (log n, log c) is nearest to key's; XENT_ENOTFOUND if none.
 * *n_found and *c_found (may be NULL) receive that entry's shape. */
int tc_nearest(tc_db *db, const tc_key *key, tc_entry *e, int64_t *n_found, int64_t *c_found);
/* Runtime lookup order: exact in user, exact in shipped, nearest in user then
 * shipped (the nearer of the two). Either db may be NULL. Sets *from (TC_FROM_*).
 * XENT_ENOTFOUND (and *from = TC_FROM_NONE) when nothing matches. */
int tc_lookup(tc_db *user, tc_db *shipped, const tc_key *key, tc_entry *e, int *from);

/* Record one measured candidate (status: "ok", "wrong", "compile-error", "pruned", ...). */
int tc_add_trial(tc_db *db, const tc_key *key, const char *config, double us, double gbps,
                 const char *status);

/* Write the winners for gpu (NULL: all GPUs) as SQL text, sorted, one INSERT per line. */
int tc_export(tc_db *db, const char *gpu, FILE *out);
/* Read such SQL text: it runs in a private in-memory store, where only
 * INSERTs into `tune` are allowed, within a work budget for its length (at
 * most 16 MiB); each row must then read back as the runtime reads it (types,
 * ranges, a config that xent_config_parse takes, legal for the row's dtype)
 * before all are copied in one transaction. Any error changes nothing.
 * *rows (may be NULL) gets the count. */
int tc_import(tc_db *db, const char *sql, int *rows);
/* Read a regular file of at most 16 MiB and tc_import it. */
int tc_import_file(tc_db *db, const char *path, int *rows);

/* Call fn for each winner of gpu (NULL: all), ordered by gpu, family, dtypes, n, c. */
typedef int (*tc_visit_fn)(void *arg, const tc_key *key, const tc_entry *e);
int tc_foreach(tc_db *db, const char *gpu, tc_visit_fn fn, void *arg);

/* The user cache path: $XENT_TUNECACHE, else $XDG_CACHE_HOME/xent/tune.db,
 * else $HOME/.cache/xent/tune.db. Creates no directory. */
int tc_user_path(char *buf, size_t len);

#endif
