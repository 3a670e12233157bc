/* files.h — the tests' one copy of small file and clock helpers; each fails
 * the running test (Check) rather than return an error. */
#ifndef XENT_TESTS_FILES_H
#define XENT_TESTS_FILES_H

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static inline void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static inline void write_text(const char *path, const char *text) { write_file(path, text, strlen(text)); }

/* The whole file, NUL-terminated (len, when given, excludes the NUL). */
static inline char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            buf = realloc(buf, cap *= 2);
            ck_assert_ptr_nonnull(buf);
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static inline int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* Seconds on a monotonic clock. */
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif
