/*
 * check_tunecache.c — tests of the SQLite tune cache (tunecache/tunecache.c).
 *
 * Build and run:
 *   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -I. tests/check_tunecache.c \
 *       tunecache/tunecache.c -Wl,-Bstatic -lcheck -lsubunit -Wl,-Bdynamic -lsqlite3 -lm \
 *       -lrt -pthread -o build/check_tunecache && build/check_tunecache
 */
#include "tunecache/tunecache.h"
#include "xent.h"

#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/files.h"
#include "tests/run_suite.h"
#include "tests/tmpdir.h"

#define TC_STR_(x) #x
#define TC_STR(x) TC_STR_(x)
#define TC_SCHEMA_VERSION_NEXT 3
/* A configuration the library parses and that is legal for every dtype. */
#define CFG "VEC=4 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1"

/* ---- fixtures --------------------------------------------------------- */

/* The stamps of the keys made here: a template hash and NVRTC 13.0. */
#define STAMP "0123456789abcdef"

static void make_tmpdir(void) {
    strcpy(tmpdir, "/tmp/check_tunecache.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static tc_key mkkey(int64_t n, int64_t c) {
    tc_key k;
    memset(&k, 0, sizeof k);
    strcpy(k.gpu, "h200");
    k.arch = 90;
    k.sm_count = 132;
    strcpy(k.family, "xent_fwd");
    k.logits = XENT_F32;
    k.targets = XENT_I64;
    k.reduction = 1;
    k.options = 0;
    k.n = n;
    k.c = c;
    k.template_version = 1;
    strcpy(k.template_hash, STAMP);
    k.nvrtc = 1300;
    return k;
}

static tc_entry mkentry(const char *config, double us) {
    tc_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.config, sizeof e.config, "%s", config);
    e.us = us;
    e.gbps = 4000.0 + us;
    e.when = 1764633600;
    snprintf(e.settings, sizeof e.settings, "budget=30 reps=50");
    return e;
}

static tc_db *open_ok(const char *path) {
    tc_db *db = NULL;
    char err[256];
    int rc = tc_open(path, 0, &db, err, sizeof err);
    ck_assert_msg(rc == XENT_OK, "tc_open %s: %d %s", path, rc, err);
    ck_assert_ptr_nonnull(db);
    return db;
}

static void put_ok(tc_db *db, int64_t n, int64_t c, const char *config, double us) {
    tc_key k = mkkey(n, c);
    tc_entry e = mkentry(config, us);
    ck_assert_int_eq(tc_put(db, &k, &e), XENT_OK);
}

static void put_key(tc_db *db, const tc_key *k, const char *config) {
    tc_entry e = mkentry(config, 10.0);
    ck_assert_int_eq(tc_put(db, k, &e), XENT_OK);
}

/* The export is the canonical text of a store's winners, so comparing two
 * exports compares contents. Caller frees. */
static char *export_str(tc_db *db, const char *gpu) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    int rc = tc_export(db, gpu, f);
    fclose(f);
    ck_assert_msg(rc == XENT_OK, "export: %s", tc_errmsg(db));
    return buf;
}

/* Whole exports are too long for a Check message (no-fork mode aborts on
 * them), so report only where they first differ. */
#define assert_same_text(a, b) assert_same_text_at(a, b, __LINE__)
static void assert_same_text_at(const char *a, const char *b, int line) {
    size_t i = 0;
    while (a[i] && a[i] == b[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    ck_assert_msg(a[i] == b[i], "line %d: texts differ at byte %zu: '%.80s' vs '%.80s'", line, i, a + from, b + from);
}

static int64_t raw_int(const char *path, const char *sql) {
    sqlite3 *s;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(s);
    return v;
}

static void raw_exec(const char *path, const char *sql) {
    sqlite3 *s;
    ck_assert_int_eq(sqlite3_open(path, &s), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
}

/* ---- schema and opening ------------------------------------------------ */

START_TEST(test_schema_created) {
    const char *p = tpath("new.db");
    tc_close(open_ok(p));
    ck_assert_int_eq(raw_int(p, "PRAGMA user_version"), TC_SCHEMA_VERSION);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM sqlite_master WHERE type='table' "
                                "AND name IN ('tune','trial')"),
                     2);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM pragma_journal_mode "
                                "WHERE journal_mode = 'wal'"),
                     1);
    /* Reopening an existing cache neither fails nor re-creates it. */
    tc_db *db = open_ok(p);
    put_ok(db, 8, 8, "A", 1.0);
    tc_close(db);
    tc_close(open_ok(p));
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune"), 1);
}
END_TEST

START_TEST(test_memory_db) {
    tc_db *db = open_ok(":memory:");
    tc_key k = mkkey(4, 5);
    tc_entry e;
    put_ok(db, 4, 5, "MEM", 2.0);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.config, "MEM");
    tc_close(db);
}
END_TEST

START_TEST(test_newer_version_refused) {
    const char *p = tpath("newer.db");
    tc_close(open_ok(p));
    raw_exec(p, "PRAGMA user_version = " TC_STR(TC_SCHEMA_VERSION_NEXT));
    for (int ro = 0; ro <= 1; ro++) {
        tc_db *db = (tc_db *)1;
        char err[256] = "";
        ck_assert_int_eq(tc_open(p, ro, &db, err, sizeof err), XENT_ECACHE);
        ck_assert_ptr_null(db);
        ck_assert_msg(strstr(err, "newer") && strstr(err, p), "err: %s", err);
    }
}
END_TEST

START_TEST(test_foreign_db_refused) {
    const char *other = tpath("other.db"), *noschema = tpath("noschema.db");
    raw_exec(other, "CREATE TABLE foo(a)");
    raw_exec(noschema, "CREATE TABLE tune(gpu); PRAGMA user_version = 1");
    const char *paths[] = {other, noschema};
    for (int i = 0; i < 2; i++) {
        tc_db *db = NULL;
        char err[256] = "";
        ck_assert_int_eq(tc_open(paths[i], 0, &db, err, sizeof err), XENT_ECACHE);
        ck_assert_msg(strstr(err, "not a tune cache"), "err: %s", err);
    }
    /* Refusing must not have added our tables to someone else's file. */
    ck_assert_int_eq(raw_int(other, "SELECT count(*) FROM sqlite_master"), 1);
}
END_TEST

START_TEST(test_readonly) {
    const char *missing = tpath("missing.db"), *p = tpath("ro.db");
    tc_db *db = NULL;
    char err[256] = "";
    struct stat sb;
    ck_assert_int_eq(tc_open(missing, 1, &db, err, sizeof err), XENT_ECACHE);
    ck_assert_int_ne(err[0], '\0');
    ck_assert_int_ne(stat(missing, &sb), 0);

    db = open_ok(p);
    put_ok(db, 16, 16, "RO", 3.0);
    tc_close(db);
    ck_assert_int_eq(tc_open(p, 1, &db, err, sizeof err), XENT_OK);
    tc_key k = mkkey(16, 16);
    tc_entry e = mkentry("X", 1.0);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.config, "RO");
    ck_assert_int_eq(tc_put(db, &k, &e), XENT_ECACHE);
    ck_assert_ptr_nonnull(strstr(tc_errmsg(db), "readonly"));
    tc_close(db);
}
END_TEST

START_TEST(test_corrupt_file) {
    const char *p = tpath("random.db");
    unsigned char junk[8192];
    srand(42);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    write_file(p, junk, sizeof junk);
    for (int ro = 0; ro <= 1; ro++) {
        tc_db *db = NULL;
        char err[256] = "";
        ck_assert_int_eq(tc_open(p, ro, &db, err, sizeof err), XENT_ECACHE);
        ck_assert_ptr_null(db);
        ck_assert_msg(strstr(err, p) && strstr(err, "not a database"), "err: %s", err);
    }
}
END_TEST

START_TEST(test_truncated_file) {
    const char *p = tpath("full.db"), *t = tpath("trunc.db");
    tc_db *db = open_ok(p);
    for (int i = 1; i <= 300; i++) put_ok(db, i, 1000 + i, "VEC=4 TPR=32 a fairly long config string", i);
    tc_close(db);

    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    char head[1000];
    ck_assert_uint_eq(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    write_file(t, head, sizeof head);

    char err[256] = "";
    ck_assert_int_eq(tc_open(t, 0, &db, err, sizeof err), XENT_ECACHE);
    ck_assert_msg(strstr(err, t) && strlen(err) > strlen(t) + 16, "err: %s", err);
}
END_TEST

START_TEST(test_open_bad_args) {
    tc_db *db = NULL;
    char err[128] = "";
    ck_assert_int_eq(tc_open(NULL, 0, &db, err, sizeof err), XENT_EINVAL);
    ck_assert_int_ne(err[0], '\0');
    ck_assert_int_eq(tc_open("", 0, &db, NULL, 0), XENT_EINVAL);
    ck_assert_int_eq(tc_open(":memory:", 0, NULL, NULL, 0), XENT_EINVAL);
}
END_TEST

/* A file damaged past its first pages opens as it did before the damage
 * unless opening reads the winners: it is refused there, with the reason, so
 * the runtime's note (docs/cache.md) says why the cache was skipped instead
 * of every lookup quietly failing. */
START_TEST(test_damaged_mid_file) {
    const char *p = tpath("mid.db");
    tc_db *db = open_ok(p);
    for (int i = 1; i <= 600; i++) {
        tc_key k = mkkey(i, 4096);
        tc_entry e = mkentry(CFG, i);
        snprintf(e.settings, sizeof e.settings, "budget=30 reps=50 row %d of a cache long enough for many pages", i);
        ck_assert_int_eq(tc_put(db, &k, &e), XENT_OK);
    }
    tc_close(db);
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_gt(st.st_size, 16 * 4096);
    char junk[3 * 4096];
    srand(5);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)rand();
    FILE *f = fopen(p, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, st.st_size / 4096 / 2 * 4096, SEEK_SET), 0);
    ck_assert_uint_eq(fwrite(junk, 1, sizeof junk, f), sizeof junk);
    ck_assert_int_eq(fclose(f), 0);
    for (int ro = 1; ro >= 0; ro--) {
        char err[512] = "";
        db = NULL;
        ck_assert_int_eq(tc_open(p, ro, &db, err, sizeof err), XENT_ECACHE);
        ck_assert_ptr_null(db);
        ck_assert_msg(strstr(err, p) && strstr(err, "malformed"), "err: %s", err);
    }
}
END_TEST

/* ---- put / get --------------------------------------------------------- */

START_TEST(test_upsert) {
    tc_db *db = open_ok(tpath("up.db"));
    tc_key k = mkkey(32768, 4096);
    tc_entry a = mkentry("VEC=4 TPR=32", 130.5), b = mkentry("VEC=8 TPR=64", 118.25), got;
    snprintf(b.settings, sizeof b.settings, "budget=60");
    b.when = 1764700000;
    ck_assert_int_eq(tc_put(db, &k, &a), XENT_OK);
    ck_assert_int_eq(tc_put(db, &k, &b), XENT_OK);
    ck_assert_int_eq(tc_get(db, &k, &got), XENT_OK);
    ck_assert_str_eq(got.config, "VEC=8 TPR=64");
    ck_assert_double_eq(got.us, 118.25);
    ck_assert_double_eq(got.gbps, b.gbps);
    ck_assert_int_eq(got.when, 1764700000);
    ck_assert_str_eq(got.settings, "budget=60");
    tc_close(db);
    ck_assert_int_eq(raw_int(tpath("up.db"), "SELECT count(*) FROM tune"), 1);
}
END_TEST

START_TEST(test_get_miss) {
    tc_db *db = open_ok(":memory:");
    tc_key k = mkkey(100, 100);
    tc_entry e = mkentry("UNTOUCHED", 1.0);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_ENOTFOUND);
    ck_assert_str_eq(e.config, "UNTOUCHED");
    ck_assert_int_ne(tc_errmsg(db)[0], '\0');
    put_ok(db, 100, 101, "NEAR", 1.0);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_ENOTFOUND);
    tc_close(db);
}
END_TEST

/* Each variant changes one key field; none may find the base entry. */
START_TEST(test_key_fields_distinguish) {
    tc_db *db = open_ok(":memory:");
    tc_key base = mkkey(4096, 32000), v[11];
    tc_entry e;
    put_key(db, &base, "BASE");
    for (int i = 0; i < 11; i++) v[i] = base;
    strcpy(v[0].gpu, "h100");
    v[1].arch = 80;
    v[2].sm_count = 114;
    strcpy(v[3].family, "xent_bwd");
    v[4].logits = XENT_BF16;
    v[5].targets = XENT_I32;
    v[6].reduction = 0;
    v[7].options = TC_OPT_SMOOTHING;
    v[8].n = 4097;
    v[9].c = 32001;
    v[10].template_version = 2;
    for (int i = 0; i < 11; i++) ck_assert_msg(tc_get(db, &v[i], &e) == XENT_ENOTFOUND, "variant %d matched", i);
    /* And each variant is its own key: storing them all gives 12 rows. */
    for (int i = 0; i < 11; i++) put_key(db, &v[i], "V");
    ck_assert_int_eq(tc_get(db, &base, &e), XENT_OK);
    ck_assert_str_eq(e.config, "BASE");
    tc_close(db);
}
END_TEST

START_TEST(test_put_invalid) {
    tc_db *db = open_ok(":memory:");
    tc_key k = mkkey(1, 2);
    tc_entry e = mkentry("X", NAN);
    ck_assert_int_eq(tc_put(db, &k, &e), XENT_EINVAL);
    e.us = INFINITY;
    ck_assert_int_eq(tc_put(db, &k, &e), XENT_EINVAL);
    e.us = 1.0;
    ck_assert_int_eq(tc_put(db, NULL, &e), XENT_EINVAL);
    ck_assert_int_eq(tc_put(db, &k, NULL), XENT_EINVAL);
    memset(k.gpu, 'x', sizeof k.gpu);
    ck_assert_int_eq(tc_put(db, &k, &e), XENT_EINVAL);
    ck_assert_int_eq(tc_put(NULL, &k, &e), XENT_EINVAL);
    tc_close(db);
}
END_TEST

/* ---- nearest ------------------------------------------------------------- */

START_TEST(test_nearest) {
    tc_db *db = open_ok(":memory:");
    put_ok(db, 1024, 1024, "S1", 1.0);
    put_ok(db, 32768, 4096, "S2", 2.0);
    put_ok(db, 4096, 32000, "S3", 3.0);
    put_ok(db, 1048576, 10, "S4", 4.0);
    tc_key bf = mkkey(30000, 4000);
    bf.logits = XENT_BF16; /* sits exactly at the query shape, other dtype */
    put_key(db, &bf, "BF16");

    struct {
        int64_t n, c;
        const char *want;
        int64_t wn, wc;
    } cases[] = {
        {30000, 4000, "S2", 32768, 4096}, {4096, 30000, "S3", 4096, 32000}, {2000, 800, "S1", 1024, 1024},
        {500000, 16, "S4", 1048576, 10},  {1, 2, "S1", 1024, 1024},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tc_key k = mkkey(cases[i].n, cases[i].c);
        tc_entry e;
        int64_t n = 0, c = 0;
        ck_assert_int_eq(tc_nearest(db, &k, &e, &n, &c), XENT_OK);
        ck_assert_msg(strcmp(e.config, cases[i].want) == 0, "case %zu got %s", i, e.config);
        ck_assert_int_eq(n, cases[i].wn);
        ck_assert_int_eq(c, cases[i].wc);
    }
    /* Only the bf16 row qualifies for a bf16 query, however far it is. */
    tc_key q = mkkey(8, 8);
    tc_entry e;
    q.logits = XENT_BF16;
    ck_assert_int_eq(tc_nearest(db, &q, &e, NULL, NULL), XENT_OK);
    ck_assert_str_eq(e.config, "BF16");
    q.logits = XENT_F16;
    ck_assert_int_eq(tc_nearest(db, &q, &e, NULL, NULL), XENT_ENOTFOUND);
    strcpy(q.gpu, "a100");
    q.logits = XENT_F32;
    ck_assert_int_eq(tc_nearest(db, &q, &e, NULL, NULL), XENT_ENOTFOUND);
    q = mkkey(0, 8);
    ck_assert_int_eq(tc_nearest(db, &q, &e, NULL, NULL), XENT_EINVAL);
    tc_close(db);
}
END_TEST

START_TEST(test_nearest_ties) {
    tc_db *db = open_ok(":memory:");
    tc_key k = mkkey(2000, 100);
    tc_entry e;
    int64_t n, c;
    /* Inserted larger-first so that insertion order cannot explain the result. */
    put_ok(db, 4000, 100, "BIG_N", 1.0);
    put_ok(db, 1000, 100, "SMALL_N", 1.0);
    ck_assert_int_eq(tc_nearest(db, &k, &e, &n, &c), XENT_OK);
    ck_assert_str_eq(e.config, "SMALL_N");
    ck_assert_int_eq(n, 1000);

    tc_close(db);
    db = open_ok(":memory:");
    k = mkkey(100, 2000);
    put_ok(db, 100, 4000, "BIG_C", 1.0);
    put_ok(db, 100, 1000, "SMALL_C", 1.0);
    ck_assert_int_eq(tc_nearest(db, &k, &e, &n, &c), XENT_OK);
    ck_assert_str_eq(e.config, "SMALL_C");
    ck_assert_int_eq(c, 1000);
    tc_close(db);
}
END_TEST

/* ---- lookup order -------------------------------------------------------- */

/* A lookup over user and shipped only, every fresh entry usable. */
static int lookup2(tc_db *user, tc_db *ship, const tc_key *k, tc_answer *a) {
    tc_stores st = {user, ship, NULL, "h200", NULL, NULL, NULL, 0};
    return tc_lookup(&st, k, a);
}

START_TEST(test_lookup_order) {
    tc_db *user = open_ok(":memory:"), *ship = open_ok(":memory:");
    tc_key k = mkkey(32768, 4096);
    tc_answer a;

    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_ENOTFOUND);
    ck_assert_int_eq(a.from, XENT_SOURCE_HEURISTIC);

    put_ok(user, 32000, 4000, "USER_NEAR", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_NEAREST);
    ck_assert_str_eq(a.entry.config, "USER_NEAR");
    ck_assert_str_eq(a.cache, "user");
    ck_assert_int_eq(a.n, 32000);

    put_ok(ship, 32768, 4096, "SHIP_EXACT", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_SHIPPED);
    ck_assert_str_eq(a.entry.config, "SHIP_EXACT");
    ck_assert_str_eq(a.cache, "h200");

    put_ok(user, 32768, 4096, "USER_EXACT", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_USER_DB);
    ck_assert_str_eq(a.entry.config, "USER_EXACT");
    ck_assert_str_eq(a.note, "");

    /* NULL stores are skipped. */
    ck_assert_int_eq(lookup2(NULL, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_SHIPPED);
    ck_assert_int_eq(lookup2(user, NULL, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_USER_DB);
    ck_assert_int_eq(lookup2(NULL, NULL, &k, &a), XENT_ENOTFOUND);
    ck_assert_int_eq(a.from, XENT_SOURCE_HEURISTIC);
    ck_assert_int_eq(tc_lookup(NULL, &k, &a), XENT_EINVAL);
    tc_close(user);
    tc_close(ship);
}
END_TEST

START_TEST(test_lookup_nearer_store_wins) {
    tc_db *user = open_ok(":memory:"), *ship = open_ok(":memory:");
    tc_key k = mkkey(10000, 1000);
    tc_answer a;

    put_ok(user, 100, 1000, "USER_FAR", 1.0);
    put_ok(ship, 9000, 1000, "SHIP_CLOSE", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_NEAREST);
    ck_assert_str_eq(a.entry.config, "SHIP_CLOSE");
    ck_assert_str_eq(a.cache, "h200");

    put_ok(user, 10500, 1000, "USER_CLOSER", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_NEAREST);
    ck_assert_str_eq(a.entry.config, "USER_CLOSER");

    /* Equally near: the user's own measurement is preferred. */
    put_ok(ship, 10500, 1000, "SHIP_SAME", 1.0);
    ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
    ck_assert_str_eq(a.entry.config, "USER_CLOSER");

    ck_assert_int_eq(lookup2(NULL, ship, &k, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_NEAREST);
    ck_assert_str_eq(a.entry.config, "SHIP_SAME");
    tc_close(user);
    tc_close(ship);
}
END_TEST

/* ---- stamps: entries made by another template or NVRTC ------------------ */

static void put_stamped(tc_db *db, tc_key k, const char *hash, int nvrtc, const char *config) {
    snprintf(k.template_hash, sizeof k.template_hash, "%s", hash);
    k.nvrtc = nvrtc;
    put_key(db, &k, config);
}

/* The stamps are not part of an entry's identity: a new winner (the
 * tuner's tc_put with the current stamps) replaces a stale one in place. */
START_TEST(test_stamps_replace_in_place) {
    const char *p = tpath("stamps.db");
    tc_db *db = open_ok(p);
    tc_key k = mkkey(4096, 32000);
    tc_entry e;
    put_stamped(db, k, "feedfacefeedface", 1200, "OLD");
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.template_hash, "feedfacefeedface");
    ck_assert_int_eq(e.nvrtc, 1200);
    char why[200] = "";
    ck_assert(tc_stale(&k, &e, why, sizeof why));
    ck_assert_msg(strstr(why, "feedfacefeedface") && strstr(why, STAMP) && strstr(why, "1200"), "%s", why);

    put_key(db, &k, "NEW");
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.config, "NEW");
    ck_assert_str_eq(e.template_hash, STAMP);
    ck_assert_int_eq(e.nvrtc, 1300);
    ck_assert(!tc_stale(&k, &e, NULL, 0));
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune"), 1);
}
END_TEST

/* Which stamp differs, and how a stale entry is passed over at each level. */
START_TEST(test_stale_entries_skipped) {
    struct {
        const char *hash;
        int nvrtc;
    } stale[] = {
        {"feedfacefeedface", 1300}, /* another template */
        {STAMP, 1200},              /* another NVRTC */
        {"", 0},                    /* unstamped: written before stamps existed */
    };
    for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) {
        tc_db *user = open_ok(":memory:"), *ship = open_ok(":memory:");
        tc_key k = mkkey(32768, 4096);
        tc_answer a;
        put_stamped(user, k, stale[i].hash, stale[i].nvrtc, "USER_STALE");
        put_stamped(ship, k, stale[i].hash, stale[i].nvrtc, "SHIP_STALE");
        put_stamped(ship, mkkey(30000, 4096), stale[i].hash, stale[i].nvrtc, "NEAR_STALE");
        ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_ENOTFOUND);
        ck_assert_msg(strstr(a.note, "user 32768x4096: stale") && strstr(a.note, "h200 32768x4096: stale") &&
                          strstr(a.note, "h200 30000x4096 (nearest): stale"),
                      "case %zu: %s", i, a.note);

        put_ok(ship, 32768, 4096, "SHIP_FRESH", 1.0);
        ck_assert_int_eq(lookup2(user, ship, &k, &a), XENT_OK);
        ck_assert_int_eq(a.from, XENT_SOURCE_SHIPPED);
        ck_assert_str_eq(a.entry.config, "SHIP_FRESH");
        ck_assert_msg(strstr(a.note, "user 32768x4096: stale"), "case %zu: %s", i, a.note);

        /* tc_nearest passes over the stale shape for a fresh farther one. */
        put_ok(ship, 1024, 4096, "FAR_FRESH", 1.0);
        tc_key q = mkkey(31000, 4096);
        tc_entry e;
        ck_assert_int_eq(tc_nearest(ship, &q, &e, NULL, NULL), XENT_OK);
        ck_assert_str_eq(e.config, "SHIP_FRESH");
        tc_close(user);
        tc_close(ship);
    }
}
END_TEST

/* Rejects configs that begin with "BAD", as the runtime rejects configs
 * that do not parse or fit; counts the calls. */
static int accept_good(void *arg, const tc_entry *e, int64_t n, int64_t c, char *why, size_t len) {
    (void)n, (void)c;
    ++*(int *)arg;
    if (strncmp(e->config, "BAD", 3) != 0) return 1;
    snprintf(why, len, "config does not fit: %s", e->config);
    return 0;
}

/* An entry that cannot be used falls to the next level, never further:
 * user exact, shipped exact, nearest, arch, then nothing, each skip noted. */
START_TEST(test_chain_skips_one_level_at_a_time) {
    tc_db *user = open_ok(":memory:"), *ship = open_ok(":memory:"), *arch = open_ok(":memory:");
    int calls = 0;
    tc_stores st = {user, ship, arch, "h100", "h200", accept_good, &calls, 0};
    tc_key k = mkkey(32768, 4096), sib = k;
    tc_answer a;
    strcpy(k.gpu, "h100");
    strcpy(sib.gpu, "h200");
    put_key(user, &k, "BAD_USER");
    put_key(ship, &k, "BAD_SHIP");
    tc_key near = k;
    near.n = 16384;
    put_key(user, &near, "BAD_NEAR");
    put_key(arch, &sib, "ARCH_EXACT");

    struct {
        const char *fix;
        xent_source from;
        const char *want, *cache, *noted;
    } steps[] = {
        {NULL, XENT_SOURCE_ARCH, "ARCH_EXACT", "h200",
         "user 32768x4096: config does not fit: BAD_USER; h100 32768x4096: config does not fit: BAD_SHIP; "
         "user 16384x4096 (nearest): config does not fit: BAD_NEAR"},
        {"near", XENT_SOURCE_NEAREST, "NEAR", "user", "h100 32768x4096: config does not fit: BAD_SHIP"},
        {"ship", XENT_SOURCE_SHIPPED, "SHIP", "h100", "user 32768x4096: config does not fit: BAD_USER"},
        {"user", XENT_SOURCE_USER_DB, "USER", "user", NULL},
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (steps[i].fix && !strcmp(steps[i].fix, "near")) put_key(user, &near, "NEAR");
        if (steps[i].fix && !strcmp(steps[i].fix, "ship")) put_key(ship, &k, "SHIP");
        if (steps[i].fix && !strcmp(steps[i].fix, "user")) put_key(user, &k, "USER");
        ck_assert_int_eq(tc_lookup(&st, &k, &a), XENT_OK);
        ck_assert_msg(a.from == steps[i].from && !strcmp(a.entry.config, steps[i].want), "step %zu: from %d config %s",
                      i, a.from, a.entry.config);
        ck_assert_str_eq(a.cache, steps[i].cache);
        if (steps[i].noted)
            ck_assert_msg(strstr(a.note, steps[i].noted), "step %zu: note '%s'", i, a.note);
        else
            ck_assert_str_eq(a.note, "");
    }
    /* And below the arch level there is nothing: the caller's heuristic. */
    put_key(user, &k, "BAD_USER");
    put_key(ship, &k, "BAD_SHIP");
    put_key(user, &near, "BAD_NEAR");
    put_key(arch, &sib, "BAD_ARCH");
    calls = 0;
    ck_assert_int_eq(tc_lookup(&st, &k, &a), XENT_ENOTFOUND);
    ck_assert_int_eq(a.from, XENT_SOURCE_HEURISTIC);
    ck_assert_int_eq(calls, 4);
    ck_assert_msg(strstr(a.note, "h200 32768x4096 (arch): config does not fit: BAD_ARCH"), "%s", a.note);
    tc_close(user);
    tc_close(ship);
    tc_close(arch);
}
END_TEST

/* The arch level relaxes GPU and SM count, nothing else: the exact shape
 * first, then the nearest shape, then the nearest SM count. */
START_TEST(test_arch_level_relaxes_gpu_and_sms) {
    tc_db *arch = open_ok(":memory:");
    tc_stores st = {NULL, NULL, arch, "h100", "h200", NULL, NULL, 0};
    tc_key q = mkkey(32768, 4096), r;
    tc_answer a;
    strcpy(q.gpu, "h100");
    q.sm_count = 114;
    r = mkkey(32768, 4096);
    put_key(arch, &r, "H200_EXACT");
    r.sm_count = 120;
    put_key(arch, &r, "H200_120_EXACT");
    r = mkkey(30000, 4096);
    put_key(arch, &r, "H200_NEAR");
    r = mkkey(32768, 4096);
    r.logits = XENT_BF16;
    put_key(arch, &r, "BF16");
    r = mkkey(32768, 4096);
    r.arch = 100;
    put_key(arch, &r, "OTHER_ARCH");

    ck_assert_int_eq(tc_lookup(&st, &q, &a), XENT_OK);
    ck_assert_int_eq(a.from, XENT_SOURCE_ARCH);
    ck_assert_str_eq(a.entry.config, "H200_120_EXACT");
    ck_assert_str_eq(a.cache, "h200");

    q.n = 31000; /* nearer 30000 than 32768 */
    ck_assert_int_eq(tc_lookup(&st, &q, &a), XENT_OK);
    ck_assert_str_eq(a.entry.config, "H200_NEAR");
    ck_assert_int_eq(a.n, 30000);

    q.arch = 89; /* no entry of this architecture */
    ck_assert_int_eq(tc_lookup(&st, &q, &a), XENT_ENOTFOUND);
    tc_close(arch);
}
END_TEST

/* ---- schema 1 files and text --------------------------------------------- */

#define V1_SCHEMA                                                                                                      \
    "CREATE TABLE tune(gpu TEXT NOT NULL, arch INTEGER NOT NULL, sm_count INTEGER NOT NULL, "                          \
    "family TEXT NOT NULL, logits INTEGER NOT NULL, targets INTEGER NOT NULL, reduction INTEGER "                      \
    "NOT NULL, options INTEGER NOT NULL, n INTEGER NOT NULL, c INTEGER NOT NULL, "                                     \
    "template_version INTEGER NOT NULL, config TEXT NOT NULL, us REAL NOT NULL, gbps REAL NOT "                        \
    "NULL, measured_at INTEGER NOT NULL, settings TEXT NOT NULL DEFAULT '', PRIMARY KEY(gpu, "                         \
    "arch, sm_count, family, logits, targets, reduction, options, n, c, template_version));"                           \
    "CREATE TABLE trial(id INTEGER PRIMARY KEY, gpu TEXT NOT NULL, arch INTEGER NOT NULL, "                            \
    "sm_count INTEGER NOT NULL, family TEXT NOT NULL, logits INTEGER NOT NULL, targets INTEGER "                       \
    "NOT NULL, reduction INTEGER NOT NULL, options INTEGER NOT NULL, n INTEGER NOT NULL, c "                           \
    "INTEGER NOT NULL, template_version INTEGER NOT NULL, config TEXT NOT NULL, us REAL, gbps "                        \
    "REAL, status TEXT NOT NULL, measured_at INTEGER NOT NULL);"                                                       \
    "PRAGMA user_version = 1;"

/* What a schema 1 export line looks like: no stamps. */
#define INS_V1(n, note)                                                                                                \
    "INSERT INTO tune(gpu, arch, sm_count, family, logits, targets, reduction,"                                        \
    " options, n, c, template_version, config, us, gbps, measured_at, settings) VALUES('h200',"                        \
    " 90, 132, 'xent_fwd', 0, 1, 1, 0, " #n ", 64, 1, '" CFG "', 1.5, 2.5, 1700000000, '" note "');\n"

/* A schema 1 file is read as unstamped read-only (the runtime's way, which
 * cannot write it) and migrated when opened for writing. */
START_TEST(test_schema1_file) {
    const char *p = tpath("v1.db");
    raw_exec(p, V1_SCHEMA INS_V1(10, "OLD"));
    tc_key k = mkkey(10, 64);
    k.logits = 0, k.targets = 1, k.reduction = 1;
    tc_entry e;
    tc_db *db = NULL;
    char err[256] = "";
    ck_assert_msg(tc_open(p, 1, &db, err, sizeof err) == XENT_OK, "%s", err);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.settings, "OLD");
    ck_assert_str_eq(e.template_hash, "");
    ck_assert(tc_stale(&k, &e, NULL, 0));
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "PRAGMA user_version"), 1);

    db = open_ok(p);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_str_eq(e.settings, "OLD");
    ck_assert_int_eq(e.nvrtc, 0);
    ck_assert_int_eq(tc_add_trial(db, &k, "T", 1.0, 1.0, "ok"), XENT_OK);
    put_key(db, &k, "NEW");
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "PRAGMA user_version"), TC_SCHEMA_VERSION);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune WHERE template_hash = '" STAMP "'"), 1);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial WHERE nvrtc = 1300"), 1);
}
END_TEST

static int hash_of(const char *family, char *buf, size_t len) {
    if (strcmp(family, "xent_fwd")) return XENT_EINVAL;
    snprintf(buf, len, "%s", STAMP);
    return XENT_OK;
}

/* Old export lines still import, unstamped; tc_stamp then stamps the
 * families it knows, once, and nothing stamped already. */
START_TEST(test_schema1_text_and_stamp) {
    tc_db *db = open_ok(":memory:");
    int rows = -1;
    ck_assert_int_eq(
        tc_import(db, "-- xent tune cache export, schema 1, gpu h200\n" INS_V1(5, "X") INS_V1(6, "Y"), &rows), XENT_OK);
    ck_assert_int_eq(rows, 2);
    tc_key k = mkkey(5, 64), other = mkkey(7, 64);
    k.logits = 0, k.targets = 1, k.reduction = 1;
    strcpy(other.family, "xent_new");
    put_stamped(db, other, "", 0, "UNKNOWN_FAMILY");
    put_stamped(db, mkkey(8, 64), "feedfacefeedface", 1200, "STAMPED");
    tc_entry e;
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert(tc_stale(&k, &e, NULL, 0));
    ck_assert_int_eq(tc_stamp(db, hash_of, 1300, &rows), XENT_OK);
    ck_assert_int_eq(rows, 2);
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert(!tc_stale(&k, &e, NULL, 0));
    tc_key s8 = mkkey(8, 64);
    ck_assert_int_eq(tc_get(db, &s8, &e), XENT_OK);
    ck_assert_str_eq(e.template_hash, "feedfacefeedface");
    ck_assert_int_eq(tc_get(db, &other, &e), XENT_OK);
    ck_assert_str_eq(e.template_hash, "");
    ck_assert_int_eq(tc_stamp(db, hash_of, 1300, &rows), XENT_OK);
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(tc_stamp(db, NULL, 1300, &rows), XENT_EINVAL);
    tc_close(db);
}
END_TEST

/* ---- trials and foreach ------------------------------------------------- */

START_TEST(test_trials_counted) {
    const char *p = tpath("trials.db");
    tc_db *db = open_ok(p);
    tc_key k = mkkey(64, 262144);
    const char *st[] = {"ok", "ok", "wrong", "compile-error", "pruned", "ok"};
    for (int i = 0; i < 6; i++) {
        double us = strcmp(st[i], "compile-error") ? 10.0 + i : NAN;
        ck_assert_int_eq(tc_add_trial(db, &k, "VEC=2", us, 100.0, st[i]), XENT_OK);
    }
    ck_assert_int_eq(tc_add_trial(db, &k, NULL, 1.0, 1.0, "ok"), XENT_EINVAL);
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial"), 6);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial WHERE status='ok'"), 3);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial WHERE us IS NULL"), 1);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial WHERE c = 262144 AND "
                                "gpu = 'h200' AND measured_at > 1700000000"),
                     6);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune"), 0);
}
END_TEST

typedef struct {
    int count;
    int64_t last_n;
    int sorted;
    int stop_at;
} visit_state;

static int visit(void *arg, const tc_key *k, const tc_entry *e) {
    visit_state *v = arg;
    (void)e;
    if (k->n < v->last_n) v->sorted = 0;
    v->last_n = k->n;
    return ++v->count == v->stop_at ? 99 : 0;
}

START_TEST(test_foreach) {
    tc_db *db = open_ok(":memory:");
    int64_t ns[] = {500, 3, 70000, 12, 9};
    for (int i = 0; i < 5; i++) put_ok(db, ns[i], 64, "F", 1.0);
    tc_key other = mkkey(1, 1);
    strcpy(other.gpu, "h100");
    put_key(db, &other, "OTHER");

    visit_state v = {0, 0, 1, -1};
    ck_assert_int_eq(tc_foreach(db, "h200", visit, &v), XENT_OK);
    ck_assert_int_eq(v.count, 5);
    ck_assert_int_eq(v.sorted, 1);
    visit_state all = {0, 0, 1, -1};
    ck_assert_int_eq(tc_foreach(db, NULL, visit, &all), XENT_OK);
    ck_assert_int_eq(all.count, 6);
    visit_state stop = {0, 0, 1, 2};
    ck_assert_int_eq(tc_foreach(db, NULL, visit, &stop), 99);
    ck_assert_int_eq(stop.count, 2);
    tc_close(db);
}
END_TEST

/* ---- export / import ------------------------------------------------------ */

/* Like a measurement: a few significant digits, e.g. 118.253 µs, 4512.77 GB/s. */
static double measured_double(void) { return (double)(rand() % 10000000) / 1000.0; }

/* Any mantissa, over the range timings and bandwidths can take. */
static double random_double(void) {
    double m = 1.0 + (double)rand() / RAND_MAX + (double)rand() / RAND_MAX / 1e9;
    return ldexp(m, rand() % 60 - 30);
}

static void fill_awkward(tc_db *db) {
    /* import reads back only configs the library parses, so the awkward text is in settings */
    const char *configs[] = {CFG, "VEC=2 TPR=1 BLOCK=128 ITEMS=8 PASSES=2 CACHE=1 TILE=0 SPLIT=1 PERSIST=0",
                             "VEC=4 TPR=256 BLOCK=256 ITEMS=4 PASSES=1 CACHE=2 TILE=0 SPLIT=4 PERSIST=3"};
    const char *notes[] = {"it's \"quoted\"", "semi;colon -- not a comment", "/* not a comment */", "ünïcødé ✓", ""};
    srand(7);
    for (int i = 0; i < 200; i++) {
        tc_key k = mkkey(1 + rand() % 1000000, 2 + rand() % 262144);
        k.logits = i % 3;
        if (i % 5 == 0) strcpy(k.gpu, "h100");
        tc_entry e = mkentry(configs[i % 3], measured_double());
        e.gbps = measured_double();
        e.when = 1700000000 + i;
        snprintf(e.settings, sizeof e.settings, "budget=%d note='x' %s", i, notes[i % 5]);
        ck_assert_int_eq(tc_put(db, &k, &e), XENT_OK);
    }
}

static int count_rows(tc_db *db) {
    visit_state v = {0, 0, 1, -1};
    ck_assert_int_eq(tc_foreach(db, NULL, visit, &v), XENT_OK);
    return v.count;
}

typedef struct {
    tc_db *other;
    int seen, differ;
} same_ctx;

static int same_as(void *arg, const tc_key *k, const tc_entry *e) {
    same_ctx *x = arg;
    tc_entry o;
    x->seen++;
    if (tc_get(x->other, k, &o) != XENT_OK || memcmp(&o.us, &e->us, sizeof o.us) ||
        memcmp(&o.gbps, &e->gbps, sizeof o.gbps) || o.when != e->when || strcmp(o.config, e->config) ||
        strcmp(o.settings, e->settings))
        x->differ++;
    return 0;
}

START_TEST(test_export_import_roundtrip) {
    tc_db *a = open_ok(tpath("a.db")), *b = open_ok(tpath("b.db"));
    fill_awkward(a);
    char *ea = export_str(a, NULL);
    ck_assert_msg(strncmp(ea, "-- xent tune cache export, schema 2, gpu all\n", 45) == 0, "header: %.60s", ea);
    ck_assert_ptr_nonnull(strstr(ea, "\nINSERT OR REPLACE INTO tune("));

    int rows = -1;
    ck_assert_msg(tc_import(b, ea, &rows) == XENT_OK, "import: %s", tc_errmsg(b));
    ck_assert_int_eq(rows, 200);
    char *eb = export_str(b, NULL);
    assert_same_text(ea, eb);

    /* Importing the same text again replaces, it does not duplicate or fail. */
    ck_assert_int_eq(tc_import(b, ea, &rows), XENT_OK);
    ck_assert_int_eq(count_rows(b), 200);
    char *eb2 = export_str(b, NULL);
    assert_same_text(ea, eb2);

    /* Values survive bit for bit, not just as printed. */
    same_ctx same = {b, 0, 0};
    ck_assert_int_eq(tc_foreach(a, NULL, same_as, &same), XENT_OK);
    ck_assert_int_eq(same.seen, 200);
    ck_assert_int_eq(same.differ, 0);
    free(ea);
    free(eb);
    free(eb2);
    tc_close(a);
    tc_close(b);
}
END_TEST

/* Whether this SQLite reads 17 significant digits back exactly. SQLite 3.40
 * does so through x87 long double; valgrind runs that at double precision,
 * where about one value in eight comes back an ulp off. */
static int sqlite_parses_exactly(void) {
    sqlite3 *s;
    sqlite3_stmt *st;
    char sql[64];
    int exact = 1;
    ck_assert_int_eq(sqlite3_open(":memory:", &s), SQLITE_OK);
    srand(3);
    for (int i = 0; i < 200 && exact; i++) {
        double v = random_double();
        snprintf(sql, sizeof sql, "SELECT %.17g", v);
        ck_assert_int_eq(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        exact = sqlite3_column_double(st, 0) == v;
        sqlite3_finalize(st);
    }
    sqlite3_close(s);
    return exact;
}

static int ulps_apart(double a, double b) { return a == b ? 0 : nextafter(a, b) == b ? 1 : 2; }

/* Full-precision doubles: bit-exact where SQLite parses exactly (natively),
 * else (under valgrind) within one ulp, so this never silently passes. */
START_TEST(test_export_exact_doubles) {
    tc_db *a = open_ok(":memory:"), *b = open_ok(":memory:");
    int exact = sqlite_parses_exactly(), worst = 0;
    srand(11);
    for (int i = 0; i < 300; i++) {
        tc_key k = mkkey(i + 1, 64);
        tc_entry e = mkentry(CFG, random_double());
        e.gbps = random_double();
        ck_assert_int_eq(tc_put(a, &k, &e), XENT_OK);
    }
    char *text = export_str(a, NULL);
    ck_assert_int_eq(tc_import(b, text, NULL), XENT_OK);
    for (int i = 0; i < 300; i++) {
        tc_key k = mkkey(i + 1, 64);
        tc_entry ea, eb;
        ck_assert_int_eq(tc_get(a, &k, &ea), XENT_OK);
        ck_assert_int_eq(tc_get(b, &k, &eb), XENT_OK);
        int d = ulps_apart(ea.us, eb.us), g = ulps_apart(ea.gbps, eb.gbps);
        worst = d > worst ? d : g > worst ? g : worst;
    }
    int allowed = exact ? 0 : 1;
    ck_assert_int_le(worst, allowed);
    free(text);
    tc_close(a);
    tc_close(b);
}
END_TEST

START_TEST(test_export_gpu_filter) {
    tc_db *a = open_ok(":memory:"), *b = open_ok(":memory:");
    fill_awkward(a);
    char *e = export_str(a, "h100");
    ck_assert_msg(strncmp(e, "-- xent tune cache export, schema 2, gpu h100\n", 46) == 0, "header: %.60s", e);
    ck_assert_ptr_null(strstr(e, "'h200'"));
    int rows;
    ck_assert_int_eq(tc_import(b, e, &rows), XENT_OK);
    ck_assert_int_eq(rows, 40);
    ck_assert_int_eq(count_rows(b), 40);
    ck_assert_int_eq(tc_export(a, "x\nDROP TABLE tune;", stdout), XENT_EINVAL);

    /* A measured value is written as measured, not as 118.25299999999999. */
    tc_db *m = open_ok(":memory:");
    put_ok(m, 7, 7, CFG, 118.253);
    char *text = export_str(m, NULL);
    ck_assert_msg(strstr(text, ", 118.253, 4118.253, "), "export: %s", text);
    free(text);
    tc_close(m);
    free(e);
    tc_close(a);
    tc_close(b);
}
END_TEST

#define INS_COLS                                                                                                       \
    "INSERT OR REPLACE INTO tune(gpu, arch, sm_count, family, logits, targets, reduction,"                             \
    " options, n, c, template_version, config, us, gbps, measured_at, settings) "
/* A good row; `note` (its settings) tells rows apart. */
#define INS(n, note)                                                                                                   \
    INS_COLS "VALUES('h200', 90, 132, 'xent_fwd', 0, 1, 1, 0, " #n ", 64, 1, '" CFG "', 1.5, 2.5, 1700000000, '" note  \
             "');\n"
/* A row for the key of the store's EXISTING entry (1x1), given as SQL values
 * from the gpu to the logits, then from n to the settings. */
#define ROW(head, tail) INS_COLS "VALUES(" head ", 1, 1, 0, " tail ");\n"
#define GOOD_HEAD "'h200', 90, 132, 'xent_fwd', 0"
#define GOOD_TAIL(cfg, us, gbps) "1, 1, 1, " cfg ", " us ", " gbps ", 1700000000, ''"

/* Each bad text carries good inserts before the bad part, so a missing
 * rollback would show up as extra rows. */
static void assert_import_refused(const char *text, const char *want_in_err) {
    const char *p = tpath("imp.db");
    tc_db *db = open_ok(p);
    put_ok(db, 1, 1, CFG, 1.0);
    char *before = export_str(db, NULL);
    int rows = -1;
    ck_assert_int_eq(tc_import(db, text, &rows), XENT_ECACHE);
    ck_assert_int_eq(rows, 0);
    ck_assert_msg(strstr(tc_errmsg(db), want_in_err), "want '%s' in: %s", want_in_err, tc_errmsg(db));
    char *after = export_str(db, NULL);
    assert_same_text(before, after);
    /* The store is still writable: no transaction or authorizer left behind. */
    put_ok(db, 2, 2, CFG, 1.0);
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune"), 2);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial"), 0);
    ck_assert_int_eq(raw_int(p, "PRAGMA user_version"), TC_SCHEMA_VERSION);
    free(before);
    free(after);
    unlink(p);
}

START_TEST(test_import_malformed) {
    assert_import_refused("-- header\n" INS(10, "A") INS(11, "B") "INSERT INTO tune VALUES(('h200';\n" INS(12, "C"),
                          "statement 3");
    /* A constraint failure (NULL config) at statement 3 rolls back too. */
    assert_import_refused(INS(10, "A") INS(11, "B") "INSERT INTO tune(gpu) VALUES('h200');\n", "statement 3");
}
END_TEST

START_TEST(test_import_refuses_other_statements) {
    const char *bad[] = {
        "DROP TABLE tune;",
        "DELETE FROM tune;",
        "INSERT INTO trial(gpu, arch, sm_count, family, logits, targets, reduction, options,"
        " n, c, template_version, config, status, measured_at)"
        " VALUES('h200', 90, 132, 'f', 0, 0, 0, 0, 1, 1, 1, 'X', 'ok', 1);",
        "UPDATE tune SET config = 'EVIL';",
        "PRAGMA user_version = 7;",
        "ATTACH DATABASE '/tmp/evil.db' AS evil;",
        "CREATE TABLE evil(a);",
        "CREATE TEMP TRIGGER t AFTER INSERT ON tune BEGIN DELETE FROM tune; END;",
        "INSERT INTO tune SELECT * FROM tune;",
        "INSERT INTO tune(gpu, arch, sm_count, family, logits, targets, reduction, options,"
        " n, c, template_version, config, us, gbps, measured_at, settings)"
        " VALUES('h200', 90, 132, 'f', 0, 0, 0, 0, 1, 1, 1, hex(randomblob(4)), 1, 1, 1, '');",
        "SELECT 1;",
        "COMMIT;",
        "VACUUM;",
    };
    char text[2048];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s%s", INS(10, "A"), bad[i], INS(11, "B"));
        assert_import_refused(text, "statement 2");
    }
}
END_TEST

START_TEST(test_import_blank_and_comments) {
    tc_db *db = open_ok(":memory:");
    int rows = -1;
    ck_assert_int_eq(tc_import(db, "", &rows), XENT_OK);
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(tc_import(db, "-- nothing\n\n  /* block */ \n", &rows), XENT_OK);
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(tc_import(db, "-- two\n" INS(5, "X") "\n-- mid\n" INS(6, "Y") "-- end", &rows), XENT_OK);
    ck_assert_int_eq(rows, 2);
    ck_assert_int_eq(count_rows(db), 2);
    ck_assert_int_eq(tc_import(db, NULL, &rows), XENT_EINVAL);
    tc_close(db);
}
END_TEST

START_TEST(test_import_file) {
    const char *sql = tpath("ship.sql");
    tc_db *a = open_ok(":memory:"), *b = open_ok(":memory:");
    fill_awkward(a);
    FILE *f = fopen(sql, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(tc_export(a, NULL, f), XENT_OK);
    fclose(f);
    int rows = 0;
    ck_assert_int_eq(tc_import_file(b, sql, &rows), XENT_OK);
    ck_assert_int_eq(rows, 200);
    char *ea = export_str(a, NULL), *eb = export_str(b, NULL);
    assert_same_text(ea, eb);
    free(ea);
    free(eb);

    ck_assert_int_eq(tc_import_file(b, tpath("nope.sql"), &rows), XENT_ECACHE);
    ck_assert_ptr_nonnull(strstr(tc_errmsg(b), "nope.sql"));
    static const char with_nul[] = INS(1, "A") "\0"
                                               "DROP TABLE tune;";
    write_file(sql, with_nul, sizeof with_nul - 1);
    ck_assert_int_eq(tc_import_file(b, sql, &rows), XENT_ECACHE);
    ck_assert_int_eq(count_rows(b), 200);
    tc_close(a);
    tc_close(b);
}
END_TEST

/* Rows are read back as the runtime reads them: each value of the right type
 * and range, the config parsed and legal for the row's dtype. A row that is
 * not replaces nothing. */
START_TEST(test_import_validates_values) {
    static char long_config[5100];
    memset(long_config, 0, sizeof long_config);
    strcpy(long_config, "'" CFG);
    for (size_t i = strlen(long_config); i < 5000; i++) long_config[i] = ' ';
    strcat(long_config, "'");
    static char long_row[6000];
    snprintf(long_row, sizeof long_row, ROW(GOOD_HEAD, "1, 1, 1, %s, 1.5, 2.5, 1700000000, ''"), long_config);
    const struct {
        const char *row, *why;
    } bad[] = {
        {ROW(GOOD_HEAD, GOOD_TAIL("'this is not a config'", "1.5", "2.5")), "config"},
        {ROW(GOOD_HEAD,
             GOOD_TAIL("'VEC=8 TPR=32 BLOCK=128 ITEMS=8 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=1'", "1.5", "2.5")),
         "not legal"},
        {ROW(GOOD_HEAD, GOOD_TAIL("'" CFG "'", "-1e308", "2.5")), "us"},
        {ROW(GOOD_HEAD, GOOD_TAIL("'" CFG "'", "1e999", "2.5")), "us"},
        {ROW(GOOD_HEAD, GOOD_TAIL("'" CFG "'", "1.5", "'abc'")), "gbps"},
        {long_row, "config"},
        {ROW(GOOD_HEAD, "'abc', 1, 1, '" CFG "', 1.5, 2.5, 1700000000, ''"), "n"},
        {ROW(GOOD_HEAD, "0, 1, 1, '" CFG "', 1.5, 2.5, 1700000000, ''"), "n"},
        {ROW(GOOD_HEAD, "1, 2147483648, 1, '" CFG "', 1.5, 2.5, 1700000000, ''"), "c"},
        {ROW(GOOD_HEAD, "1, 1, 1, '" CFG "', 1.5, 2.5, 'soon', ''"), "measured_at"},
        {ROW("'h200', 90, 132, 'xent_fwd', 7", GOOD_TAIL("'" CFG "'", "1.5", "2.5")), "logits"},
        {ROW("'', 90, 132, 'xent_fwd', 0", GOOD_TAIL("'" CFG "'", "1.5", "2.5")), "gpu"},
        {ROW("'h200', 90.5, 132, 'xent_fwd', 0", GOOD_TAIL("'" CFG "'", "1.5", "2.5")), "arch"},
        {ROW("'h200', 90, 132, x'00', 0", GOOD_TAIL("'" CFG "'", "1.5", "2.5")), "family"},
    };
    static char text[8192];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "%s%s%s", INS(10, "A"), bad[i].row, INS(11, "B"));
        assert_import_refused(text, bad[i].why);
    }
    /* the same row with good values replaces the winner */
    tc_db *db = open_ok(":memory:");
    put_ok(db, 1, 1, CFG, 1.0);
    ck_assert_int_eq(tc_import(db, ROW(GOOD_HEAD, GOOD_TAIL("'" CFG "'", "0.5", "2.5")), NULL), XENT_OK);
    tc_key k = mkkey(1, 1);
    tc_entry e;
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert(e.us == 0.5);
    tc_close(db);
}
END_TEST

/* A config is judged by its family's rules: two bf16 chunks of 512 threads
 * are legal for xent_grad (PREFETCH) and not for xent_fwd. */
#define GRAD_CFG "'VEC=8 TPR=512 BLOCK=512 ITEMS=4 PASSES=1 CACHE=0 TILE=0 SPLIT=1 PERSIST=0 PREFETCH=1'"
START_TEST(test_import_family_rules) {
    tc_db *db = open_ok(":memory:");
    ck_assert_int_eq(
        tc_import(db, ROW("'h200', 90, 132, 'xent_grad/fused', 2", GOOD_TAIL(GRAD_CFG, "1.5", "2.5")), NULL), XENT_OK);
    tc_close(db);
    assert_import_refused(ROW("'h200', 90, 132, 'xent_fwd', 2", GOOD_TAIL(GRAD_CFG, "1.5", "2.5")), "not legal");
}
END_TEST

/* A small text whose statement runs for ever is stopped, and changes nothing. */
START_TEST(test_import_bounded_work) {
    assert_import_refused(
        INS(10, "A") "WITH t(x) AS (VALUES(1),(2),(3),(4),(5),(6),(7),(8),(9),(10)) " INS_COLS
                     "SELECT 'h200', 90, 132, 'xent_fwd', 0, 1, 1, 0, a.x, 64, 1, '" CFG "', 1.5, 2.5, 1, ''"
                     " FROM t a, t b, t c, t d, t e, t f, t g, t h, t i, t j, t k, t l"
                     " WHERE a.x + b.x + c.x + d.x + e.x + f.x + g.x + h.x + i.x + j.x + k.x + l.x = 0;\n",
        "work");
}
END_TEST

/* Only regular files of a bounded size are read: a device or a FIFO would
 * never end, a huge file would be read whole into memory. */
START_TEST(test_import_file_bounds) {
    tc_db *db = open_ok(tpath("b.db"));
    int rows = -1;
    ck_assert_int_eq(tc_import_file(db, "/dev/zero", &rows), XENT_ECACHE);
    ck_assert_msg(strstr(tc_errmsg(db), "not a regular file"), "%s", tc_errmsg(db));
    /* the reason alone is the message past the head that names this store */
    char head[512];
    snprintf(head, sizeof head, "tune cache %s: ", tpath("b.db"));
    ck_assert_msg(!strncmp(tc_errmsg(db), head, strlen(head)), "%s", tc_errmsg(db));
    ck_assert_str_eq(tc_reason(db), tc_errmsg(db) + strlen(head));
    ck_assert_int_eq(mkfifo(tpath("fifo"), 0600), 0);
    ck_assert_int_eq(tc_import_file(db, tpath("fifo"), &rows), XENT_ECACHE);
    ck_assert_msg(strstr(tc_errmsg(db), "not a regular file"), "%s", tc_errmsg(db));
    ck_assert_int_eq(tc_import_file(db, tmpdir, &rows), XENT_ECACHE);
    ck_assert_msg(strstr(tc_errmsg(db), "not a regular file"), "%s", tc_errmsg(db));
    const char *big = tpath("big.sql");
    write_file(big, INS(1, "A"), strlen(INS(1, "A")));
    ck_assert_int_eq(truncate(big, 64L << 20), 0); /* sparse: no disk, and refused before reading */
    ck_assert_int_eq(tc_import_file(db, big, &rows), XENT_ECACHE);
    ck_assert_msg(strstr(tc_errmsg(db), "more than"), "%s", tc_errmsg(db));
    ck_assert_int_eq(rows, 0);
    ck_assert_int_eq(count_rows(db), 0);
    tc_close(db);
}
END_TEST

/* A store whose path alone would fill the message still says why it failed: the path is cut,
 * not the reason. */
START_TEST(test_long_path_keeps_the_reason) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s", tmpdir);
    while (strlen(dir) < 470) { /* folders of up to 100 bytes to 470 in all: SQLite opens paths below 512 */
        size_t at = strlen(dir), len = 469 - at < 100 ? 469 - at : 100;
        dir[at++] = '/';
        memset(dir + at, 'd', len);
        dir[at + len] = '\0';
        ck_assert_int_eq(mkdir(dir, 0755), 0);
    }
    char path[700];
    snprintf(path, sizeof path, "%s/b.db", dir);
    tc_db *db = open_ok(path);
    int rows = -1;
    ck_assert_int_eq(tc_import_file(db, "/dev/zero", &rows), XENT_ECACHE);
    ck_assert_msg(strstr(tc_errmsg(db), "not a regular file"), "%s", tc_errmsg(db));
    ck_assert_msg(strstr(tc_reason(db), "not a regular file"), "%s", tc_reason(db));
    tc_close(db);
}
END_TEST

/* ---- two processes ---------------------------------------------------------- */

static int child_writes(const char *path, int id) {
    tc_db *db = NULL;
    char err[256];
    if (tc_open(path, 0, &db, err, sizeof err) != XENT_OK) return 1;
    int bad = 0;
    for (int i = 0; i < 200 && !bad; i++) {
        tc_key k = mkkey(1000 * id + i, 128);
        tc_entry e = mkentry("CHILD", 1.0 + i);
        bad = tc_put(db, &k, &e) != XENT_OK || tc_add_trial(db, &k, "CHILD", 1.0 + i, 2.0, "ok") != XENT_OK;
    }
    tc_close(db);
    return bad ? 2 : 0;
}

/* The children race to create the file as well as to write it. */
START_TEST(test_two_processes) {
    const char *p = tpath("shared.db");
    pid_t pids[2];
    for (int id = 0; id < 2; id++) {
        pids[id] = fork();
        ck_assert_int_ge(pids[id], 0);
        if (pids[id] == 0) _exit(child_writes(p, id + 1));
    }
    for (int id = 0; id < 2; id++) {
        int status = -1;
        ck_assert_int_eq(waitpid(pids[id], &status, 0), pids[id]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d status %d", id, status);
    }
    tc_db *db = open_ok(p);
    ck_assert_int_eq(count_rows(db), 400);
    tc_key k = mkkey(2199, 128);
    tc_entry e;
    ck_assert_int_eq(tc_get(db, &k, &e), XENT_OK);
    ck_assert_double_eq(e.us, 200.0);
    tc_close(db);
    ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM trial"), 400);
    ck_assert_int_eq(raw_int(p, "SELECT count(DISTINCT n) FROM trial"), 400);
}
END_TEST

static void race_child(const char *path, int id, int gate) {
    char c;
    tc_db *db = NULL;
    tc_key k = mkkey(id + 1, 1);
    tc_entry e = mkentry("RACE", 1.0);
    /* Blocks until the parent closes its end, releasing every child at once. */
    int bad = read(gate, &c, 1) != 0;
    bad = bad || tc_open(path, 0, &db, NULL, 0) != XENT_OK || tc_put(db, &k, &e) != XENT_OK;
    tc_close(db);
    _exit(bad);
}

/* Creating the schema and entering WAL are where racing creators collide;
 * one round rarely shows it, so race many fresh files from a common start. */
START_TEST(test_concurrent_create) {
    enum { ROUNDS = 25, KIDS = 6 };
    char name[32];
    for (int r = 0; r < ROUNDS; r++) {
        snprintf(name, sizeof name, "race%d.db", r);
        const char *p = tpath(name);
        pid_t pids[KIDS];
        int gate[2];
        ck_assert_int_eq(pipe(gate), 0);
        for (int id = 0; id < KIDS; id++) {
            pids[id] = fork();
            ck_assert_int_ge(pids[id], 0);
            if (pids[id] == 0) {
                close(gate[1]);
                race_child(p, id, gate[0]);
            }
        }
        close(gate[0]);
        close(gate[1]);
        int failed = 0;
        for (int id = 0; id < KIDS; id++) {
            int status = -1;
            ck_assert_int_eq(waitpid(pids[id], &status, 0), pids[id]);
            failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        }
        ck_assert_msg(failed == 0, "round %d: %d of %d openers failed", r, failed, KIDS);
        ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM tune"), KIDS);
    }
}
END_TEST

/* ---- files this process may not write --------------------------------------- */

/* A child that cannot write what root's tests made: the unprivileged user when
 * run as root (root writes through any mode), else this user. */
static void become_reader(void) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(90);
}

/* ---- faults during a tune ---------------------------------------------------
 *
 * A tune writes as tune/tuner.c does: a trial row per candidate measured,
 * then the winner, each its own statement. Here a child writes that way to
 * a cache holding earlier winners (EARLIER rows, some of which it re-tunes
 * with better ones) and is killed, or runs into a file size limit, on the
 * way. What must hold after: the cache opens (the winners' table passes
 * quick_check), every earlier winner is there with its old value or its
 * re-tune's whole new one, and every row reads back as the runtime reads it. */

enum { EARLIER = 40, NEW_SHAPES = 200, TRIALS_PER_SHAPE = 12 };

/* The earlier winners: n 1..EARLIER, c 4096, us = n. */
static void fill_earlier(const char *path) {
    tc_db *db = open_ok(path);
    for (int i = 1; i <= EARLIER; i++) put_ok(db, i, 4096, CFG, (double)i);
    tc_close(db);
}

/* The tuning child: every third shape re-tunes an earlier one (us = n / 2),
 * the others are new (n > EARLIER). Exit 0 when every write went in, 1 when
 * a write failed with XENT_ECACHE and a message, 2 otherwise. */
static int tune_writes(const char *path) {
    tc_db *db = NULL;
    char err[512];
    if (tc_open(path, 0, &db, err, sizeof err) != XENT_OK) return err[0] ? 1 : 2;
    int rc = XENT_OK;
    for (int i = 0; rc == XENT_OK && i < NEW_SHAPES; i++) {
        int64_t n = i % 3 == 0 ? 1 + (i / 3) % EARLIER : EARLIER + 1 + i;
        tc_key k = mkkey(n, 4096);
        for (int t = 0; rc == XENT_OK && t < TRIALS_PER_SHAPE; t++)
            rc = tc_add_trial(db, &k, CFG, 10.0 + t, 100.0 * t, t % 4 ? "ok" : "pruned");
        tc_entry e = mkentry(CFG, n <= EARLIER ? (double)n / 2 : 1000.0 + (double)n);
        if (rc == XENT_OK) rc = tc_put(db, &k, &e);
    }
    int failed_with_reason = rc == XENT_ECACHE && tc_errmsg(db)[0];
    if (rc != XENT_OK) fprintf(stderr, "tune writer: %s\n", tc_errmsg(db));
    tc_close(db);
    return rc == XENT_OK ? 0 : failed_with_reason ? 1 : 2;
}

typedef struct {
    int rows, earlier, retuned, bad;
} cache_check;

static int check_row(void *arg, const tc_key *k, const tc_entry *e) {
    cache_check *c = arg;
    c->rows++;
    int ok = !strcmp(e->config, CFG) && k->c == 4096;
    if (k->n <= EARLIER) {
        c->earlier++;
        c->retuned += e->us == (double)k->n / 2;
        ok = ok && (e->us == (double)k->n || e->us == (double)k->n / 2);
    } else {
        ok = ok && e->us == 1000.0 + (double)k->n;
    }
    c->bad += !ok;
    return 0;
}

/* Opens (quick_check included), reads every row; every earlier winner is there. */
static cache_check check_intact(const char *path) {
    cache_check c = {0, 0, 0, 0};
    tc_db *db = open_ok(path);
    ck_assert_int_eq(tc_foreach(db, NULL, check_row, &c), XENT_OK);
    tc_close(db);
    ck_assert_msg(c.bad == 0, "%d rows of %d hold values no tune wrote", c.bad, c.rows);
    ck_assert_int_eq(c.earlier, EARLIER);
    return c;
}

static pid_t start_writer(const char *path, rlim_t fsize) {
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (fsize != RLIM_INFINITY) {
            /* a write past the limit fails with EFBIG instead of killing the writer */
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit r = {fsize, fsize};
            if (setrlimit(RLIMIT_FSIZE, &r) != 0) _exit(3);
        }
        _exit(tune_writes(path));
    }
    return pid;
}

static int wait_writer(pid_t pid) {
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return status;
}

/* SIGKILL at 30 points of a tune, the cache carried from one to the next. */
START_TEST(test_kill_during_tune) {
    const char *p = tpath("killed.db");
    fill_earlier(p);
    int killed = 0, max_rows = 0;
    srand(11);
    for (int round = 0; round < 30; round++) {
        pid_t pid = start_writer(p, RLIM_INFINITY);
        usleep((useconds_t)(500 + rand() % 10000));
        kill(pid, SIGKILL);
        int status = wait_writer(pid);
        killed += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        cache_check c = check_intact(p);
        max_rows = c.rows > max_rows ? c.rows : max_rows;
    }
    /* the kills must have landed mid-tune for the test to say anything */
    ck_assert_int_ge(killed, 15);
    fprintf(stderr, "kill during tune: %d of 30 writers killed, up to %d winners, earlier %d kept\n", killed, max_rows,
            EARLIER);
}
END_TEST

/* A file size limit, as a full disk, at several distances past the cache's
 * size now: each tune fails with the reason, the cache stays whole, and
 * with the room back a tune completes. */
START_TEST(test_disk_full_during_tune) {
    static const long room[] = {0, 512, 4096, 32768, 262144};
    for (size_t i = 0; i < sizeof room / sizeof room[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "full%zu.db", i);
        const char *p = tpath(name);
        fill_earlier(p);
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);
        int status = wait_writer(start_writer(p, (rlim_t)st.st_size + (rlim_t)room[i]));
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1,
                      "room %ld: the tune did not fail with a reason (status %d)", room[i], status);
        cache_check c = check_intact(p);
        fprintf(stderr, "disk full %ld bytes past the cache: failed with a reason, %d winners, earlier %d kept\n",
                room[i], c.rows, c.earlier);
        status = wait_writer(start_writer(p, RLIM_INFINITY));
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "room back: status %d", status);
        c = check_intact(p);
        ck_assert_int_eq(c.rows, EARLIER + NEW_SHAPES - (NEW_SHAPES + 2) / 3);
        ck_assert_int_eq(c.retuned, EARLIER);
    }
}
END_TEST

/* In a child as a reader: opens path read-only and counts its rows; the exit
 * status is the count, or 100 + the open's status. */
static int reader_count(const char *path) {
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        become_reader();
        tc_db *db = NULL;
        char err[512];
        int rc = tc_open(path, 1, &db, err, sizeof err);
        if (rc != XENT_OK) {
            fprintf(stderr, "reader: %s\n", err);
            _exit(100 + rc);
        }
        int n = 0;
        visit_state v = {0, 0, 1, -1};
        rc = tc_foreach(db, NULL, visit, &v);
        n = v.count;
        if (rc != XENT_OK) fprintf(stderr, "reader: %s\n", tc_errmsg(db));
        tc_close(db);
        _exit(rc == XENT_OK ? n : 100 + rc);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* A WAL cache of three rows at dir/name, made by this (writing) process. */
static const char *make_cache(const char *dir, const char *name) {
    static char p[512];
    ck_assert_int_eq(mkdir(tpath(dir), 0755), 0);
    snprintf(p, sizeof p, "%s/%s", tpath(dir), name);
    tc_db *db = open_ok(p);
    put_ok(db, 1, 10, CFG, 1.0);
    put_ok(db, 2, 10, CFG, 2.0);
    put_ok(db, 3, 10, CFG, 3.0);
    tc_close(db);
    return p;
}

static int has_journal_files(const char *path) {
    char w[600], s[600];
    snprintf(w, sizeof w, "%s-wal", path);
    snprintf(s, sizeof s, "%s-shm", path);
    return access(w, F_OK) == 0 || access(s, F_OK) == 0;
}

START_TEST(test_readonly_places) {
    ck_assert_int_eq(chmod(tmpdir, 0755), 0);
    /* A directory the reader cannot write: no -shm can be made there. */
    const char *p = make_cache("rodir", "t.db");
    ck_assert_int_eq(chmod(tpath("rodir"), 0555), 0);
    ck_assert_int_eq(reader_count(p), 3);
    ck_assert(!has_journal_files(p));
    /* A file the reader cannot write, in a directory it can: nothing left beside it. */
    p = make_cache("rofile", "t.db");
    ck_assert_int_eq(chmod(tpath("rofile"), 0777), 0);
    ck_assert_int_eq(chmod(p, 0444), 0);
    ck_assert_int_eq(reader_count(p), 3);
    ck_assert_msg(!has_journal_files(p), "a read-only open left -wal or -shm beside %s", p);
    chmod(tpath("rodir"), 0755);
}
END_TEST

/* A foreign file that claims our schema version is refused before anything is
 * written to it: its journal mode stays its own. */
START_TEST(test_foreign_v1_untouched) {
    const char *p = tpath("foreign1.db");
    raw_exec(p, "CREATE TABLE notes(x); PRAGMA user_version = 1");
    for (int ro = 0; ro <= 1; ro++) {
        tc_db *db = NULL;
        char err[256] = "";
        ck_assert_int_eq(tc_open(p, ro, &db, err, sizeof err), XENT_ECACHE);
        ck_assert_msg(strstr(err, "not a tune cache"), "err: %s", err);
        ck_assert_int_eq(raw_int(p, "SELECT count(*) FROM pragma_journal_mode WHERE journal_mode = 'delete'"), 1);
        ck_assert(!has_journal_files(p));
    }
}
END_TEST

/* ---- user path ------------------------------------------------------------ */

START_TEST(test_user_path) {
    char buf[256];
    unsetenv("XENT_TUNECACHE");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_EINVAL);

    setenv("HOME", "/home/u", 1);
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_OK);
    ck_assert_str_eq(buf, "/home/u/.cache/xent/tune.db");

    setenv("XDG_CACHE_HOME", "relative/cache", 1);
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_OK);
    ck_assert_str_eq(buf, "/home/u/.cache/xent/tune.db");

    setenv("XDG_CACHE_HOME", "/xdg", 1);
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_OK);
    ck_assert_str_eq(buf, "/xdg/xent/tune.db");

    setenv("XENT_TUNECACHE", "/opt/t.db", 1);
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_OK);
    ck_assert_str_eq(buf, "/opt/t.db");

    setenv("XENT_TUNECACHE", "", 1); /* empty counts as unset */
    ck_assert_int_eq(tc_user_path(buf, sizeof buf), XENT_OK);
    ck_assert_str_eq(buf, "/xdg/xent/tune.db");

    ck_assert_int_eq(tc_user_path(buf, 10), XENT_EINVAL);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(tc_user_path(buf, strlen("/xdg/xent/tune.db")), XENT_EINVAL);
    ck_assert_int_eq(tc_user_path(buf, strlen("/xdg/xent/tune.db") + 1), XENT_OK);
    ck_assert_int_eq(tc_user_path(NULL, 10), XENT_EINVAL);
}
END_TEST

/* ---- suite -------------------------------------------------------------------- */

static Suite *tunecache_suite(void) {
    Suite *s = suite_create("tunecache");
    const scratch_test groups[] = {
        {"schema", 60, test_schema_created},
        {"schema", 60, test_memory_db},
        {"schema", 60, test_newer_version_refused},
        {"schema", 60, test_foreign_db_refused},
        {"schema", 60, test_readonly},
        {"schema", 60, test_corrupt_file},
        {"schema", 60, test_truncated_file},
        {"schema", 60, test_open_bad_args},
        {"schema", 60, test_damaged_mid_file},
        {"putget", 60, test_upsert},
        {"putget", 60, test_get_miss},
        {"putget", 60, test_key_fields_distinguish},
        {"putget", 60, test_put_invalid},
        {"nearest", 60, test_nearest},
        {"nearest", 60, test_nearest_ties},
        {"lookup", 60, test_lookup_order},
        {"lookup", 60, test_lookup_nearer_store_wins},
        {"stamps", 60, test_stamps_replace_in_place},
        {"stamps", 60, test_stale_entries_skipped},
        {"chain", 60, test_chain_skips_one_level_at_a_time},
        {"chain", 60, test_arch_level_relaxes_gpu_and_sms},
        {"schema1", 60, test_schema1_file},
        {"schema1", 60, test_schema1_text_and_stamp},
        {"trials", 60, test_trials_counted},
        {"trials", 60, test_foreach},
        {"io", 60, test_export_import_roundtrip},
        {"io", 60, test_export_exact_doubles},
        {"io", 60, test_export_gpu_filter},
        {"io", 60, test_import_malformed},
        {"io", 60, test_import_refuses_other_statements},
        {"io", 60, test_import_blank_and_comments},
        {"io", 60, test_import_file},
        {"import", 20, test_import_validates_values},
        {"import", 20, test_import_family_rules},
        {"import", 20, test_import_bounded_work},
        {"import", 20, test_import_file_bounds},
        {"import", 20, test_long_path_keeps_the_reason},
        {"procs", 60, test_two_processes},
        {"procs", 60, test_concurrent_create},
        {"env", 60, test_user_path},
        {"faults", 120, test_kill_during_tune},
        {"faults", 120, test_disk_full_during_tune},
        {"readonly", 60, test_readonly_places},
        {"readonly", 60, test_foreign_v1_untouched},
    };
    add_scratch_tests(s, groups, sizeof groups / sizeof groups[0], make_tmpdir, NULL);
    return s;
}

int main(void) { return run_suite(tunecache_suite()); }
