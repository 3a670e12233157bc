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

#include "xent.h"

/* 2 added the stamps (template_hash, nvrtc) to both tables; a version 1
 * file is migrated when opened for writing and read as unstamped otherwise. */
#define TC_SCHEMA_VERSION 2

typedef struct tc_db tc_db;

/* What a tuned configuration is valid for. An entry's identity is every
 * field but the two stamps; tc_nearest relaxes n and c only.
 *
 * The stamps say what made an entry: the hash of its family's template
 * source and the NVRTC version. They are stored with the entry but are not
 * part of its identity, so a store holds one entry per problem and a new
 * winner replaces a stale one in place. Lookups use only entries whose
 * stamps equal the key's; an unstamped entry (written before stamps
 * existed: hash "" and nvrtc 0) is stale to every key with stamps. */
typedef struct tc_key {
    char gpu[32];           /* GPU key, e.g. "h200" */
    int arch;               /* compute capability as 10*major+minor, e.g. 90 */
    int sm_count;           /* multiprocessors, e.g. 132 */
    char family[16];        /* kernel family, e.g. "xent_fwd" */
    int logits;             /* xent_dtype */
    int targets;            /* xent_index */
    int reduction;          /* xent_reduction */
    int options;            /* TC_OPT_* bits */
    int64_t n, c;           /* shape */
    int template_version;   /* bumped when a template changes what configs mean */
    char template_hash[17]; /* stamp: 16 hex digits of the template's hash, "" unknown */
    int nvrtc;              /* stamp: NVRTC version as major*100+minor, 0 unknown */
} tc_key;

enum {
    TC_OPT_WEIGHTS = 1,
    TC_OPT_SMOOTHING = 2,
    TC_OPT_LSE = 4,
    TC_OPT_STRIDED = 8,
    TC_OPT_ZLOSS = 16,
    TC_OPT_SOFTCAP = 32,
    TC_OPT_SHARD = 64
};

typedef struct tc_entry {
    char config[160];       /* the configuration as text, "VEC=4 TPR=32 ..." */
    double us;              /* median microseconds per call */
    double gbps;            /* achieved GB/s */
    int64_t when;           /* unix seconds when measured */
    char settings[256];     /* tuner settings, e.g. "budget=30 reps=50 method=..." */
    char template_hash[17]; /* the stamps the stored row carries (filled by reads; */
    int nvrtc;              /* tc_put stores the key's) */
} tc_entry;

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
/* The same message without its "tune cache PATH: " head, for a caller that names the cache itself. */
const char *tc_reason(const tc_db *db);

/* Insert or replace the winner for key, stamped with key's stamps. */
int tc_put(tc_db *db, const tc_key *key, const tc_entry *e);
/* The entry with key's identity, stale or not (e's stamps say); XENT_ENOTFOUND if none. */
int tc_get(tc_db *db, const tc_key *key, tc_entry *e);
/* Nonzero when e was made by another template or NVRTC than key says; why
 * (may be NULL) gets the difference. */
int tc_stale(const tc_key *key, const tc_entry *e, char *why, size_t len);
/* The fresh entry of the same gpu/arch/sm_count/family/dtypes/reduction/options/
 * template_version whose (log n, log c) is nearest to key's; XENT_ENOTFOUND if none.
 * *n_found and *c_found (may be NULL) receive that entry's shape. */
int tc_nearest(tc_db *db, const tc_key *key, tc_entry *e, int64_t *n_found, int64_t *c_found);

/* Whether an entry found for a key, the entry of shape n x c, can be used
 * (the runtime parses its config and checks it fits the problem and suits
 * rows of its length); 0 with the reason in why if not. */
typedef int (*tc_accept_fn)(void *arg, const tc_entry *e, int64_t n, int64_t c, char *why, size_t len);

/* The stores of a lookup; any may be NULL. */
typedef struct tc_stores {
    tc_db *user;                          /* the user's cache */
    tc_db *shipped;                       /* the cache shipped for this GPU */
    tc_db *arch;                          /* the shipped cache of the nearest GPU of this architecture */
    const char *shipped_name, *arch_name; /* their GPU keys, for answers and notes */
    tc_accept_fn accept;                  /* NULL: every fresh entry is usable */
    void *arg;
    int kinds; /* which other kinds may answer at levels 3 and 4 of tc_lookup: 0 none,
                  TC_KINDS_DTYPE or TC_KINDS_ALL */
} tc_stores;

#define TC_KINDS_DTYPE 1 /* entries of the other 16-bit dtype */
#define TC_KINDS_ALL 3   /* and of another targets type, reduction or options */

typedef struct tc_answer {
    tc_entry entry;
    xent_source from;                /* the level that answered: XENT_SOURCE_USER_DB, _SHIPPED,
                                        _NEAREST or _ARCH; XENT_SOURCE_HEURISTIC when none did */
    char cache[32];                  /* the store that answered: "user" or a shipped cache's GPU key */
    int64_t n, c;                    /* the answering entry's shape */
    int targets, reduction, options; /* and its problem kind */
    char note[768];                  /* each entry passed over on the way, and why */
} tc_answer;

/* The runtime lookup chain, each level tried only when the ones above gave
 * nothing usable, and every entry passed over noted in a->note:
 *   1. the exact entry in user, 2. the exact entry in shipped,
 *   3. the nearest entry in user or shipped (user's on a tie): by shape
 *      distance in (log n, log c) plus, with s->kinds, the distance of
 *      another targets type, reduction, options or 16-bit dtype (key_dist in
 *      lookup.c: targets and lse nearest, then sum for mean, strides and
 *      weights, none for a sum, smoothing farthest), so an exact shape of a
 *      near kind can answer before the own kind's shape twice as far; a note
 *      names an entry of another kind that answered,
 *   4. in arch, the entry of the same architecture, any GPU and SM count,
 *      nearest as in 3 (an exact one first), then the nearest SM count.
 * Entries of another kind answer only when accepted for the query's problem
 * (the runtime checks that the config fits it: a TILE config of
 * contiguous rows is refused for rows too far apart to stage).
 * An entry is passed over when stale (tc_stale) or not accepted. XENT_OK with
 * a filled; XENT_ENOTFOUND (a->from = XENT_SOURCE_HEURISTIC) when no level answered;
 * a store's error (XENT_ECACHE) when nothing answered and a store failed. */
int tc_lookup(const tc_stores *s, const tc_key *key, tc_answer *a);

/* Append "; " and the formatted text to a's note (what fits of it). */
void tc_note_add(tc_answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "i64 mean weights lse": the problem kind of a key, for notes. */
void tc_kind_text(const tc_key *k, char *buf, size_t len);

/* Record one measured candidate (status: "ok", "wrong", "compile-error", "pruned", ...). */
int tc_add_trial(tc_db *db, const tc_key *key, const char *config, double us, double gbps, const char *status);

/* Write the winners for gpu (NULL: all GPUs) as SQL text, sorted, one INSERT per line. */
int tc_export(tc_db *db, const char *gpu, FILE *out);
/* The template hash of a kernel family as 16 hex digits (xent_template_hash). */
typedef int (*tc_hash_fn)(const char *family, char *buf, size_t len);
/* Stamp every unstamped winner with hash(its family) and nvrtc, in one
 * transaction; families hash does not know stay unstamped. *rows (may be
 * NULL) gets the count. Only for a cache known to have been tuned with
 * those templates and that NVRTC (docs/cache.md: restamping a cache). */
int tc_stamp(tc_db *db, tc_hash_fn hash, int nvrtc, int *rows);

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

/* The user cache path: $XENT_TUNECACHE, else tune.db in xent_cache_home
 * ($XDG_CACHE_HOME/xent when absolute, else ~/.cache/xent). Creates no directory. */
int tc_user_path(char *buf, size_t len);

#endif
