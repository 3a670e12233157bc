/* fuzz_shape — xent-tune's NxC parser (--shape and each shapes-file line).
 * Beyond not crashing: a shape it takes has n >= 1 and 1 <= c < 2^31, and
 * its printed form parses back to the same pair; text it takes holds only
 * blanks, one sign per number, digits and one 'x'. */
#include <ctype.h>
#include <stdint.h>
#include "tests/fuzz/require.h"
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/xent_tune_static.h"

static int plain_shape_text(const char *s) {
    while (isspace((unsigned char)*s)) s++;
    if (*s == '+' || *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    if (*s != 'x' && *s != 'X') return 0;
    s++;
    while (isspace((unsigned char)*s)) s++;
    if (*s == '+' || *s == '-') s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) s++;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
    return *s == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    quiet_stderr();
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    int64_t n = 0, c = 0;
    if (parse_shape(s, &n, &c) == 0) {
        require(n >= 1 && c >= 1 && c <= 0x7fffffffLL);
        require(plain_shape_text(s));
        char again[64];
        int64_t n2 = 0, c2 = 0;
        snprintf(again, sizeof again, "%lldx%lld", (long long)n, (long long)c);
        require(parse_shape(again, &n2, &c2) == 0 && n2 == n && c2 == c);
    }
    free(s);
    return 0;
}
