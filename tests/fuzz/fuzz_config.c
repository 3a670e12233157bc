/* fuzz_config — xent_config_parse, the config text of --config, of tune
 * cache rows and of import. Beyond not crashing: a config it takes prints
 * (xent_config_format) as text that parses back to the same config, and
 * every NAME=VALUE in the text it took holds that knob's value as written
 * (a value past int range must not wrap around to a legal one). */
#include <errno.h>
#include <stdint.h>
#include "tests/fuzz/require.h"
#include <stdlib.h>
#include <string.h>

#include "gen/space.h"

static void values_as_written(const char *text, const xent_config *cfg) {
    for (int i = 0; i < xent_nknobs; i++) {
        const xent_knob *k = &xent_knobs[i];
        size_t len = strlen(k->name);
        for (const char *s = text; (s = strstr(s, k->name)); s += len) {
            int starts = s == text || s[-1] == ' ' || s[-1] == '\t' || s[-1] == ',';
            if (!starts || s[len] != '=') continue;
            errno = 0;
            long long v = strtoll(s + len + 1, NULL, 10);
            require(errno == 0 && v == xent_knob_get(cfg, k));
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    xent_config cfg, again;
    char why[200], printed[400];
    if (xent_config_parse(text, &cfg, why, sizeof why) == XENT_OK) {
        require(xent_config_format(&cfg, printed, sizeof printed) == XENT_OK);
        require(xent_config_parse(printed, &again, why, sizeof why) == XENT_OK);
        require(!memcmp(&cfg, &again, sizeof cfg));
        values_as_written(text, &cfg);
    } else {
        require(memchr(why, 0, sizeof why) && why[0]); /* a refusal says why */
    }
    free(text);
    return 0;
}
