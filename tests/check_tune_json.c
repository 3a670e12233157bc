/*
 * check_tune_json — xent-tune's --json on each command that prints data
 * (show, --dry-run, --compile-only): the output is valid JSON (SQLite's
 * json_valid, which refuses NaN, infinities and raw control characters),
 * holds what the row's SQL says, and --compile-only reports progress on
 * stderr unless -q.
 *
 * Run from the repository root (as `make test` does); XENT_TUNE_BIN is the
 * binary (default build/xent-tune). Each row writes the document to
 * $T/out.json; its check is an SQL expression over it as ?1 that must be 1.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/run_suite.h"
#include "tests/shell.h"

#define TUNE "\"$XENT_TUNE_BIN\" "
#define OUT " > \"$T/out.json\""
#define CONFIG "--config 'VEC=1 TPR=32 BLOCK=256 ITEMS=1 PASSES=1 CACHE=1 TILE=0 SPLIT=1 PERSIST=0' "

/* The values JSON cannot hold, and text that needs escapes, in every entry. */
#define ODD_SETTINGS "'say \"hi\" \\ then' || char(10) || char(9) || char(1) || 'end'"

typedef struct json_case {
    shell_case run;
    const char *prepare; /* SQL run on $T/a.db (the shipped h200 cache imported) first, or NULL */
    const char *check;   /* SQL over the document ?1; must give 1 */
} json_case;

static const json_case cases[] = {
    {{"dry run: one object a shape, its candidates and the heuristic",
      TUNE "--dry-run --json -s 4x7 -s 8x9 -d bf16 --lse" OUT, 0, NULL, NULL},
     NULL,
     "json_array_length(?1) = 2 AND json_extract(?1, '$[0].problem.c') = 7 AND "
     "json_extract(?1, '$[1].problem.dtype') = 'bf16' AND json_extract(?1, '$[1].problem.lse') = 1 AND "
     "json_array_length(?1, '$[0].candidates') > 10 AND json_type(?1, '$[0].heuristic') = 'text'"},
    {{"compile only: registers per config, progress on stderr",
      TUNE "--compile-only --json -s 4x7 " CONFIG OUT " 2> \"$T/err\"; rc=$?; cat \"$T/err\"; exit $rc", 0,
      "compile: 1/1 candidates", NULL},
     NULL,
     "json_array_length(?1) = 1 AND json_extract(?1, '$[0].arch') = 90 AND "
     "json_extract(?1, '$[0].results[0].registers') > 0 AND json_type(?1, '$[0].results[0].error') IS NULL"},
    {{"compile only -q: nothing on stderr",
      TUNE "--compile-only --json -q -s 4x7 " CONFIG OUT " 2> \"$T/err\" && test ! -s \"$T/err\"", 0, NULL, NULL},
     NULL,
     "json_array_length(?1, '$[0].results') = 1"},
    {{"show: no cache yet is an empty list, the path escaped", TUNE "show --json --db \"$T/no \\\"such\\\" cache\"" OUT,
      0, NULL, NULL},
     NULL,
     "json_array_length(?1, '$.entries') = 0 AND json_extract(?1, '$.db') LIKE '%/no \"such\" cache'"},
    {{"show: an infinite time is null, odd text escaped", TUNE "show --json --db \"$T/a.db\"" OUT, 0, NULL, NULL},
     "UPDATE tune SET us = 1e999, gbps = -1e999, settings = " ODD_SETTINGS,
     "json_array_length(?1, '$.entries') > 0 AND json_type(?1, '$.entries[0].us') = 'null' AND "
     "json_type(?1, '$.entries[0].gbps') = 'null' AND json_extract(?1, '$.entries[0].settings') = " ODD_SETTINGS},
    {{"show: the shipped cache, every entry", TUNE "show --json --gpu h200 --db \"$T/a.db\"" OUT, 0, NULL, NULL},
     "SELECT 1",
     "json_array_length(?1, '$.entries') > 10 AND json_extract(?1, '$.entries[0].gpu') = 'h200' AND "
     "json_extract(?1, '$.entries[0].us') > 0"},
};

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "no %s", path);
    static char buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* The document must be valid JSON, and the SQL expression over it true (it is
 * not evaluated over invalid JSON, where json_extract would fail). */
static void check_document(const json_case *c, const char *doc) {
    sqlite3 *db;
    sqlite3_stmt *st;
    char sql[2048];
    ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    snprintf(sql, sizeof sql, "SELECT json_valid(?1), CASE WHEN json_valid(?1) THEN coalesce((%s), 0) END", c->check);
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", c->run.name, sqlite3_errmsg(db));
    sqlite3_bind_text(st, 1, doc, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int valid = sqlite3_column_int(st, 0), holds = sqlite3_column_int(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_msg(valid, "%s: not valid JSON:\n%.2000s", c->run.name, doc);
    ck_assert_msg(holds, "%s: the document does not hold %s:\n%.2000s", c->run.name, c->check, doc);
}

/* The shipped h200 cache imported into $T/a.db, then changed by sql. */
static void prepare(const char *sql) {
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, TUNE "import tunecache/h200.sql --db \"%s/a.db\"", tmpdir);
    ck_assert_msg(shell_run(cmd, out, sizeof out) == 0, "import failed: %s", out);
    sqlite3 *db;
    snprintf(cmd, sizeof cmd, "%s/a.db", tmpdir);
    ck_assert_int_eq(sqlite3_open(cmd, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

START_TEST(json_row) {
    const json_case *c = &cases[_i];
    if (c->prepare) prepare(c->prepare);
    shell_check(&c->run);
    check_document(c, read_text(tpath("out.json")));
}
END_TEST

int main(void) {
    const char *bin = getenv("XENT_TUNE_BIN");
    setenv("XENT_TUNE_BIN", bin && *bin ? bin : "build/xent-tune", 1);
    return run_suite(shell_suite("tune_json", json_row, (int)(sizeof cases / sizeof cases[0]), 120));
}
