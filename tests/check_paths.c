/*
 * check_paths — where xent keeps its files: the kernel cache folder and the
 * tune cache path follow one rule for the user's cache folder (an absolute
 * XDG_CACHE_HOME, else HOME; a relative XDG_CACHE_HOME is ignored, as the
 * XDG spec says), and folders are made as mkdir -p makes them.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/files.h"
#include "gen/gen.h"
#include "tests/run_suite.h"
#include "tests/tmpdir.h"
#include "tunecache/tunecache.h"

typedef struct path_case {
    const char *kernel_env, *tune_env, *xdg, *home; /* NULL: unset */
    const char *kernels;                            /* the kernel cache folder; NULL: none */
    const char *tune;                               /* the tune cache path; NULL: none */
} path_case;

static const path_case cases[] = {
    {NULL, NULL, NULL, NULL, NULL, NULL},
    {NULL, NULL, NULL, "/home/u", "/home/u/.cache/xent/kernels", "/home/u/.cache/xent/tune.db"},
    {NULL, NULL, "relative/cache", "/home/u", "/home/u/.cache/xent/kernels", "/home/u/.cache/xent/tune.db"},
    {NULL, NULL, "relative/cache", NULL, NULL, NULL},
    {NULL, NULL, "/xdg", "/home/u", "/xdg/xent/kernels", "/xdg/xent/tune.db"},
    {NULL, NULL, "/xdg", NULL, "/xdg/xent/kernels", "/xdg/xent/tune.db"},
    {NULL, NULL, "", "/home/u", "/home/u/.cache/xent/kernels", "/home/u/.cache/xent/tune.db"},
    {"/k", "/t.db", "/xdg", "/home/u", "/k", "/t.db"},
    {"off", "", NULL, "/home/u", NULL, "/home/u/.cache/xent/tune.db"},
};

static void set(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

START_TEST(paths_follow_one_rule) {
    const path_case *c = &cases[_i];
    char buf[4096];
    set("XENT_KERNEL_CACHE", c->kernel_env);
    set("XENT_TUNECACHE", c->tune_env);
    set("XDG_CACHE_HOME", c->xdg);
    set("HOME", c->home);
    int have = xent_kernel_cache_dir(buf, sizeof buf);
    ck_assert_msg(have == (c->kernels != NULL), "row %d: kernel cache folder %s", _i, have ? buf : "none");
    if (have) ck_assert_str_eq(buf, c->kernels);
    int rc = tc_user_path(buf, sizeof buf);
    ck_assert_msg((rc == XENT_OK) == (c->tune != NULL), "row %d: tune cache %s", _i, rc ? "none" : buf);
    if (!rc) ck_assert_str_eq(buf, c->tune);
}
END_TEST

START_TEST(too_long_a_home_is_refused) {
    char small[16];
    const char *from = NULL;
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/a/home/longer/than/sixteen", 1);
    ck_assert_int_eq(xent_cache_home(small, sizeof small, &from), XENT_EINVAL);
    ck_assert_str_eq(small, "");
    ck_assert_str_eq(from, "HOME");
    unsetenv("HOME");
    ck_assert_int_eq(xent_cache_home(small, sizeof small, &from), XENT_ENOTFOUND);
    ck_assert_ptr_null(from);
}
END_TEST

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

START_TEST(mkdirs_makes_folders_or_parents) {
    xent_mkdirs(tpath("a/b/c"), 1);
    ck_assert(is_dir(tpath("a/b/c")));
    xent_mkdirs(tpath("d/e/file.db"), 0);
    ck_assert(is_dir(tpath("d/e")));
    ck_assert(!is_dir(tpath("d/e/file.db")));
    xent_mkdirs(tpath("a/b/c"), 1); /* already there: nothing to do */
    ck_assert(is_dir(tpath("a/b/c")));
}
END_TEST

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/xent-paths-XXXXXX");
    ck_assert(mkdtemp(tmpdir) != NULL);
}

int main(void) {
    Suite *s = suite_create("paths");
    TCase *tc = tcase_create("environment");
    tcase_add_loop_test(tc, paths_follow_one_rule, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, too_long_a_home_is_refused);
    suite_add_tcase(s, tc);
    const scratch_test scratch[] = {{"folders", 10, mkdirs_makes_folders_or_parents}};
    add_scratch_tests(s, scratch, 1, make_tmpdir, NULL);
    return run_suite(s);
}
