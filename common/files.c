/* common/files.c — where xent's files go, and making their folders. */
#include "common/files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "xent.h"

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int xent_cache_home(char *buf, size_t len, const char **from) {
    const char *xdg = env("XDG_CACHE_HOME"), *home = env("HOME"), *name = NULL;
    int n = -1;
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, len, "%s/xent", xdg), name = "XDG_CACHE_HOME";
    else if (home)
        n = snprintf(buf, len, "%s/.cache/xent", home), name = "HOME";
    if (from) *from = name;
    if (n >= 0 && (size_t)n < len) return XENT_OK;
    if (len) buf[0] = '\0';
    return name ? XENT_EINVAL : XENT_ENOTFOUND;
}

void xent_mkdirs(const char *path, int last) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    if (last) mkdir(tmp, 0755);
}
