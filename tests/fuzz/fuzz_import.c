/* fuzz_import — tc_import, the SQL text of `xent-tune import` and of the
 * shipped caches, into an in-memory cache. Beyond not crashing and staying
 * within the import's work budget (libFuzzer's -timeout): text it takes
 * exports (tc_export) as text that imports again and exports the same, so
 * every row it let in reads back as the runtime reads it; text it refuses
 * leaves the cache empty. */
#include <stdint.h>
#include "tests/fuzz/require.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tunecache/tunecache.h"
#include "xent.h"

static char *export_text(tc_db *db, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    require(f);
    int rc = tc_export(db, NULL, f);
    require(fclose(f) == 0);
    require(rc == XENT_OK);
    return buf;
}

static int count_row(void *arg, const tc_key *k, const tc_entry *e) {
    (void)k, (void)e;
    ++*(int *)arg;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    tc_db *db = NULL, *again = NULL;
    char err[512];
    require(tc_open(":memory:", 0, &db, err, sizeof err) == XENT_OK);
    int rows = -1, stored = 0;
    int rc = tc_import(db, text, &rows);
    require(tc_foreach(db, NULL, count_row, &stored) == XENT_OK);
    if (rc != XENT_OK) {
        require(stored == 0 && rows == 0 && tc_errmsg(db)[0]);
    } else {
        size_t len1 = 0, len2 = 0;
        char *first = export_text(db, &len1);
        require(tc_open(":memory:", 0, &again, err, sizeof err) == XENT_OK);
        int rc2 = tc_import(again, first, NULL);
        require(rc2 == XENT_OK || !fprintf(stderr, "re-import: %s\n", tc_errmsg(again)));
        char *second = export_text(again, &len2);
        require(len1 == len2 && !memcmp(first, second, len1));
        free(first);
        free(second);
        tc_close(again);
    }
    tc_close(db);
    free(text);
    return 0;
}
