/* require.h — a fuzz target's property check. assert() would report
 * through stdio, which the command-line targets point at /dev/null; this
 * writes to descriptor 2, where libFuzzer and the sanitizers report, then
 * aborts so that libFuzzer keeps the input. */
#ifndef XENT_FUZZ_REQUIRE_H
#define XENT_FUZZ_REQUIRE_H

#include <stdio.h>
#include <stdlib.h>

#define require(x) ((x) ? (void)0 : (dprintf(2, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #x), abort()))

#endif
