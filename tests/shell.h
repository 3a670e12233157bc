/* shell.h — suites whose cases are shell commands, written as a table: each
 * row runs through sh in a fresh scratch folder ($T), and its exit status
 * and output (stdout and stderr together, unless the command redirects
 * them) are checked against the row. */
#ifndef XENT_TESTS_SHELL_H
#define XENT_TESTS_SHELL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/tmpdir.h"

#define SHELL_ANY_FAILURE (-1) /* a row's code: any exit status but 0 */

typedef struct shell_case {
    const char *name;
    const char *cmd;    /* sh command line; $T is the row's scratch folder */
    int code;           /* the exit status expected, or SHELL_ANY_FAILURE */
    const char *want;   /* text the output must hold (NULL: none) */
    const char *reject; /* text it must not hold (NULL: none) */
} shell_case;

/* Run cmd through sh; its output (at most len - 1 bytes kept) into out.
 * The exit status, or -1 when it did not exit normally. */
static int shell_run(const char *cmd, char *out, size_t len) {
    char *line = NULL;
    ck_assert_msg(asprintf(&line, "exec 2>&1\n%s", cmd) > 0, "out of memory");
    FILE *p = popen(line, "r");
    free(line);
    ck_assert_msg(p != NULL, "popen failed: %s", cmd);
    size_t used = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, p)) > 0) {
        size_t keep = got < len - 1 - used ? got : len - 1 - used;
        memcpy(out + used, chunk, keep);
        used += keep;
    }
    out[used] = 0;
    int st = pclose(p);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Check one row: $T is set to the scratch folder that the fixture made. */
static void shell_check(const shell_case *c) {
    static char out[1 << 20];
    setenv("T", tmpdir, 1);
    int code = shell_run(c->cmd, out, sizeof out);
    if (c->code == SHELL_ANY_FAILURE)
        ck_assert_msg(code != 0, "%s: exited 0, expected a failure\n$ %s\n%.4000s", c->name, c->cmd, out);
    else
        ck_assert_msg(code == c->code, "%s: exit status %d, expected %d\n$ %s\n%.4000s", c->name, code, c->code, c->cmd,
                      out);
    if (c->want)
        ck_assert_msg(strstr(out, c->want), "%s: output lacks '%s'\n$ %s\n%.4000s", c->name, c->want, c->cmd, out);
    if (c->reject)
        ck_assert_msg(!strstr(out, c->reject), "%s: output holds '%s'\n$ %s\n%.4000s", c->name, c->reject, c->cmd, out);
}

static void shell_make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/xent-shell-XXXXXX");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp failed");
}

/* A suite of one test case that runs each row of cases (n rows) as a loop
 * test of `test`, which calls shell_check(&cases[_i]). */
static Suite *shell_suite(const char *name, const TTest *test, int n, int timeout_s) {
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, shell_make_tmpdir, remove_tmpdir);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_loop_test(tc, test, 0, n);
    suite_add_tcase(s, tc);
    return s;
}

#endif
