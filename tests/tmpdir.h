/* tmpdir.h — a test's scratch directory: paths in it, and removing it. The
 * suite's fixture fills `tmpdir` (mkdtemp) before each test. */
#ifndef XENT_TESTS_TMPDIR_H
#define XENT_TESTS_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static char tmpdir[128];

/* tmpdir/name; the last 8 results stay valid, so one call may take several. */
static const char *tpath(const char *name) {
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

#endif
