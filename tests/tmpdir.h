/* tmpdir.h — a test's scratch directory: paths in it, and removing it. The
 * suite's fixture fills `tmpdir` (mkdtemp) before each test. */
#ifndef XENT_TESTS_TMPDIR_H
#define XENT_TESTS_TMPDIR_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[128];

/* tmpdir/name; the last 8 results stay valid, so one call may take several. */
static inline const char *tpath(const char *name) {
    static char p[8][512];
    static int i;
    i = (i + 1) % 8;
    snprintf(p[i], sizeof p[i], "%s/%s", tmpdir, name);
    return p[i];
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir) {
    if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_tmpdir(void) { remove_tree(tmpdir); }

/* A suite's tests as a table: consecutive entries with one name form a test
 * case (the first entry's timeout), each test in a fresh tmpdir from `make`.
 * The cases named in slow (NULL-terminated, or NULL) are tagged "slow": they
 * run in `make test-slow`, not `make test`. */
typedef struct {
    const char *tcase;
    int timeout;
    const TTest *test;
} scratch_test;

static inline void add_scratch_tests(Suite *s, const scratch_test *t, size_t n, void (*make)(void),
                                     const char *const *slow) {
    TCase *tc = NULL;
    const char *cur = "";
    for (size_t i = 0; i < n; i++) {
        if (strcmp(cur, t[i].tcase) != 0) {
            cur = t[i].tcase;
            tc = tcase_create(cur);
            tcase_add_checked_fixture(tc, make, remove_tmpdir);
            tcase_set_timeout(tc, t[i].timeout);
            for (size_t k = 0; slow && slow[k]; k++)
                if (!strcmp(slow[k], cur)) tcase_set_tags(tc, "slow");
            suite_add_tcase(s, tc);
        }
        tcase_add_test(tc, t[i].test);
    }
}

#endif
