/*
 * tunecache.c — the SQLite store of tuned kernel configurations (see tunecache.h).
 *
 * Every call prepares its statements afresh: lookups are memoized by the
 * runtime and the tuner writes a few rows per second, so a statement cache
 * would buy nothing and would make tc_foreach callbacks re-entrancy hazards.
 */
#include "tunecache.h"

#include "common/files.h"
#include "gen/gen.h"
#include "gen/space.h"
#include "xent.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)

struct tc_db {
    sqlite3 *sql;
    char *path;
    char err[512];
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

/* How long a writer waits for another process's lock before giving up. */
#define TC_BUSY_MS 10000

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

static const char SCHEMA_SQL[] = "CREATE TABLE tune(" KEY_DECL ", " STAMP_DECL ", "
                                 "config TEXT NOT NULL, us REAL NOT NULL, gbps REAL NOT NULL, "
                                 "measured_at INTEGER NOT NULL, settings TEXT NOT NULL DEFAULT '', "
                                 "PRIMARY KEY(" KEY_COLS "));"
                                 /* us/gbps may be NULL: a candidate that failed to compile was never timed. */
                                 "CREATE TABLE trial(id INTEGER PRIMARY KEY, " KEY_DECL ", " STAMP_DECL ", "
                                 "config TEXT NOT NULL, us REAL, gbps REAL, status TEXT NOT NULL, "
                                 "measured_at INTEGER NOT NULL);"
                                 "CREATE INDEX trial_by_key ON trial(gpu, family, n, c);"
                                 "PRAGMA user_version = " TC_STR(TC_SCHEMA_VERSION) ";";

/* Selecting every column we use proves a file's tables are ours, not just named so. */
static const char PROBE_TUNE[] = "SELECT " ROW_COLS " FROM tune LIMIT 0";
static const char PROBE_TRIAL[] =
    "SELECT id, " KEY_COLS ", " STAMP_COLS ", config, us, gbps, status, measured_at FROM trial LIMIT 0";

/* A version 1 file's tables, before they are migrated or viewed. */
static const char PROBE_TUNE_1[] = "SELECT " KEY_COLS ", " VAL_COLS " FROM main.tune LIMIT 0";
static const char PROBE_TRIAL_1[] =
    "SELECT id, " KEY_COLS ", config, us, gbps, status, measured_at FROM main.trial LIMIT 0";

/* Version 1 to 2: the stamps. Existing rows become unstamped, which is
 * the truth: what made them is not known. */
static const char MIGRATE_1_SQL[] = "ALTER TABLE tune ADD COLUMN " TEMPLATE_HASH_DECL ";"
                                    "ALTER TABLE tune ADD COLUMN " NVRTC_DECL ";"
                                    "ALTER TABLE trial ADD COLUMN " TEMPLATE_HASH_DECL ";"
                                    "ALTER TABLE trial ADD COLUMN " NVRTC_DECL ";"
                                    "PRAGMA user_version = 2;";

/* A version 1 file opened read-only cannot be migrated (the runtime opens
 * the user's cache so): temporary views of the same names, searched before
 * the file's tables, show its rows as unstamped. */
static const char VIEW_1_SQL[] = "CREATE TEMP VIEW tune AS SELECT *, '' AS template_hash, 0 AS nvrtc FROM main.tune;"
                                 "CREATE TEMP VIEW trial AS SELECT *, '' AS template_hash, 0 AS nvrtc FROM main.trial;";

/* ---- errors ---------------------------------------------------------- */

static int fail(tc_db *db, int rc, const char *fmt, ...) {
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(db->err, sizeof db->err, "tune cache %s: %s", db->path, why);
    return rc;
}

static int sqlfail(tc_db *db, const char *what) {
    return fail(db, XENT_ECACHE, "%s: %s", what, sqlite3_errmsg(db->sql));
}

const char *tc_errmsg(const tc_db *db) { return db ? db->err : "tune cache: no handle"; }

/* ---- small SQL helpers ----------------------------------------------- */

static int prepare(tc_db *db, const char *sql, sqlite3_stmt **st) {
    if (sqlite3_prepare_v2(db->sql, sql, -1, st, NULL) != SQLITE_OK) return sqlfail(db, "prepare");
    return XENT_OK;
}

static int exec(tc_db *db, const char *sql, const char *what) {
    if (sqlite3_exec(db->sql, sql, NULL, NULL, NULL) != SQLITE_OK) return sqlfail(db, what);
    return XENT_OK;
}

static int step_done(tc_db *db, sqlite3_stmt *st, const char *what) {
    int rc = sqlite3_step(st) == SQLITE_DONE ? XENT_OK : sqlfail(db, what);
    sqlite3_finalize(st);
    return rc;
}

/* ---- opening ----------------------------------------------------------- */

/* One statement, so one snapshot: read apart, a creator committing in
 * between would show us tables without their user_version. This first read
 * is where a damaged file shows, so its error is SQLite's reason alone
 * ("file is not a database", "database disk image is malformed"). */
static int inspect(tc_db *db, int64_t *version, int64_t *ntables) {
    sqlite3_stmt *st = NULL;
    int rc = XENT_OK;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT (SELECT user_version FROM pragma_user_version),"
                           " (SELECT count(*) FROM sqlite_master WHERE type = 'table')",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        *version = sqlite3_column_int64(st, 0);
        *ntables = sqlite3_column_int64(st, 1);
    } else {
        rc = fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
    }
    sqlite3_finalize(st);
    return rc;
}

static int check_tables(tc_db *db, int version);

/* The check is repeated under the write lock because another process may
 * have created (or migrated) the schema between our first look and BEGIN
 * IMMEDIATE. */
static int create_schema(tc_db *db) {
    int64_t version = 0, ntables = 0;
    int rc = exec(db, "BEGIN IMMEDIATE", "begin");
    if (rc != XENT_OK) return rc;
    rc = inspect(db, &version, &ntables);
    if (rc == XENT_OK && version == 0 && ntables == 0)
        rc = exec(db, SCHEMA_SQL, "create schema");
    else if (rc == XENT_OK && version == 1 && (rc = check_tables(db, 1)) == XENT_OK)
        rc = exec(db, MIGRATE_1_SQL, "migrate from schema 1");
    if (rc == XENT_OK) return exec(db, "COMMIT", "commit");
    sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* WAL lets readers and one writer proceed together; synchronous=NORMAL in WAL
 * cannot corrupt the file, it only risks the last commits on power loss,
 * which for a cache of re-measurable numbers is the right trade. */
static int use_wal(tc_db *db) {
    /* Entering WAL needs an exclusive lock that SQLite does not wait for
     * through the busy handler, so two processes opening a new file at once
     * would fail here: wait by hand, as long as the busy timeout. */
    for (int waited = 0;; waited += 5) {
        int rc = sqlite3_exec(db->sql, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
        if (rc == SQLITE_OK) break;
        if ((rc & 0xff) != SQLITE_BUSY || waited >= TC_BUSY_MS) return sqlfail(db, "set WAL mode");
        sqlite3_sleep(5);
    }
    return exec(db, "PRAGMA synchronous = NORMAL", "set synchronous");
}

static int check_tables(tc_db *db, int version) {
    sqlite3_stmt *st;
    const char *probes[] = {version == 1 ? PROBE_TUNE_1 : PROBE_TUNE, version == 1 ? PROBE_TRIAL_1 : PROBE_TRIAL};
    for (size_t i = 0; i < 2; i++) {
        if (sqlite3_prepare_v2(db->sql, probes[i], -1, &st, NULL) != SQLITE_OK)
            return fail(db, XENT_ECACHE, "not a tune cache (%s)", sqlite3_errmsg(db->sql));
        sqlite3_finalize(st);
    }
    return XENT_OK;
}

/* The first read (inspect) sees only the first page and the schema, so a
 * file damaged further in would open and then fail every lookup, which the
 * runtime takes for misses. Checking the winners' table and its index here
 * (a few ms for thousands of rows; the trials are never read back) turns
 * that into a refusal with the reason, which the runtime reports. */
static int check_winners(tc_db *db) {
    sqlite3_stmt *st = NULL;
    int rc = XENT_OK, s;
    if (sqlite3_prepare_v2(db->sql, "PRAGMA quick_check(tune)", -1, &st, NULL) != SQLITE_OK)
        return fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
    if ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *what = (const char *)sqlite3_column_text(st, 0);
        if (!what || strcmp(what, "ok")) {
            rc = fail(db, XENT_ECACHE, "database disk image is malformed (%.200s)", what ? what : "?");
            for (char *nl = db->err; (nl = strchr(nl, '\n'));) /* one line, for logs and notes */
                *nl = ' ';
        }
    } else {
        rc = fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
    }
    sqlite3_finalize(st);
    return rc;
}

/* Nothing is written (not even the switch to WAL) until the file is known to
 * be a tune cache or an empty file of ours to create. */
static int setup(tc_db *db, int readonly) {
    int64_t version = 0, ntables = 0;
    sqlite3_busy_timeout(db->sql, TC_BUSY_MS);
    int rc = inspect(db, &version, &ntables);
    if (rc != XENT_OK) return rc;
    if (version > TC_SCHEMA_VERSION)
        return fail(db, XENT_ECACHE, "schema version %lld is newer than this library's %d", (long long)version,
                    TC_SCHEMA_VERSION);
    if (version == 0 && ntables > 0) return fail(db, XENT_ECACHE, "not a tune cache (user_version 0 and other tables)");
    if (version == 0 && readonly) return fail(db, XENT_ECACHE, "empty, and opened read-only");
    if (version > 0 && ((rc = check_tables(db, (int)version)) != XENT_OK || (rc = check_winners(db)) != XENT_OK))
        return rc;
    if (!readonly && (rc = use_wal(db)) != XENT_OK) return rc;
    if ((version == 0 || (version == 1 && !readonly)) && (rc = create_schema(db)) != XENT_OK) return rc;
    if (version == 1 && readonly &&
        ((rc = check_tables(db, 1)) != XENT_OK || (rc = exec(db, VIEW_1_SQL, "read schema 1")) != XENT_OK))
        return rc;
    return check_tables(db, TC_SCHEMA_VERSION);
}

/* Whether this process may write the file and create files beside it. */
static int writable_here(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else
        return 0;
    return access(path, W_OK) == 0 && access(dir, W_OK) == 0;
}

static int journal_exists(const char *path) {
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    return access(wal, F_OK) == 0;
}

/* A path as a file: URI, every byte outside the unreserved set escaped. */
static char *file_uri(const char *path, const char *query) {
    size_t len = strlen(path);
    char *uri = malloc(5 + 3 * len + strlen(query) + 1), *o = uri;
    if (!uri) return NULL;
    o += sprintf(o, "file:");
    for (const unsigned char *c = (const unsigned char *)path; *c; c++)
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || strchr("/-._~", *c))
            *o++ = (char)*c;
        else
            o += sprintf(o, "%%%02X", *c);
    strcpy(o, query);
    return uri;
}

/* A WAL file read by a connection that may not write it or its directory
 * either fails (no -shm can be made: "attempt to write a readonly database")
 * or leaves -wal and -shm behind that only a writer removes. Such a reader
 * opens the file as immutable: no journal, no locks, the bytes as they are.
 * A -wal left by a writer holds commits not yet in the file, so then the
 * ordinary read-only open, which reads it, is the one to try. */
static int open_sql(tc_db *db, const char *path, int readonly) {
    int flags = SQLITE_OPEN_FULLMUTEX;
    if (!readonly) return sqlite3_open_v2(path, &db->sql, flags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    flags |= SQLITE_OPEN_READONLY;
    if (!strcmp(path, ":memory:") || writable_here(path) || journal_exists(path) || access(path, R_OK) != 0)
        return sqlite3_open_v2(path, &db->sql, flags, NULL);
    char *uri = file_uri(path, "?immutable=1");
    if (!uri) return SQLITE_NOMEM;
    int rc = sqlite3_open_v2(uri, &db->sql, flags | SQLITE_OPEN_URI, NULL);
    free(uri);
    return rc;
}

static void copy_err(char *err, size_t errlen, const char *msg) {
    if (err && errlen) snprintf(err, errlen, "%s", msg);
}

int tc_open(const char *path, int readonly, tc_db **out, char *err, size_t errlen) {
    copy_err(err, errlen, "");
    if (!out || !path || !*path) {
        copy_err(err, errlen, "tune cache: no path or no handle pointer");
        return XENT_EINVAL;
    }
    *out = NULL;
    tc_db *db = calloc(1, sizeof *db);
    if (!db || !(db->path = strdup(path))) {
        free(db);
        copy_err(err, errlen, "tune cache: out of memory");
        return XENT_ENOMEM;
    }
    int rc = open_sql(db, path, readonly) == SQLITE_OK ? setup(db, readonly) : sqlfail(db, "cannot open");
    if (rc != XENT_OK) {
        copy_err(err, errlen, db->err);
        tc_close(db);
        return rc;
    }
    *out = db;
    return XENT_OK;
}

void tc_close(tc_db *db) {
    if (!db) return;
    sqlite3_close_v2(db->sql);
    free(db->path);
    free(db);
}

/* ---- keys and entries ------------------------------------------------ */

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

static int key_ok(tc_db *db, const tc_key *k) {
    if (!k) return fail(db, XENT_EINVAL, "no key");
    if (!terminated(k->gpu, sizeof k->gpu) || !terminated(k->family, sizeof k->family) ||
        !terminated(k->template_hash, sizeof k->template_hash))
        return fail(db, XENT_EINVAL, "key gpu, family or template hash is not NUL-terminated");
    return XENT_OK;
}

static void bind_key(sqlite3_stmt *st, const tc_key *k) {
    sqlite3_bind_text(st, 1, k->gpu, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, k->arch);
    sqlite3_bind_int(st, 3, k->sm_count);
    sqlite3_bind_text(st, 4, k->family, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, k->logits);
    sqlite3_bind_int(st, 6, k->targets);
    sqlite3_bind_int(st, 7, k->reduction);
    sqlite3_bind_int(st, 8, k->options);
    sqlite3_bind_int64(st, 9, k->n);
    sqlite3_bind_int64(st, 10, k->c);
    sqlite3_bind_int(st, 11, k->template_version);
}

/* Truncating a config would silently change what kernel runs, so refuse. */
static int column_text(tc_db *db, sqlite3_stmt *st, int col, char *dst, size_t cap) {
    const unsigned char *s = sqlite3_column_text(st, col);
    size_t len = s ? (size_t)sqlite3_column_bytes(st, col) : 0;
    if (len >= cap)
        return fail(db, XENT_ECACHE, "stored %s is %zu bytes, more than %zu", sqlite3_column_name(st, col), len,
                    cap - 1);
    memcpy(dst, s ? (const char *)s : "", len);
    dst[len] = '\0';
    return XENT_OK;
}

/* Reads VAL_COLS starting at column col. */
static int read_entry(tc_db *db, sqlite3_stmt *st, int col, tc_entry *e) {
    int rc = column_text(db, st, col, e->config, sizeof e->config);
    if (rc == XENT_OK) rc = column_text(db, st, col + 4, e->settings, sizeof e->settings);
    e->us = sqlite3_column_double(st, col + 1);
    e->gbps = sqlite3_column_double(st, col + 2);
    e->when = sqlite3_column_int64(st, col + 3);
    return rc;
}

/* Reads STAMP_COLS starting at column col into the entry. */
static int read_stamps(tc_db *db, sqlite3_stmt *st, int col, tc_entry *e) {
    e->nvrtc = sqlite3_column_int(st, col + 1);
    return column_text(db, st, col, e->template_hash, sizeof e->template_hash);
}

/* Reads ROW_COLS: the key (with the row's stamps) and the entry. */
static int read_row(tc_db *db, sqlite3_stmt *st, tc_key *k, tc_entry *e);

static int read_key(tc_db *db, sqlite3_stmt *st, tc_key *k) {
    memset(k, 0, sizeof *k);
    int rc = column_text(db, st, 0, k->gpu, sizeof k->gpu);
    if (rc == XENT_OK) rc = column_text(db, st, 3, k->family, sizeof k->family);
    k->arch = sqlite3_column_int(st, 1);
    k->sm_count = sqlite3_column_int(st, 2);
    k->logits = sqlite3_column_int(st, 4);
    k->targets = sqlite3_column_int(st, 5);
    k->reduction = sqlite3_column_int(st, 6);
    k->options = sqlite3_column_int(st, 7);
    k->n = sqlite3_column_int64(st, 8);
    k->c = sqlite3_column_int64(st, 9);
    k->template_version = sqlite3_column_int(st, 10);
    return rc;
}

static int read_row(tc_db *db, sqlite3_stmt *st, tc_key *k, tc_entry *e) {
    int rc = read_key(db, st, k);
    if (rc == XENT_OK) rc = read_stamps(db, st, NKEY, e);
    if (rc == XENT_OK) rc = read_entry(db, st, NKEY + NSTAMP, e);
    memcpy(k->template_hash, e->template_hash, sizeof k->template_hash);
    k->nvrtc = e->nvrtc;
    return rc;
}

/* ---- winners ------------------------------------------------------------ */

int tc_put(tc_db *db, const tc_key *key, const tc_entry *e) {
    if (!db) return XENT_EINVAL;
    int rc = key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e || !terminated(e->config, sizeof e->config) || !terminated(e->settings, sizeof e->settings))
        return fail(db, XENT_EINVAL, "no entry, or its text is not NUL-terminated");
    /* SQLite stores NaN as NULL and exports inf as unparsable text. */
    if (!isfinite(e->us) || !isfinite(e->gbps)) return fail(db, XENT_EINVAL, "entry us or gbps is not finite");
    sqlite3_stmt *st;
    if ((rc = prepare(db,
                      "INSERT OR REPLACE INTO tune(" ROW_COLS ") VALUES(?1, ?2, ?3, ?4, ?5,"
                      " ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                      &st)) != XENT_OK)
        return rc;
    bind_key(st, key);
    sqlite3_bind_text(st, 12, key->template_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 13, key->nvrtc);
    sqlite3_bind_text(st, 14, e->config, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 15, e->us);
    sqlite3_bind_double(st, 16, e->gbps);
    sqlite3_bind_int64(st, 17, e->when);
    sqlite3_bind_text(st, 18, e->settings, -1, SQLITE_STATIC);
    return step_done(db, st, "put");
}

int tc_get(tc_db *db, const tc_key *key, tc_entry *e) {
    if (!db) return XENT_EINVAL;
    int rc = key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e) return fail(db, XENT_EINVAL, "no entry to fill");
    sqlite3_stmt *st;
    if ((rc = prepare(db, "SELECT " STAMP_COLS ", " VAL_COLS " FROM tune WHERE " WHERE_EXACT, &st)) != XENT_OK)
        return rc;
    bind_key(st, key);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && (rc = read_stamps(db, st, 0, e)) == XENT_OK)
        rc = read_entry(db, st, NSTAMP, e);
    else if (s == SQLITE_DONE)
        rc = fail(db, XENT_ENOTFOUND, "no entry for %s %s %lldx%lld", key->gpu, key->family, (long long)key->n,
                  (long long)key->c);
    else
        rc = sqlfail(db, "get");
    sqlite3_finalize(st);
    return rc;
}

int tc_stale(const tc_key *key, const tc_entry *e, char *why, size_t len) {
    int stale = strcmp(key->template_hash, e->template_hash) != 0 || key->nvrtc != e->nvrtc;
    if (stale && why && len)
        snprintf(why, len, "stale: made by template %s NVRTC %d, this is template %s NVRTC %d",
                 e->template_hash[0] ? e->template_hash : "unknown", e->nvrtc,
                 key->template_hash[0] ? key->template_hash : "unknown", key->nvrtc);
    return stale;
}

/* Ratios rather than differences of logs: an exact ratio tie (2000 vs 1000
 * and 4000) then gives bit-equal distances, so the tie rule decides. */
static double shape_dist(const tc_key *k, int64_t n, int64_t c) {
    double dn = log((double)k->n / (double)n), dc = log((double)k->c / (double)c);
    return dn * dn + dc * dc;
}

void tc_kind_text(const tc_key *k, char *buf, size_t len) {
    static const char *reductions[] = {"none", "sum", "mean"};
    static const struct {
        int bit;
        const char *name;
    } opts[] = {
        {TC_OPT_WEIGHTS, "weights"}, {TC_OPT_SMOOTHING, "smoothing"}, {TC_OPT_LSE, "lse"},
        {TC_OPT_STRIDED, "strided"}, {TC_OPT_ZLOSS, "zloss"},         {TC_OPT_SOFTCAP, "softcap"},
        {TC_OPT_SHARD, "shard"},
    };
    static const char *dtypes[] = {"f32", "f16", "bf16"};
    size_t used = (size_t)snprintf(buf, len, "%s %s %s", (unsigned)k->logits <= 2 ? dtypes[k->logits] : "?",
                                   k->targets == XENT_I64 ? "i64" : "i32",
                                   k->reduction >= 0 && k->reduction <= 2 ? reductions[k->reduction] : "?");
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if ((k->options & opts[i].bit) && used < len)
            used += (size_t)snprintf(buf + used, len - used, " %s", opts[i].name);
}

/* How far an entry's problem kind is from the query's, 0 when the same:
 * the cost of each difference in what a kernel does beside reading the
 * rows. The other 16-bit dtype widens each element by another instruction,
 * the same bytes read; a target's width is one load a row, the lse one store a row; sum
 * and mean differ only in the last block's division; strided rows change
 * their alignment and class weights add a load a row; none stores a loss a
 * row instead of summing in every block; smoothing adds side sums to every
 * chunk, registers included. The costs of the differences add up. */
static int key_dist(const tc_key *q, const tc_key *k) {
    int d = 0, diff = q->options ^ k->options;
    if (q->logits != k->logits) d += 1;
    if (q->targets != k->targets) d += 1;
    if (diff & TC_OPT_LSE) d += 1;
    if (q->reduction != k->reduction) d += q->reduction == XENT_REDUCE_NONE || k->reduction == XENT_REDUCE_NONE ? 8 : 2;
    if (diff & TC_OPT_STRIDED) d += 4;
    if (diff & TC_OPT_WEIGHTS) d += 4;
    if (diff & TC_OPT_SMOOTHING) d += 16;
    /* the training options change the kernel family, never relaxed; counted for completeness */
    if (diff & (TC_OPT_ZLOSS | TC_OPT_SOFTCAP | TC_OPT_SHARD)) d += 64;
    return d;
}

/* ---- lookup ------------------------------------------------------------- */

/* A row a lookup may answer with. */
typedef struct cand {
    tc_key k; /* the row's key, with its stamps */
    tc_entry e;
    int kd;    /* key_dist to the query (0: the same problem kind) */
    double d;  /* shape distance to the query (0: exact) */
    int store; /* which store of the level: on a tie the first wins */
    int dsm;   /* |SM count - the query's| */
} cand;

typedef struct cands {
    cand *v;
    size_t n, cap;
} cands;

static int push(tc_db *db, cands *cs, const cand *c) {
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 16;
        cand *v = realloc(cs->v, cap * sizeof *v);
        if (!v) return fail(db, XENT_ENOMEM, "lookup: out of memory");
        cs->v = v, cs->cap = cap;
    }
    cs->v[cs->n++] = *c;
    return XENT_OK;
}

/* The rows of db with key's identity but for the shape (exact: and its
 * shape too); relaxed: of any GPU and SM count as well; any_kind: of any
 * targets, reduction and options as well. */
static int collect(tc_db *db, const tc_key *key, int exact, int relaxed, int any_kind, int store, cands *cs) {
    sqlite3_stmt *st;
    int rc = prepare(db,
                     exact ? "SELECT " ROW_COLS " FROM tune WHERE " WHERE_EXACT
                           : "SELECT " ROW_COLS " FROM tune WHERE " WHERE_FAMILY " AND n > 0 AND c > 0",
                     &st);
    if (rc != XENT_OK) return rc;
    bind_key(st, key);
    if (relaxed) {
        sqlite3_bind_null(st, 1);
        sqlite3_bind_null(st, 3);
    }
    if (any_kind) {
        for (int p = 6; p <= 8; p++) sqlite3_bind_null(st, p);
        sqlite3_bind_int(st, 12, 1);
    }
    int s = SQLITE_DONE;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
        cand c;
        memset(&c, 0, sizeof c);
        rc = read_row(db, st, &c.k, &c.e);
        c.kd = key_dist(key, &c.k);
        c.d = exact ? 0.0 : shape_dist(key, c.k.n, c.k.c);
        c.store = store;
        c.dsm = abs(c.k.sm_count - key->sm_count);
        if (rc == XENT_OK) rc = push(db, cs, &c);
    }
    if (rc == XENT_OK && s != SQLITE_DONE) rc = sqlfail(db, "lookup");
    sqlite3_finalize(st);
    return rc;
}

/* Nearest problem kind, nearest shape, then the first store, then the
 * nearest SM count; the rest only makes the order total (smaller n, then
 * smaller c, then the key's fields, first). */
static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    int g;
    if (a->kd != b->kd) return a->kd - b->kd;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    if (a->store != b->store) return a->store - b->store;
    if (a->dsm != b->dsm) return a->dsm - b->dsm;
    if ((g = strcmp(a->k.gpu, b->k.gpu)) != 0) return g;
    if (a->k.n != b->k.n) return a->k.n < b->k.n ? -1 : 1;
    if (a->k.c != b->k.c) return a->k.c < b->k.c ? -1 : 1;
    if (a->k.reduction != b->k.reduction) return a->k.reduction - b->k.reduction;
    if (a->k.options != b->k.options) return a->k.options - b->k.options;
    return a->k.targets - b->k.targets;
}

int tc_nearest(tc_db *db, const tc_key *key, tc_entry *e, int64_t *n_found, int64_t *c_found) {
    if (!db) return XENT_EINVAL;
    int rc = key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e || key->n <= 0 || key->c <= 0) return fail(db, XENT_EINVAL, "no entry to fill, or shape not positive");
    cands cs = {NULL, 0, 0};
    rc = collect(db, key, 0, 0, 0, 0, &cs);
    if (rc == XENT_OK && cs.n > 1) /* as in try_level: no qsort of a NULL array */
        qsort(cs.v, cs.n, sizeof *cs.v, cmp_cand);
    size_t i = 0;
    while (rc == XENT_OK && i < cs.n && tc_stale(key, &cs.v[i].e, NULL, 0)) i++;
    if (rc == XENT_OK && i == cs.n) rc = fail(db, XENT_ENOTFOUND, "no tuned shape for %s %s", key->gpu, key->family);
    if (rc == XENT_OK) {
        *e = cs.v[i].e;
        if (n_found) *n_found = cs.v[i].k.n;
        if (c_found) *c_found = cs.v[i].k.c;
    }
    free(cs.v);
    return rc;
}

/* One level of the chain: its stores (up to two, in preference order). */
typedef struct level {
    xent_source from;
    tc_db *db[2];
    const char *name[2];
    int exact, relaxed, any_kind;
} level;

/* How many passed-over entries of one level are described; the rest are counted. */
#define NOTED_PER_LEVEL 2

static void note_add(tc_answer *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_add(tc_answer *a, const char *fmt, ...) {
    size_t used = strlen(a->note);
    if (used + 3 >= sizeof a->note) return;
    if (used) used += (size_t)snprintf(a->note + used, sizeof a->note - used, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->note + used, sizeof a->note - used, fmt, ap);
    va_end(ap);
}

/* Rows a higher level already tried: the nearest level leaves out the exact
 * shape, the architecture level this GPU's own rows when it searches the
 * shipped store again (a GPU whose own file holds other SM counts), a
 * relaxed-key level the rows of the query's own kind. */
static int tried_above(const level *lv, const tc_stores *s, const tc_key *key, const cand *c) {
    if (lv->any_kind && c->kd == 0) /* the same kind's level of these stores came first */
        return 1;
    if (lv->from == XENT_SOURCE_NEAREST) return !lv->any_kind && c->k.n == key->n && c->k.c == key->c;
    if (lv->from == XENT_SOURCE_ARCH)
        return lv->db[0] == s->shipped && !strcmp(c->k.gpu, key->gpu) && c->k.sm_count == key->sm_count;
    return 0;
}

/* The first usable candidate of cs (sorted) into a; nonzero if one was. */
static int pick(const level *lv, const tc_stores *s, const tc_key *key, const cands *cs, tc_answer *a) {
    static const char *suffix[XENT_SOURCE_ARCH + 1] = {
        [XENT_SOURCE_NEAREST] = " (nearest)", [XENT_SOURCE_ARCH] = " (arch)"};
    char why[300], kind[96];
    size_t passed = 0;
    for (size_t i = 0; i < cs->n; i++) {
        const cand *c = &cs->v[i];
        if (tried_above(lv, s, key, c)) continue;
        int usable =
            !tc_stale(key, &c->e, why, sizeof why) && (!s->accept || s->accept(s->arg, &c->e, c->k.n, c->k.c, why, sizeof why));
        const char *name = lv->name[c->store];
        if (usable) {
            a->entry = c->e;
            a->from = lv->from;
            snprintf(a->cache, sizeof a->cache, "%s", name);
            a->n = c->k.n, a->c = c->k.c;
            a->targets = c->k.targets, a->reduction = c->k.reduction, a->options = c->k.options;
            if (c->kd) {
                char kind[96];
                tc_kind_text(&c->k, kind, sizeof kind);
                note_add(a, "answered by %s %lldx%lld %s (another kind)", name, (long long)c->k.n, (long long)c->k.c,
                         kind);
            }
            break;
        }
        if (++passed <= NOTED_PER_LEVEL) {
            kind[0] = '\0';
            if (c->kd) tc_kind_text(&c->k, kind + 1, sizeof kind - 1), kind[0] = ' ';
            note_add(a, "%s %lldx%lld%s%s: %s", name, (long long)c->k.n, (long long)c->k.c, kind,
                     suffix[lv->from] ? suffix[lv->from] : "", why);
        }
    }
    if (passed > NOTED_PER_LEVEL)
        note_add(a, "%zu more%s passed over", passed - NOTED_PER_LEVEL, suffix[lv->from] ? suffix[lv->from] : "");
    return a->from == lv->from;
}

/* A store that errors is skipped so the others can still answer; the error
 * is reported only when nothing was found, so the runtime falls back knowingly. */
static int try_level(const level *lv, const tc_stores *s, const tc_key *key, tc_answer *a, int *err) {
    cands cs = {NULL, 0, 0};
    for (int i = 0; i < 2; i++) {
        if (!lv->db[i]) continue;
        int rc = collect(lv->db[i], key, lv->exact, lv->relaxed, lv->any_kind, i, &cs);
        if (rc != XENT_OK) {
            note_add(a, "%s", tc_errmsg(lv->db[i]));
            if (*err == XENT_ENOTFOUND) *err = rc;
        }
    }
    if (cs.n > 1) /* qsort of no array (cs.v NULL) is undefined: UBSan stops there */
        qsort(cs.v, cs.n, sizeof *cs.v, cmp_cand);
    int found = pick(lv, s, key, &cs, a);
    free(cs.v);
    return found;
}

int tc_lookup(const tc_stores *s, const tc_key *key, tc_answer *a) {
    if (!a) return XENT_EINVAL;
    memset(a, 0, sizeof *a);
    a->from = XENT_SOURCE_HEURISTIC;
    if (!s || !key || !terminated(key->gpu, sizeof key->gpu) || !terminated(key->family, sizeof key->family) ||
        !terminated(key->template_hash, sizeof key->template_hash))
        return XENT_EINVAL;
    const char *ship = s->shipped_name ? s->shipped_name : "shipped";
    const char *arch = s->arch_name ? s->arch_name : "arch";
    int shaped = key->n > 0 && key->c > 0;
    int kinds = shaped && s->any_kind;
    const level levels[] = {
        {XENT_SOURCE_USER_DB, {s->user, NULL}, {"user", NULL}, 1, 0, 0},
        {XENT_SOURCE_SHIPPED, {s->shipped, NULL}, {ship, NULL}, 1, 0, 0},
        {XENT_SOURCE_NEAREST, {shaped ? s->user : NULL, shaped ? s->shipped : NULL}, {"user", ship}, 0, 0, 0},
        {XENT_SOURCE_NEAREST, {kinds ? s->user : NULL, kinds ? s->shipped : NULL}, {"user", ship}, 0, 0, 1},
        {XENT_SOURCE_ARCH, {shaped ? s->arch : NULL, NULL}, {arch, NULL}, 0, 1, 0},
        {XENT_SOURCE_ARCH, {kinds ? s->arch : NULL, NULL}, {arch, NULL}, 0, 1, 1},
    };
    int err = XENT_ENOTFOUND;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (try_level(&levels[i], s, key, a, &err)) return XENT_OK;
    return err;
}

/* ---- trials ------------------------------------------------------------- */

int tc_add_trial(tc_db *db, const tc_key *key, const char *config, double us, double gbps, const char *status) {
    if (!db) return XENT_EINVAL;
    int rc = key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!config || !status) return fail(db, XENT_EINVAL, "trial needs a config and a status");
    sqlite3_stmt *st;
    if ((rc = prepare(db,
                      "INSERT INTO trial(" KEY_COLS ", " STAMP_COLS ", config, us, gbps, status,"
                      " measured_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
                      " ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                      &st)) != XENT_OK)
        return rc;
    bind_key(st, key);
    sqlite3_bind_text(st, 12, key->template_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 13, key->nvrtc);
    sqlite3_bind_text(st, 14, config, -1, SQLITE_STATIC);
    /* An untimed candidate (NaN, inf) is stored as NULL, not as a number. */
    if (isfinite(us)) sqlite3_bind_double(st, 15, us);
    if (isfinite(gbps)) sqlite3_bind_double(st, 16, gbps);
    sqlite3_bind_text(st, 17, status, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 18, (int64_t)time(NULL));
    return step_done(db, st, "add trial");
}

/* ---- walking, export -------------------------------------------------- */

static int select_all(tc_db *db, const char *gpu, sqlite3_stmt **st) {
    int rc = prepare(db,
                     "SELECT " ROW_COLS " FROM tune"
                     " WHERE ?1 IS NULL OR gpu = ?1" ORDER_KEY,
                     st);
    if (rc == XENT_OK && gpu) sqlite3_bind_text(*st, 1, gpu, -1, SQLITE_STATIC);
    return rc;
}

int tc_foreach(tc_db *db, const char *gpu, tc_visit_fn fn, void *arg) {
    if (!db) return XENT_EINVAL;
    if (!fn) return fail(db, XENT_EINVAL, "no visit function");
    sqlite3_stmt *st;
    int rc = select_all(db, gpu, &st), s = SQLITE_DONE;
    tc_key k;
    tc_entry e;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
        rc = read_row(db, st, &k, &e);
        if (rc == XENT_OK) rc = fn(arg, &k, &e);
    }
    if (rc == XENT_OK && s != SQLITE_DONE) rc = sqlfail(db, "foreach");
    sqlite3_finalize(st);
    return rc;
}

/* The shortest of %.15g..%.17g that reads back to the same bits: exact like
 * %.17g, but a measured 118.253 stays "118.253" in a diffable export (SQLite's
 * own printf stops at 16 digits, so C's is used). C's printf and strtod
 * follow LC_NUMERIC alike, and SQL needs '.', so a comma is undone last. */
static void fmt_double(char *buf, size_t cap, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    char *comma = strchr(buf, ',');
    if (comma) *comma = '.';
}

static char *insert_line(const tc_key *k, const tc_entry *e) {
    char us[40], gbps[40];
    fmt_double(us, sizeof us, e->us);
    fmt_double(gbps, sizeof gbps, e->gbps);
    return sqlite3_mprintf("INSERT OR REPLACE INTO tune(" ROW_COLS ") VALUES("
                           "%Q, %d, %d, %Q, %d, %d, %d, %d, %lld, %lld, %d, %Q, %d, %Q, %s, %s, %lld, %Q);\n",
                           k->gpu, k->arch, k->sm_count, k->family, k->logits, k->targets, k->reduction, k->options,
                           (long long)k->n, (long long)k->c, k->template_version, k->template_hash, k->nvrtc, e->config,
                           us, gbps, (long long)e->when, e->settings);
}

typedef struct export_ctx {
    tc_db *db;
    FILE *out;
} export_ctx;

static int export_row(void *arg, const tc_key *k, const tc_entry *e) {
    export_ctx *x = arg;
    char *line = insert_line(k, e);
    if (!line) return fail(x->db, XENT_ENOMEM, "export: out of memory");
    int bad = fputs(line, x->out) == EOF;
    sqlite3_free(line);
    return bad ? fail(x->db, XENT_ECACHE, "export: write failed: %s", strerror(errno)) : XENT_OK;
}

int tc_export(tc_db *db, const char *gpu, FILE *out) {
    if (!db) return XENT_EINVAL;
    if (!out) return fail(db, XENT_EINVAL, "export: no output");
    /* The gpu lands in a "--" comment line; a newline would end it early. */
    if (gpu && strpbrk(gpu, "\r\n")) return fail(db, XENT_EINVAL, "export: gpu name contains a line break");
    if (fprintf(out, "-- xent tune cache export, schema %d, gpu %s\n", TC_SCHEMA_VERSION, gpu ? gpu : "all") < 0)
        return fail(db, XENT_ECACHE, "export: write failed: %s", strerror(errno));
    export_ctx x = {db, out};
    int rc = tc_foreach(db, gpu, export_row, &x);
    if (rc == XENT_OK && fflush(out) != 0) rc = fail(db, XENT_ECACHE, "export: write failed: %s", strerror(errno));
    return rc;
}

/* ---- stamping ------------------------------------------------------------ */

/* The families with unstamped winners, read before any is updated. */
static int unstamped_families(tc_db *db, char (*fam)[16], int cap, int *n) {
    sqlite3_stmt *st;
    int rc = prepare(db,
                     "SELECT DISTINCT family FROM tune WHERE template_hash = '' AND nvrtc = 0"
                     " ORDER BY family",
                     &st),
        s = SQLITE_DONE;
    *n = 0;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW && *n < cap)
        rc = column_text(db, st, 0, fam[(*n)++], sizeof fam[0]);
    if (rc == XENT_OK && s != SQLITE_DONE && s != SQLITE_ROW) rc = sqlfail(db, "stamp");
    sqlite3_finalize(st);
    return rc;
}

static int stamp_family(tc_db *db, const char *family, const char *hash, int nvrtc, int *rows) {
    sqlite3_stmt *st;
    int rc = prepare(db,
                     "UPDATE tune SET template_hash = ?2, nvrtc = ?3"
                     " WHERE family = ?1 AND template_hash = '' AND nvrtc = 0",
                     &st);
    if (rc != XENT_OK) return rc;
    sqlite3_bind_text(st, 1, family, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, hash, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, nvrtc);
    rc = step_done(db, st, "stamp");
    if (rc == XENT_OK) *rows += sqlite3_changes(db->sql);
    return rc;
}

int tc_stamp(tc_db *db, tc_hash_fn hash, int nvrtc, int *rows) {
    char fam[64][16], h[17];
    int nfam = 0, count = 0;
    if (rows) *rows = 0;
    if (!db) return XENT_EINVAL;
    if (!hash) return fail(db, XENT_EINVAL, "stamp: no hash function");
    int rc = exec(db, "BEGIN IMMEDIATE", "stamp: begin");
    if (rc == XENT_OK) rc = unstamped_families(db, fam, 64, &nfam);
    for (int i = 0; rc == XENT_OK && i < nfam; i++)
        if (hash(fam[i], h, sizeof h) == XENT_OK && h[0]) rc = stamp_family(db, fam[i], h, nvrtc, &count);
    if (rc == XENT_OK) rc = exec(db, "COMMIT", "stamp: commit");
    if (rc != XENT_OK) {
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    if (rows) *rows = count;
    return XENT_OK;
}

/* ---- import -------------------------------------------------------------- */

/* Shipped caches are tens of KB; an import past this is a mistake or an attack. */
#define TC_IMPORT_MAX_BYTES (16L << 20)
/* SQLite calls the progress handler every this many VM instructions; an
 * import may run TC_IMPORT_WORK_BASE plus TC_IMPORT_WORK_PER_BYTE such calls
 * per byte of text. One INSERT of a row (some 300 bytes) takes well under
 * one call; a cross join in a kilobyte would take for ever. */
#define TC_PROGRESS_OPS 1000
#define TC_IMPORT_WORK_BASE 10000L
#define TC_IMPORT_WORK_PER_BYTE 1L

/* The import text is data from a file, so it may only add rows to main.tune.
 * VACUUM and bare SELECTs raise no INSERT, hence the inserts count check. */
static int import_auth(void *arg, int action, const char *a1, const char *a2, const char *dbname, const char *trigger) {
    int *inserts = arg;
    (void)a2, (void)trigger;
    if (action == SQLITE_INSERT && a1 && strcmp(a1, "tune") == 0 && dbname && strcmp(dbname, "main") == 0) {
        ++*inserts;
        return SQLITE_OK;
    }
    /* Multi-row VALUES is compiled as a SELECT; it reads no table on its own. */
    return action == SQLITE_SELECT ? SQLITE_OK : SQLITE_DENY;
}

static int over_budget(void *arg) {
    long *left = arg;
    return --*left < 0;
}

/* The text runs in a private in-memory store (the staging store), never in
 * the cache: however it is written, the cache's write lock is held only to
 * copy rows that were read back and checked. */
static int import_stmt(tc_db *db, sqlite3 *stage, const char **sql, int *index, int *rows, int *inserts) {
    sqlite3_stmt *st;
    *inserts = 0;
    if (sqlite3_prepare_v2(stage, *sql, -1, &st, sql) != SQLITE_OK)
        return fail(db, XENT_ECACHE, "import: statement %d: %s", *index + 1, sqlite3_errmsg(stage));
    if (!st) /* only blanks or comments were left */
        return XENT_OK;
    ++*index;
    int rc = XENT_OK, s = SQLITE_DONE;
    if (*inserts == 0) rc = fail(db, XENT_ECACHE, "import: statement %d: not an INSERT into tune", *index);
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc == XENT_OK && s == SQLITE_INTERRUPT)
        rc = fail(db, XENT_ECACHE,
                  "import: statement %d: more work than the import allows for "
                  "its size",
                  *index);
    else if (rc == XENT_OK && s != SQLITE_DONE)
        rc = fail(db, XENT_ECACHE, "import: statement %d: %s", *index, sqlite3_errmsg(stage));
    else if (rc == XENT_OK)
        *rows += sqlite3_changes(stage);
    sqlite3_finalize(st);
    return rc;
}

static int run_text(tc_db *db, sqlite3 *stage, const char *sql, size_t len, int *rows) {
    int index = 0, inserts = 0, rc = XENT_OK;
    long work = TC_IMPORT_WORK_BASE + TC_IMPORT_WORK_PER_BYTE * (long)len;
    sqlite3_progress_handler(stage, TC_PROGRESS_OPS, over_budget, &work);
    sqlite3_set_authorizer(stage, import_auth, &inserts);
    while (rc == XENT_OK && *sql) rc = import_stmt(db, stage, &sql, &index, rows, &inserts);
    sqlite3_set_authorizer(stage, NULL, NULL);
    sqlite3_progress_handler(stage, 0, NULL, NULL);
    return rc;
}

static int open_stage(tc_db *db, sqlite3 **stage) {
    if (sqlite3_open_v2(":memory:", stage, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        sqlite3_close(*stage);
        *stage = NULL;
        return fail(db, XENT_ENOMEM, "import: cannot open a staging store");
    }
    /* No value of a valid row comes near these; they bound what one row or
     * statement of the text can make SQLite allocate. */
    sqlite3_limit(*stage, SQLITE_LIMIT_LENGTH, 1 << 20);
    sqlite3_limit(*stage, SQLITE_LIMIT_SQL_LENGTH, (int)TC_IMPORT_MAX_BYTES);
    if (sqlite3_exec(*stage, SCHEMA_SQL, NULL, NULL, NULL) != SQLITE_OK)
        return fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(*stage));
    return XENT_OK;
}

/* ---- checking rows as the runtime reads them ----------------------------- */

typedef struct int_col {
    const char *name;
    int64_t lo, hi;
} int_col;

/* KEY_COLS order; the stamps (11, 12), the config (13) and us, gbps (14, 15)
 * are checked apart. */
static const int_col key_ints[NKEY] = {
    {"gpu", 0, 0},
    {"arch", 10, 10000},
    {"sm_count", 1, 100000},
    {"family", 0, 0},
    {"logits", XENT_F32, XENT_BF16},
    {"targets", XENT_I32, XENT_I64},
    {"reduction", XENT_REDUCE_NONE, XENT_REDUCE_MEAN},
    {"options", 0,
     TC_OPT_WEIGHTS | TC_OPT_SMOOTHING | TC_OPT_LSE | TC_OPT_STRIDED | TC_OPT_ZLOSS | TC_OPT_SOFTCAP | TC_OPT_SHARD},
    {"n", 1, INT64_MAX / 128},
    {"c", 1, 0x7fffffffLL},
    {"template_version", 1, 1000000},
};

static int bad_row(tc_db *db, int row, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad_row(tc_db *db, int row, const char *fmt, ...) {
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return fail(db, XENT_ECACHE, "import: row %d: %s", row, why);
}

/* Text of at most cap - 1 bytes, without control characters or NULs. */
static int check_text(tc_db *db, sqlite3_stmt *st, int col, size_t cap, int row) {
    const char *name = sqlite3_column_name(st, col);
    if (sqlite3_column_type(st, col) != SQLITE_TEXT) return bad_row(db, row, "%s is not text", name);
    const unsigned char *s = sqlite3_column_text(st, col);
    size_t len = (size_t)sqlite3_column_bytes(st, col);
    if (len >= cap) return bad_row(db, row, "%s is %zu bytes, more than %zu", name, len, cap - 1);
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] == 0x7f) return bad_row(db, row, "%s holds a control character", name);
    return XENT_OK;
}

static int check_int(tc_db *db, sqlite3_stmt *st, int col, const int_col *c, int row) {
    if (sqlite3_column_type(st, col) != SQLITE_INTEGER) return bad_row(db, row, "%s is not an integer", c->name);
    int64_t v = sqlite3_column_int64(st, col);
    if (v < c->lo || v > c->hi)
        return bad_row(db, row, "%s %lld is outside [%lld, %lld]", c->name, (long long)v, (long long)c->lo,
                       (long long)c->hi);
    return XENT_OK;
}

/* us must be above 0 (the tuner divides by it), gbps at least 0. */
static int check_real(tc_db *db, sqlite3_stmt *st, int col, int positive, int row) {
    const char *name = sqlite3_column_name(st, col);
    int t = sqlite3_column_type(st, col);
    double v = sqlite3_column_double(st, col);
    if (t != SQLITE_FLOAT && t != SQLITE_INTEGER) return bad_row(db, row, "%s is not a number", name);
    if (!isfinite(v) || v < 0 || (positive && v == 0))
        return bad_row(db, row, "%s %g is not a finite number %s", name, v, positive ? "above 0" : "of at least 0");
    return XENT_OK;
}

/* The config as xent_config_parse reads it, legal for the row's dtype. */
static int check_config(tc_db *db, sqlite3_stmt *st, int row) {
    int rc = check_text(db, st, CFG_COL, sizeof((tc_entry *)0)->config, row);
    if (rc != XENT_OK) return rc;
    xent_config cfg;
    char why[200];
    const char *text = (const char *)sqlite3_column_text(st, CFG_COL);
    if (xent_config_parse(text, &cfg, why, sizeof why) != XENT_OK)
        return bad_row(db, row, "config '%.160s': %s", text, why);
    xent_family fam = xent_family_named((const char *)sqlite3_column_text(st, 3));
    if (!xent_config_legal_for(&cfg, fam, (xent_dtype)sqlite3_column_int(st, 4), why, sizeof why))
        return bad_row(db, row, "config '%.160s' is not legal for its logits: %s", text, why);
    return XENT_OK;
}

/* A template hash is empty (unstamped) or 16 hex digits; nvrtc is 0 or a version. */
static int check_stamp(tc_db *db, sqlite3_stmt *st, int row) {
    int rc = check_text(db, st, NKEY, sizeof((tc_key *)0)->template_hash, row);
    const char *h = (const char *)sqlite3_column_text(st, NKEY);
    int len = sqlite3_column_bytes(st, NKEY);
    if (rc == XENT_OK && len != 0 && (len != 16 || strspn(h, "0123456789abcdef") != 16))
        rc = bad_row(db, row, "template_hash '%.40s' is not 16 hex digits", h);
    if (rc == XENT_OK) rc = check_int(db, st, NKEY + 1, &(int_col){"nvrtc", 0, 1000000}, row);
    return rc;
}

static int check_row(tc_db *db, sqlite3_stmt *st, int row) {
    int rc = check_text(db, st, 0, sizeof((tc_key *)0)->gpu, row);
    if (rc == XENT_OK && sqlite3_column_bytes(st, 0) == 0) rc = bad_row(db, row, "gpu is empty");
    if (rc == XENT_OK) rc = check_text(db, st, 3, sizeof((tc_key *)0)->family, row);
    if (rc == XENT_OK && sqlite3_column_bytes(st, 3) == 0) rc = bad_row(db, row, "family is empty");
    for (int col = 1; rc == XENT_OK && col < NKEY; col++)
        if (col != 3) rc = check_int(db, st, col, &key_ints[col], row);
    if (rc == XENT_OK && sqlite3_column_int64(st, 8) > INT64_MAX / 128 / sqlite3_column_int64(st, 9))
        rc = bad_row(db, row, "n * c is too large");
    if (rc == XENT_OK) rc = check_stamp(db, st, row);
    if (rc == XENT_OK) rc = check_config(db, st, row);
    if (rc == XENT_OK) rc = check_real(db, st, CFG_COL + 1, 1, row);
    if (rc == XENT_OK) rc = check_real(db, st, CFG_COL + 2, 0, row);
    if (rc == XENT_OK) rc = check_int(db, st, CFG_COL + 3, &(int_col){"measured_at", 0, INT64_MAX}, row);
    if (rc == XENT_OK) rc = check_text(db, st, CFG_COL + 4, sizeof((tc_entry *)0)->settings, row);
    return rc;
}

/* ---- copying checked rows ------------------------------------------------ */

static int copy_row(tc_db *db, sqlite3_stmt *from, sqlite3_stmt *to) {
    sqlite3_reset(to);
    for (int col = 0; col < CFG_COL + 5; col++)
        if (sqlite3_bind_value(to, col + 1, sqlite3_column_value(from, col)) != SQLITE_OK)
            return sqlfail(db, "import: copy");
    return sqlite3_step(to) == SQLITE_DONE ? XENT_OK : sqlfail(db, "import: copy");
}

/* Every staged row is checked before the first is copied, so a bad row
 * anywhere leaves the cache as it was. */
static int copy_rows(tc_db *db, sqlite3 *stage, int write) {
    sqlite3_stmt *from = NULL, *to = NULL;
    int rc = XENT_OK, s, row = 0;
    if (sqlite3_prepare_v2(stage, "SELECT " ROW_COLS " FROM tune ORDER BY rowid", -1, &from, NULL) != SQLITE_OK)
        return fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(stage));
    if (write)
        rc = prepare(db,
                     "INSERT OR REPLACE INTO tune(" ROW_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                     "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                     &to);
    while (rc == XENT_OK && (s = sqlite3_step(from)) == SQLITE_ROW)
        rc = write ? copy_row(db, from, to) : check_row(db, from, ++row);
    if (rc == XENT_OK && s != SQLITE_DONE)
        rc = fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(stage));
    sqlite3_finalize(from);
    sqlite3_finalize(to);
    return rc;
}

static int store_rows(tc_db *db, sqlite3 *stage) {
    int rc = exec(db, "BEGIN IMMEDIATE", "import: begin");
    if (rc == XENT_OK) rc = copy_rows(db, stage, 1);
    if (rc == XENT_OK) return exec(db, "COMMIT", "import: commit");
    sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int tc_import(tc_db *db, const char *sql, int *rows) {
    int count = 0;
    if (rows) *rows = 0;
    if (!db) return XENT_EINVAL;
    if (!sql) return fail(db, XENT_EINVAL, "import: no text");
    size_t len = strnlen(sql, (size_t)TC_IMPORT_MAX_BYTES + 1);
    if (len > (size_t)TC_IMPORT_MAX_BYTES)
        return fail(db, XENT_ECACHE, "import: the text is more than %ld bytes", TC_IMPORT_MAX_BYTES);
    sqlite3 *stage = NULL;
    int rc = open_stage(db, &stage);
    if (rc == XENT_OK) rc = run_text(db, stage, sql, len, &count);
    if (rc == XENT_OK) rc = copy_rows(db, stage, 0);
    if (rc == XENT_OK) rc = store_rows(db, stage);
    sqlite3_close(stage);
    if (rc == XENT_OK && rows) *rows = count;
    return rc;
}

/* Opened without blocking (a FIFO would wait for a writer) and read only if
 * it is a regular file, to at most one byte past the limit (it may grow). */
static int read_file(tc_db *db, const char *path, char **text, size_t *size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return fail(db, XENT_ECACHE, "import: cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(db, XENT_ECACHE, "import: %s is not a regular file", path);
    }
    if (st.st_size > TC_IMPORT_MAX_BYTES) {
        close(fd);
        return fail(db, XENT_ECACHE, "import: %s is %lld bytes, more than the %ld an import reads", path,
                    (long long)st.st_size, TC_IMPORT_MAX_BYTES);
    }
    size_t len = 0;
    char *buf = malloc((size_t)st.st_size + 2);
    ssize_t got = 1;
    while (buf && len <= (size_t)st.st_size && (got = read(fd, buf + len, (size_t)st.st_size + 1 - len)) > 0)
        len += (size_t)got;
    int err = got < 0 ? errno : 0;
    close(fd);
    if (!buf) return fail(db, XENT_ENOMEM, "import: out of memory reading %s", path);
    if (err || len > (size_t)st.st_size) {
        free(buf);
        return fail(db, XENT_ECACHE, "import: cannot read %s: %s", path,
                    err ? strerror(err) : "it grew while being read");
    }
    buf[len] = '\0';
    *text = buf;
    *size = len;
    return XENT_OK;
}

int tc_import_file(tc_db *db, const char *path, int *rows) {
    if (rows) *rows = 0;
    if (!db) return XENT_EINVAL;
    if (!path) return fail(db, XENT_EINVAL, "import: no path");
    char *text = NULL;
    size_t size = 0;
    int rc = read_file(db, path, &text, &size);
    if (rc != XENT_OK) return rc;
    /* A NUL byte would silently cut the text short, importing half a file. */
    if (strlen(text) != size)
        rc = fail(db, XENT_ECACHE, "import: %s contains a NUL byte", path);
    else
        rc = tc_import(db, text, rows);
    free(text);
    return rc;
}

/* ---- user path ----------------------------------------------------------- */

int tc_user_path(char *buf, size_t len) {
    const char *v = getenv("XENT_TUNECACHE");
    char home[4096];
    int n = -1;
    if (!buf || len == 0) return XENT_EINVAL;
    if (v && *v)
        n = snprintf(buf, len, "%s", v);
    else if (xent_cache_home(home, sizeof home, NULL) == XENT_OK)
        n = snprintf(buf, len, "%s/tune.db", home);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return XENT_EINVAL;
    }
    return XENT_OK;
}
