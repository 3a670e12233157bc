/* xent-tune.h — what xent-tune's callers (scripts, the tests) may rely on:
 * its exit statuses. 0 is success and 1 any failure not named here. */
#ifndef XENT_TOOLS_XENT_TUNE_H
#define XENT_TOOLS_XENT_TUNE_H

enum {
    EXIT_USAGE = 2,  /* bad usage: an option, a value, a shape, a shapes file */
    EXIT_DEVICE = 3, /* no driver or device, or not the GPU --gpu named */
    EXIT_CACHE = 4   /* the tune cache could not be opened, read or written */
};

#endif
