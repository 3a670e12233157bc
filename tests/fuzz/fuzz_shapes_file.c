/* fuzz_shapes_file — xent-tune --shapes-file: the bytes become a file read
 * through /proc/self/fd. Beyond not crashing: a file taken gives at most
 * 4096 shapes, each one a non-comment line's shape as parse_shape reads it,
 * in order; a file holding a NUL byte or a line over 255 characters is
 * refused, never read in part. */
#include <stdint.h>
#include "tests/fuzz/require.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fuzz/xent_tune_static.h"

static cli o;

/* The shapes the file should give, line by line, or -1 if it must be refused. */
static int expected(const char *text, size_t size, int64_t (*want)[2], int cap) {
    if (memchr(text, 0, size)) return -1;
    int count = 0;
    const char *line = text, *end = text + size;
    while (line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = nl ? (size_t)(nl - line) : (size_t)(end - line);
        char buf[300];
        size_t keep = 0;
        while (keep < len && line[keep] != '\r') keep++;
        if (keep > MAX_SHAPE_LINE) return -1;
        memcpy(buf, line, keep);
        buf[keep] = 0;
        size_t k = strcspn(buf, "#"); /* a comment runs to the end of its line */
        while (k && (buf[k - 1] == ' ' || buf[k - 1] == '\t')) k--;
        buf[k] = 0;
        char *s = buf + strspn(buf, " \t");
        if (*s) {
            if (count == cap || parse_shape(s, &want[count][0], &want[count][1])) return -1;
            count++;
        }
        line += len + 1;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int64_t want[MAX_SHAPES][2];
    quiet_stderr();
    int fd = memfd_create("shapes", 0);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    o.nshapes = 0;
    int rc = read_shapes_file(&o, path);
    close(fd);
    int count = expected((const char *)data, size, want, MAX_SHAPES);
    require((rc == 0) == (count >= 0));
    if (rc == 0) {
        require(o.nshapes == count);
        for (int i = 0; i < count; i++) require(o.shapes[i][0] == want[i][0] && o.shapes[i][1] == want[i][1]);
    }
    return 0;
}
