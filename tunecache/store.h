/*
 * store.h — what the tune cache's sources share (tunecache.c opens, writes,
 * exports and stamps; lookup.c answers the runtime's chain; import.c loads
 * a shipped cache's text): the handle, the columns and the helpers. Not
 * installed; the library exports none of it.
 */
#ifndef XENT_TUNECACHE_STORE_H
#define XENT_TUNECACHE_STORE_H

#include "tunecache.h"

#include <sqlite3.h>

struct tc_db {
    sqlite3 *sql;
    char *path;
    char err[512]; /* "tune cache PATH: " and the reason: PATH cut at 256 bytes, so the head fits */
    size_t reason_at; /* where err's reason starts, past "tune cache PATH: " */
};

#define KEY_COLS                                                                                                       \
    "gpu, arch, sm_count, family, logits, targets, reduction, options, "                                               \
    "n, c, template_version"
#define STAMP_COLS "template_hash, nvrtc"
#define VAL_COLS "config, us, gbps, measured_at, settings"
/* A whole row, as tc_foreach and the candidates of a lookup read it. */
#define ROW_COLS KEY_COLS ", " STAMP_COLS ", " VAL_COLS
#define NKEY 11
#define NSTAMP 2
/* The config's column in ROW_COLS; us, gbps, measured_at, settings follow. */
#define CFG_COL (NKEY + NSTAMP)

/* Parameters ?1..?11 follow KEY_COLS; nearest leaves ?9 (n) and ?10 (c) unused.
 * A NULL gpu (?1) or sm_count (?3) matches any: the architecture level of a
 * lookup relaxes both. A NULL targets (?6), reduction (?7) or options (?8)
 * matches any too: the relaxed-key levels (key_dist) take them all, and with
 * ?12 set they also take the other 16-bit logits dtype (0 is XENT_F32; f16
 * and bf16 rows are the same bytes, widened by another instruction). */
#define WHERE_FAMILY                                                                                                   \
    "(?1 IS NULL OR gpu = ?1) AND arch = ?2 AND "                                                                      \
    "(?3 IS NULL OR sm_count = ?3) AND family = ?4 AND "                                                               \
    "(logits = ?5 OR (?12 IS NOT NULL AND logits <> 0 AND ?5 <> 0)) AND "                                              \
    "(?6 IS NULL OR targets = ?6) AND (?7 IS NULL OR reduction = ?7) AND "                                             \
    "(?8 IS NULL OR options = ?8) AND template_version = ?11"
#define WHERE_EXACT WHERE_FAMILY " AND n = ?9 AND c = ?10"
#define ORDER_KEY                                                                                                      \
    " ORDER BY gpu, family, logits, targets, n, c, arch, sm_count, "                                                   \
    "reduction, options, template_version"

#define KEY_DECL                                                                                                       \
    "gpu TEXT NOT NULL, arch INTEGER NOT NULL, sm_count INTEGER NOT NULL, "                                            \
    "family TEXT NOT NULL, logits INTEGER NOT NULL, targets INTEGER NOT NULL, "                                        \
    "reduction INTEGER NOT NULL, options INTEGER NOT NULL, n INTEGER NOT NULL, "                                       \
    "c INTEGER NOT NULL, template_version INTEGER NOT NULL"
/* The defaults are what an insert written before the stamps existed (an
 * older export) gets: unstamped, so stale to every lookup, yet imported. */
#define TEMPLATE_HASH_DECL "template_hash TEXT NOT NULL DEFAULT ''"
#define NVRTC_DECL "nvrtc INTEGER NOT NULL DEFAULT 0"
#define STAMP_DECL TEMPLATE_HASH_DECL ", " NVRTC_DECL

/* CREATE TABLE of a new file (and of import's staging store). */
extern const char tc_schema_sql[];

/* Sets db's message ("tune cache PATH: ...") and returns rc. */
int tc_fail(tc_db *db, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* tc_fail with SQLite's message, as XENT_ECACHE. */
int tc_sqlfail(tc_db *db, const char *what);
int tc_prepare(tc_db *db, const char *sql, sqlite3_stmt **st);
int tc_exec(tc_db *db, const char *sql, const char *what);
/* Whether key's strings are NUL-terminated within their arrays. */
int tc_key_terminated(const tc_key *k);
/* XENT_OK when key is given and tc_key_terminated; else XENT_EINVAL, said in db. */
int tc_key_ok(tc_db *db, const tc_key *k);
/* Binds key's fields to ?1..?11 in KEY_COLS order. */
void tc_bind_key(sqlite3_stmt *st, const tc_key *k);
/* A row selected as ROW_COLS into k and e. */
int tc_read_row(tc_db *db, sqlite3_stmt *st, tc_key *k, tc_entry *e);

#endif
