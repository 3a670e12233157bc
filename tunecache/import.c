/*
 * import.c — loading a tune cache's exported text (tc_import, tc_import_file):
 * the text runs in a staging store under an authorizer and a work budget, and
 * only rows that read as the runtime reads them are copied in.
 */
#include "store.h"

#include "gen/gen.h"
#include "gen/space.h"
#include "xent.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        return tc_fail(db, XENT_ECACHE, "import: statement %d: %s", *index + 1, sqlite3_errmsg(stage));
    if (!st) /* only blanks or comments were left */
        return XENT_OK;
    ++*index;
    int rc = XENT_OK, s = SQLITE_DONE;
    if (*inserts == 0) rc = tc_fail(db, XENT_ECACHE, "import: statement %d: not an INSERT into tune", *index);
    while (rc == XENT_OK && (s = sqlite3_step(st)) == SQLITE_ROW)
        ;
    if (rc == XENT_OK && s == SQLITE_INTERRUPT)
        rc = tc_fail(db, XENT_ECACHE,
                     "import: statement %d: more work than the import allows for "
                     "its size",
                     *index);
    else if (rc == XENT_OK && s != SQLITE_DONE)
        rc = tc_fail(db, XENT_ECACHE, "import: statement %d: %s", *index, sqlite3_errmsg(stage));
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
        return tc_fail(db, XENT_ENOMEM, "import: cannot open a staging store");
    }
    /* No value of a valid row comes near these; they bound what one row or
     * statement of the text can make SQLite allocate. */
    sqlite3_limit(*stage, SQLITE_LIMIT_LENGTH, 1 << 20);
    sqlite3_limit(*stage, SQLITE_LIMIT_SQL_LENGTH, (int)TC_IMPORT_MAX_BYTES);
    if (sqlite3_exec(*stage, tc_schema_sql, NULL, NULL, NULL) != SQLITE_OK)
        return tc_fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(*stage));
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
    return tc_fail(db, XENT_ECACHE, "import: row %d: %s", row, why);
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
            return tc_sqlfail(db, "import: copy");
    return sqlite3_step(to) == SQLITE_DONE ? XENT_OK : tc_sqlfail(db, "import: copy");
}

/* Every staged row is checked before the first is copied, so a bad row
 * anywhere leaves the cache as it was. */
static int copy_rows(tc_db *db, sqlite3 *stage, int write) {
    sqlite3_stmt *from = NULL, *to = NULL;
    int rc = XENT_OK, s, row = 0;
    if (sqlite3_prepare_v2(stage, "SELECT " ROW_COLS " FROM tune ORDER BY rowid", -1, &from, NULL) != SQLITE_OK)
        return tc_fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(stage));
    if (write)
        rc = tc_prepare(db,
                        "INSERT OR REPLACE INTO tune(" ROW_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                        "?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                        &to);
    while (rc == XENT_OK && (s = sqlite3_step(from)) == SQLITE_ROW)
        rc = write ? copy_row(db, from, to) : check_row(db, from, ++row);
    if (rc == XENT_OK && s != SQLITE_DONE)
        rc = tc_fail(db, XENT_ECACHE, "import: staging store: %s", sqlite3_errmsg(stage));
    sqlite3_finalize(from);
    sqlite3_finalize(to);
    return rc;
}

static int store_rows(tc_db *db, sqlite3 *stage) {
    int rc = tc_exec(db, "BEGIN IMMEDIATE", "import: begin");
    if (rc == XENT_OK) rc = copy_rows(db, stage, 1);
    if (rc == XENT_OK) return tc_exec(db, "COMMIT", "import: commit");
    sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

int tc_import(tc_db *db, const char *sql, int *rows) {
    int count = 0;
    if (rows) *rows = 0;
    if (!db) return XENT_EINVAL;
    if (!sql) return tc_fail(db, XENT_EINVAL, "import: no text");
    size_t len = strnlen(sql, (size_t)TC_IMPORT_MAX_BYTES + 1);
    if (len > (size_t)TC_IMPORT_MAX_BYTES)
        return tc_fail(db, XENT_ECACHE, "import: the text is more than %ld bytes", TC_IMPORT_MAX_BYTES);
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
    if (fd < 0) return tc_fail(db, XENT_ECACHE, "import: cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tc_fail(db, XENT_ECACHE, "import: %s is not a regular file", path);
    }
    if (st.st_size > TC_IMPORT_MAX_BYTES) {
        close(fd);
        return tc_fail(db, XENT_ECACHE, "import: %s is %lld bytes, more than the %ld an import reads", path,
                       (long long)st.st_size, TC_IMPORT_MAX_BYTES);
    }
    size_t len = 0;
    char *buf = malloc((size_t)st.st_size + 2);
    ssize_t got = 1;
    while (buf && len <= (size_t)st.st_size && (got = read(fd, buf + len, (size_t)st.st_size + 1 - len)) > 0)
        len += (size_t)got;
    int err = got < 0 ? errno : 0;
    close(fd);
    if (!buf) return tc_fail(db, XENT_ENOMEM, "import: out of memory reading %s", path);
    if (err || len > (size_t)st.st_size) {
        free(buf);
        return tc_fail(db, XENT_ECACHE, "import: cannot read %s: %s", path,
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
    if (!path) return tc_fail(db, XENT_EINVAL, "import: no path");
    char *text = NULL;
    size_t size = 0;
    int rc = read_file(db, path, &text, &size);
    if (rc != XENT_OK) return rc;
    /* A NUL byte would silently cut the text short, importing half a file. */
    if (strlen(text) != size)
        rc = tc_fail(db, XENT_ECACHE, "import: %s contains a NUL byte", path);
    else
        rc = tc_import(db, text, rows);
    free(text);
    return rc;
}
