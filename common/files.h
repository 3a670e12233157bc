/*
 * common — file-system helpers that the kernel cache (gen/), the tune cache
 * (tunecache/) and the tools share, so that they agree on where xent keeps
 * its files. Depends on nothing but the public header.
 */
#ifndef XENT_COMMON_FILES_H
#define XENT_COMMON_FILES_H

#include <stddef.h>

/* xent's folder in the user's cache: $XDG_CACHE_HOME/xent when that is an
 * absolute path (the XDG spec says a relative one is invalid and to be
 * ignored), else $HOME/.cache/xent. *from (from may be NULL) gets the name
 * of the variable the path came from. XENT_ENOTFOUND when neither variable
 * is set, XENT_EINVAL when the path does not fit in len bytes; buf is then "". */
int xent_cache_home(char *buf, size_t len, const char **from);

/* Create the folders of path, as mkdir -p does, the last component too when
 * last is nonzero (path names a folder), else only its parents (path names a
 * file). Best effort: a folder that cannot be made shows when it is used. */
void xent_mkdirs(const char *path, int last);

#endif
