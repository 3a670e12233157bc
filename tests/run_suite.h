/* run_suite.h — the one way a Check suite runs here: all tests, normal
 * output, exit status 1 when any failed. */
#ifndef XENT_TESTS_RUN_SUITE_H
#define XENT_TESTS_RUN_SUITE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* XENT_TEST_EVERY=k: the tests that honour it run every k-th of their cases
 * (a subset that fits a slow tool such as compute-sanitizer); the selection
 * is printed, never silent. Default 1: every case. */
static inline int test_every(void) {
    static int every;
    if (!every) {
        const char *e = getenv("XENT_TEST_EVERY");
        every = e && atoi(e) > 1 ? atoi(e) : 1;
        if (every > 1) printf("XENT_TEST_EVERY=%d: every %d-th case only\n", every, every);
    }
    return every;
}

/* XENT_TEST_OFFSET=j with XENT_TEST_EVERY=k: the subset starts at the j-th
 * case (0 <= j < k), so that k runs with offsets 0 to k-1 cover every case
 * between them (a sweep longer than one device call). Default 0. */
static inline int test_offset(void) {
    static int offset = -1;
    if (offset < 0) {
        const int every = test_every(); /* printed here, once, where main asks before the cases fork */
        const char *e = getenv("XENT_TEST_OFFSET");
        offset = e && atoi(e) > 0 ? atoi(e) % every : 0;
        if (offset > 0) printf("XENT_TEST_OFFSET=%d: from the %d-th case\n", offset, offset);
    }
    return offset;
}

/* Whether case i is in the subset XENT_TEST_EVERY and XENT_TEST_OFFSET pick. */
static inline int test_picked(size_t i) { return (int)(i % (size_t)test_every()) == test_offset(); }

/* XENT_TEST_ONLY=text: the tests that honour it run only the cases whose
 * name holds text (printed when set). */
static inline int test_selected(const char *name) {
    static int told;
    const char *only = getenv("XENT_TEST_ONLY");
    if (!only || !*only) return 1;
    if (!told++) printf("XENT_TEST_ONLY=%s: only the cases so named\n", only);
    return strstr(name, only) != NULL;
}

static inline int run_suite(Suite *s) {
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
