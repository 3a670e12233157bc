/*
 * check_lib — the library as a program outside this tree links it: the
 * shared library exports the functions of include/xent.h and nothing else,
 * has a SONAME and no RUNPATH but the one asked for, carries no tuner, and
 * pkg-config's description builds a program that reports the version.
 *
 * Run from the repository root (as `make test` does). XENT_BUILD is the build
 * folder (default build); XENT_RPATH the RUNPATH the build was asked for;
 * XENT_LINK_FLAGS the flags the build compiled and linked with (a sanitizer's
 * library needs its runtime in the program too).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tests/run_suite.h"
#include "tests/shell.h"
#include "xent.h"

/* A program of the public API, as a user writes one. */
#define USER_PROGRAM                                                                                                   \
    "cat > \"$T/user.c\" <<'EOF'\n"                                                                                    \
    "#include <stdio.h>\n"                                                                                             \
    "#include <xent.h>\n"                                                                                              \
    "int main(void) {\n"                                                                                               \
    "    xent_problem p;\n"                                                                                            \
    "    xent_problem_init(&p, 8, 100);\n"                                                                             \
    "    printf(\"version %d header %d check %s\\n\", xent_version(), XENT_VERSION,\n"                                 \
    "           xent_errstr(xent_problem_check(&p, NULL, 0)));\n"                                                      \
    "    return xent_version() == XENT_VERSION ? 0 : 1;\n"                                                             \
    "}\n"                                                                                                              \
    "EOF\n"

/* pkg-config's flags for the build tree rather than the PREFIX it names. */
#define PKG_CONFIG                                                                                                     \
    "PKG_CONFIG_PATH=\"$XENT_BUILD\" pkg-config --define-variable=libdir=\"$XENT_BUILD\" "                             \
    "--define-variable=includedir=\"$PWD/include\" "

static const shell_case cases[] = {
    {"the shared library exports the header's functions and nothing else",
     "nm -D --defined-only \"$XENT_BUILD/libxent.so\" | awk '{print $NF}' | sort > \"$T/exported\" && "
     "sed -n 's/^XENT_API .*[ *]\\(xent_[a-z0-9_]*\\)(.*/\\1/p' include/xent.h | sort > \"$T/declared\" && "
     "test -s \"$T/declared\" && diff \"$T/declared\" \"$T/exported\"",
     0, NULL, NULL},
    {"the tuner is not in the shared library",
     "nm \"$XENT_BUILD/libxent.so\" | grep -E ' (xent_tune|tune_bufs_create|xent_ref_forward|xent_compile_many)$'", 1,
     NULL, NULL},
    {"the SONAME is libxent.so.<major>",
     "readelf -d \"$XENT_BUILD/libxent.so\" | grep -F \"Library soname: [$XENT_SONAME]\"", 0, NULL, NULL},
    {"the SONAME link is beside the library", "test \"$(readlink \"$XENT_BUILD/$XENT_SONAME\")\" = libxent.so", 0, NULL,
     NULL},
    {"no RUNPATH but the one the build was asked for",
     "readelf -d \"$XENT_BUILD/libxent.so\" | grep -E 'R(UN)?PATH' | grep -vF \"[$XENT_RPATH]\"", 1, NULL, NULL},
    {"pkg-config knows xent's version", "test \"$(" PKG_CONFIG "--modversion xent)\" = \"$XENT_VERSION_TEXT\"", 0, NULL,
     NULL},
    {"a program built with pkg-config's flags runs and reports the version",
     USER_PROGRAM "cc $XENT_LINK_FLAGS -std=c99 -Wall -Wextra -pedantic -Werror -o \"$T/user\" \"$T/user.c\" "
                  "$(" PKG_CONFIG "--cflags --libs xent) && LD_LIBRARY_PATH=\"$XENT_BUILD\" \"$T/user\"",
     0, "check success", NULL},
    {"the library's insides cannot be linked",
     "printf 'int tc_open(void);\\nint main(void) { return tc_open(); }\\n' > \"$T/inside.c\" && "
     "cc $XENT_LINK_FLAGS -o \"$T/inside\" \"$T/inside.c\" -L\"$XENT_BUILD\" -lxent",
     SHELL_ANY_FAILURE, "tc_open", NULL},
    {"the example includes the public header alone", "grep -n '#include \"' tools/example.c | grep -v '\"xent.h\"'", 1,
     NULL, NULL},
};

START_TEST(shell_row) { shell_check(&cases[_i]); }
END_TEST

START_TEST(version_is_the_headers) { ck_assert_int_eq(xent_version(), XENT_VERSION); }
END_TEST

int main(void) {
    char soname[64], version[32];
    snprintf(soname, sizeof soname, "libxent.so.%d", XENT_VERSION / 10000);
    snprintf(version, sizeof version, "%d.%d.%d", XENT_VERSION / 10000, XENT_VERSION / 100 % 100, XENT_VERSION % 100);
    setenv("XENT_SONAME", soname, 1);
    setenv("XENT_VERSION_TEXT", version, 1);
    setenv("XENT_BUILD", getenv("XENT_BUILD") && *getenv("XENT_BUILD") ? getenv("XENT_BUILD") : "build", 1);
    if (!getenv("XENT_RPATH")) setenv("XENT_RPATH", "", 1);
    Suite *s = shell_suite("lib", shell_row, (int)(sizeof cases / sizeof cases[0]), 60);
    TCase *tc = tcase_create("version");
    tcase_add_test(tc, version_is_the_headers);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
