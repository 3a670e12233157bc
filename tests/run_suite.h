/* run_suite.h — the one way a Check suite runs here: all tests, normal
 * output, exit status 1 when any failed. */
#ifndef XENT_TESTS_RUN_SUITE_H
#define XENT_TESTS_RUN_SUITE_H

#include <check.h>
#include <stdlib.h>

static inline int run_suite(Suite *s) {
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
