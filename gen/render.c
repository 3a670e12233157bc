/* gen/render.c — a configuration and a problem become CUDA source. */
#include "gen/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every kernel family and its template: what a tune-cache key's family
 * names, so the key's stamp hashes that family's source. */
static const struct {
    const char *family;
    const char *text;
} families[] = {
    {"xent_fwd", xent_template_xent_fwd},
};

const char *xent_family_template(const char *family) {
    for (size_t i = 0; family && i < sizeof families / sizeof families[0]; i++)
        if (!strcmp(families[i].family, family)) return families[i].text;
    return NULL;
}

uint64_t xent_text_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64 bits */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int xent_template_hash(const char *family, char *buf, size_t len) {
    const char *text = xent_family_template(family);
    if (!text || !buf || len < 17) return XENT_EINVAL;
    snprintf(buf, len, "%016llx", (unsigned long long)xent_text_hash(text, strlen(text)));
    return XENT_OK;
}

/* Rows this short are instruction bound: a compile-time class count lets the
 * template drop the items no row fills and unroll its per-row loops exactly.
 * The price is a kernel per c (plans are per problem already, and the kernel
 * cache keys on these defines). */
#define FIXED_C_MAX 256

char *xent_render_defines(const xent_config *cfg, const xent_problem *p) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    for (int i = 0; i < xent_nknobs; i++)
        if (xent_knobs[i].stage == KNOB_RENDER)
            fprintf(f, "#define XENT_%s %d\n", xent_knobs[i].name, xent_knob_get(cfg, &xent_knobs[i]));
    /* PERSIST=2 is launched like 1 but compiled with its own row loop */
    fprintf(f, "#define XENT_DYNAMIC %d\n", cfg->persist == 2);
    fprintf(f, "#define XENT_LOGIT %d\n#define XENT_TARGET %d\n#define XENT_REDUCTION %d\n",
            (int)p->logits, (int)p->targets, (int)p->reduction);
    fprintf(f, "#define XENT_WEIGHTS %d\n#define XENT_SMOOTHING %d\n#define XENT_LSE %d\n",
            p->has_weights ? 1 : 0, p->label_smoothing > 0.0f ? 1 : 0, p->write_lse ? 1 : 0);
    if (p->c <= FIXED_C_MAX) fprintf(f, "#define XENT_C %d\n", (int)p->c);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *xent_render(const xent_config *cfg, const xent_problem *p) {
    char *defines = xent_render_defines(cfg, p);
    if (!defines) return NULL;
    size_t n = strlen(defines) + strlen(xent_template_xent_fwd) + 64;
    char *src = malloc(n);
    if (src) snprintf(src, n, "%s#line 1 \"xent_fwd.cu\"\n%s", defines, xent_template_xent_fwd);
    free(defines);
    return src;
}
