/* xent_tune_static.h — xent-tune's parsers are static to tools/xent-tune.c;
 * a fuzz target includes the file itself (its main renamed) and the parts its
 * main dispatches to (tools/xent-tune-cli.h) to call them as the command line
 * does. Their refusals print to stderr, which the target
 * points at /dev/null: the sanitizers write their reports to descriptor 2,
 * not through stdio, so those still show. */
#ifndef XENT_FUZZ_TUNE_STATIC_H
#define XENT_FUZZ_TUNE_STATIC_H

#define main xent_tune_main
#include "tools/xent-tune.c"
#undef main
#include "tools/xent-tune-cache.c"
#include "tools/xent-tune-offline.c"
#include "tools/xent-tune-search.c"

static void quiet_stderr(void) {
    static int done;
    if (done) return;
    FILE *null = fopen("/dev/null", "w");
    if (null) stderr = null;
    done = 1;
}

#endif
