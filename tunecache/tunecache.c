/*
 * tunecache.c — the SQLite store of tuned kernel configurations (see
 * tunecache.h): opening, winners, trials, export and stamps; lookup.c answers
 * the runtime's chain, import.c loads a cache's text.
 *
 * Every call prepares its statements afresh: lookups are memoized by the
 * runtime and the tuner writes a few rows per second, so a statement cache
 * would buy nothing and would make tc_foreach callbacks re-entrancy hazards.
 */
#include "store.h"

#include "common/files.h"
#include "xent.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)

/* How long a writer waits for another process's lock before giving up. */
#define TC_BUSY_MS 10000

const char tc_schema_sql[] = "CREATE TABLE tune(" KEY_DECL ", " STAMP_DECL ", "
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

int tc_fail(tc_db *db, int rc, const char *fmt, ...) {
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the path cut short, not the reason: a long path must leave room for why (the head, at most
     * 269 bytes, always fits err) */
    db->reason_at = (size_t)snprintf(db->err, sizeof db->err, "tune cache %.256s: ", db->path);
    snprintf(db->err + db->reason_at, sizeof db->err - db->reason_at, "%s", why);
    return rc;
}

int tc_sqlfail(tc_db *db, const char *what) {
    return tc_fail(db, XENT_ECACHE, "%s: %s", what, sqlite3_errmsg(db->sql));
}

const char *tc_errmsg(const tc_db *db) { return db ? db->err : "tune cache: no handle"; }
const char *tc_reason(const tc_db *db) { return db ? db->err + db->reason_at : "no handle"; }

/* ---- small SQL helpers ----------------------------------------------- */

int tc_prepare(tc_db *db, const char *sql, sqlite3_stmt **st) {
    if (sqlite3_prepare_v2(db->sql, sql, -1, st, NULL) != SQLITE_OK) return tc_sqlfail(db, "prepare");
    return XENT_OK;
}

int tc_exec(tc_db *db, const char *sql, const char *what) {
    if (sqlite3_exec(db->sql, sql, NULL, NULL, NULL) != SQLITE_OK) return tc_sqlfail(db, what);
    return XENT_OK;
}

static int step_done(tc_db *db, sqlite3_stmt *st, const char *what) {
    int rc = sqlite3_step(st) == SQLITE_DONE ? XENT_OK : tc_sqlfail(db, what);
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
        rc = tc_fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
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
    int rc = tc_exec(db, "BEGIN IMMEDIATE", "begin");
    if (rc != XENT_OK) return rc;
    rc = inspect(db, &version, &ntables);
    if (rc == XENT_OK && version == 0 && ntables == 0)
        rc = tc_exec(db, tc_schema_sql, "create schema");
    else if (rc == XENT_OK && version == 1 && (rc = check_tables(db, 1)) == XENT_OK)
        rc = tc_exec(db, MIGRATE_1_SQL, "migrate from schema 1");
    if (rc == XENT_OK) return tc_exec(db, "COMMIT", "commit");
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
        if ((rc & 0xff) != SQLITE_BUSY || waited >= TC_BUSY_MS) return tc_sqlfail(db, "set WAL mode");
        sqlite3_sleep(5);
    }
    return tc_exec(db, "PRAGMA synchronous = NORMAL", "set synchronous");
}

static int check_tables(tc_db *db, int version) {
    sqlite3_stmt *st;
    const char *probes[] = {version == 1 ? PROBE_TUNE_1 : PROBE_TUNE, version == 1 ? PROBE_TRIAL_1 : PROBE_TRIAL};
    for (size_t i = 0; i < 2; i++) {
        if (sqlite3_prepare_v2(db->sql, probes[i], -1, &st, NULL) != SQLITE_OK)
            return tc_fail(db, XENT_ECACHE, "not a tune cache (%s)", sqlite3_errmsg(db->sql));
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
        return tc_fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
    if ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *what = (const char *)sqlite3_column_text(st, 0);
        if (!what || strcmp(what, "ok")) {
            rc = tc_fail(db, XENT_ECACHE, "database disk image is malformed (%.200s)", what ? what : "?");
            for (char *nl = db->err; (nl = strchr(nl, '\n'));) /* one line, for logs and notes */
                *nl = ' ';
        }
    } else {
        rc = tc_fail(db, XENT_ECACHE, "%s", sqlite3_errmsg(db->sql));
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
        return tc_fail(db, XENT_ECACHE, "schema version %lld is newer than this library's %d", (long long)version,
                       TC_SCHEMA_VERSION);
    if (version == 0 && ntables > 0)
        return tc_fail(db, XENT_ECACHE, "not a tune cache (user_version 0 and other tables)");
    if (version == 0 && readonly) return tc_fail(db, XENT_ECACHE, "empty, and opened read-only");
    if (version > 0 && ((rc = check_tables(db, (int)version)) != XENT_OK || (rc = check_winners(db)) != XENT_OK))
        return rc;
    if (!readonly && (rc = use_wal(db)) != XENT_OK) return rc;
    if ((version == 0 || (version == 1 && !readonly)) && (rc = create_schema(db)) != XENT_OK) return rc;
    if (version == 1 && readonly &&
        ((rc = check_tables(db, 1)) != XENT_OK || (rc = tc_exec(db, VIEW_1_SQL, "read schema 1")) != XENT_OK))
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
    int rc = open_sql(db, path, readonly) == SQLITE_OK ? setup(db, readonly) : tc_sqlfail(db, "cannot open");
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

int tc_key_terminated(const tc_key *k) {
    return terminated(k->gpu, sizeof k->gpu) && terminated(k->family, sizeof k->family) &&
           terminated(k->template_hash, sizeof k->template_hash);
}

int tc_key_ok(tc_db *db, const tc_key *k) {
    if (!k) return tc_fail(db, XENT_EINVAL, "no key");
    if (!tc_key_terminated(k))
        return tc_fail(db, XENT_EINVAL, "key gpu, family or template hash is not NUL-terminated");
    return XENT_OK;
}

void tc_bind_key(sqlite3_stmt *st, const tc_key *k) {
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
        return tc_fail(db, XENT_ECACHE, "stored %s is %zu bytes, more than %zu", sqlite3_column_name(st, col), len,
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
int tc_read_row(tc_db *db, sqlite3_stmt *st, tc_key *k, tc_entry *e);

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

int tc_read_row(tc_db *db, sqlite3_stmt *st, tc_key *k, tc_entry *e) {
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
    int rc = tc_key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e || !terminated(e->config, sizeof e->config) || !terminated(e->settings, sizeof e->settings))
        return tc_fail(db, XENT_EINVAL, "no entry, or its text is not NUL-terminated");
    /* SQLite stores NaN as NULL and exports inf as unparsable text. */
    if (!isfinite(e->us) || !isfinite(e->gbps)) return tc_fail(db, XENT_EINVAL, "entry us or gbps is not finite");
    sqlite3_stmt *st;
    if ((rc = tc_prepare(db,
                         "INSERT OR REPLACE INTO tune(" ROW_COLS ") VALUES(?1, ?2, ?3, ?4, ?5,"
                         " ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                         &st)) != XENT_OK)
        return rc;
    tc_bind_key(st, key);
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
    int rc = tc_key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!e) return tc_fail(db, XENT_EINVAL, "no entry to fill");
    sqlite3_stmt *st;
    if ((rc = tc_prepare(db, "SELECT " STAMP_COLS ", " VAL_COLS " FROM tune WHERE " WHERE_EXACT, &st)) != XENT_OK)
        return rc;
    tc_bind_key(st, key);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && (rc = read_stamps(db, st, 0, e)) == XENT_OK)
        rc = read_entry(db, st, NSTAMP, e);
    else if (s == SQLITE_DONE)
        rc = tc_fail(db, XENT_ENOTFOUND, "no entry for %s %s %lldx%lld", key->gpu, key->family, (long long)key->n,
                     (long long)key->c);
    else
        rc = tc_sqlfail(db, "get");
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

/* ---- trials ------------------------------------------------------------- */

int tc_add_trial(tc_db *db, const tc_key *key, const char *config, double us, double gbps, const char *status) {
    if (!db) return XENT_EINVAL;
    int rc = tc_key_ok(db, key);
    if (rc != XENT_OK) return rc;
    if (!config || !status) return tc_fail(db, XENT_EINVAL, "trial needs a config and a status");
    sqlite3_stmt *st;
    if ((rc = tc_prepare(db,
                         "INSERT INTO trial(" KEY_COLS ", " STAMP_COLS ", config, us, gbps, status,"
                         " measured_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
                         " ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                         &st)) != XENT_OK)
        return rc;
    tc_bind_key(st, key);
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
    int rc = tc_prepare(db,
                        "SELECT " ROW_COLS " FROM tune"
                        " WHERE ?1 IS NULL OR gpu = ?1" ORDER_KEY,
                        st);
    if (rc == XENT_OK && gpu) sqlite3_bind_text(*st, 1, gpu, -1, SQLITE_STATIC);
    return rc;
}

int tc_foreach(tc_db *db, const char *gpu, tc_visit_fn fn, void *arg) {
    if (!db) return XENT_EINVAL;
    if (!fn) return tc_fail(db, XENT_EINVAL, "no visit function");
    sqlite3_stmt *st;
    int rc = select_all(db, gpu, &st), s = SQLITE_DONE;
    tc_key k;
    tc_entry e;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW) {
        rc = tc_read_row(db, st, &k, &e);
        if (rc == XENT_OK) rc = fn(arg, &k, &e);
    }
    if (rc == XENT_OK && s != SQLITE_DONE) rc = tc_sqlfail(db, "foreach");
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
    if (!line) return tc_fail(x->db, XENT_ENOMEM, "export: out of memory");
    int bad = fputs(line, x->out) == EOF;
    sqlite3_free(line);
    return bad ? tc_fail(x->db, XENT_ECACHE, "export: write failed: %s", strerror(errno)) : XENT_OK;
}

int tc_export(tc_db *db, const char *gpu, FILE *out) {
    if (!db) return XENT_EINVAL;
    if (!out) return tc_fail(db, XENT_EINVAL, "export: no output");
    /* The gpu lands in a "--" comment line; a newline would end it early. */
    if (gpu && strpbrk(gpu, "\r\n")) return tc_fail(db, XENT_EINVAL, "export: gpu name contains a line break");
    if (fprintf(out, "-- xent tune cache export, schema %d, gpu %s\n", TC_SCHEMA_VERSION, gpu ? gpu : "all") < 0)
        return tc_fail(db, XENT_ECACHE, "export: write failed: %s", strerror(errno));
    export_ctx x = {db, out};
    int rc = tc_foreach(db, gpu, export_row, &x);
    if (rc == XENT_OK && fflush(out) != 0) rc = tc_fail(db, XENT_ECACHE, "export: write failed: %s", strerror(errno));
    return rc;
}

/* ---- stamping ------------------------------------------------------------ */

/* The families with unstamped winners, read before any is updated. */
static int unstamped_families(tc_db *db, char (*fam)[16], int cap, int *n) {
    sqlite3_stmt *st;
    int rc = tc_prepare(db,
                        "SELECT DISTINCT family FROM tune WHERE template_hash = '' AND nvrtc = 0"
                        " ORDER BY family",
                        &st),
        s = SQLITE_DONE;
    *n = 0;
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW && *n < cap)
        rc = column_text(db, st, 0, fam[(*n)++], sizeof fam[0]);
    if (rc == XENT_OK && s != SQLITE_DONE && s != SQLITE_ROW) rc = tc_sqlfail(db, "stamp");
    sqlite3_finalize(st);
    return rc;
}

static int stamp_family(tc_db *db, const char *family, const char *hash, int nvrtc, int *rows) {
    sqlite3_stmt *st;
    int rc = tc_prepare(db,
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
    if (!hash) return tc_fail(db, XENT_EINVAL, "stamp: no hash function");
    int rc = tc_exec(db, "BEGIN IMMEDIATE", "stamp: begin");
    if (rc == XENT_OK) rc = unstamped_families(db, fam, 64, &nfam);
    for (int i = 0; rc == XENT_OK && i < nfam; i++)
        if (hash(fam[i], h, sizeof h) == XENT_OK && h[0]) rc = stamp_family(db, fam[i], h, nvrtc, &count);
    if (rc == XENT_OK) rc = tc_exec(db, "COMMIT", "stamp: commit");
    if (rc != XENT_OK) {
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    if (rows) *rows = count;
    return XENT_OK;
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
