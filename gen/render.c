/* gen/render.c — a configuration and a problem become CUDA source. */
#include "gen/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every kernel family and its template: what a tune-cache key's family
 * names, so the key's stamp hashes that family's source. */
static const struct {
    const char *family;
    xent_family f;
    const char *text;
} families[] = {
    {"xent_fwd", XENT_FAMILY_FWD, xent_template_xent_fwd},
    {"xent_grad", XENT_FAMILY_GRAD, xent_template_xent_grad}, /* "xent_grad/fused", "xent_grad/bwd", ... */
};

/* The row of families[] a key's family names ("xent_grad/fused" is xent_grad's), or -1. */
static int family_row(const char *family) {
    for (size_t i = 0; family && i < sizeof families / sizeof families[0]; i++) {
        size_t n = strlen(families[i].family);
        if (!strncmp(families[i].family, family, n) && (family[n] == '\0' || family[n] == '/')) return (int)i;
    }
    return -1;
}

const char *xent_family_template(const char *family) {
    int i = family_row(family);
    return i < 0 ? NULL : families[i].text;
}

xent_family xent_family_named(const char *name) {
    int i = family_row(name);
    return i < 0 ? XENT_FAMILY_FWD : families[i].f;
}

#define FNV_BASIS 1469598103934665603ull /* FNV-1a, 64 bits */
static uint64_t fnv_byte(uint64_t h, unsigned char c) { return (h ^ c) * 1099511628211ull; }

uint64_t xent_text_hash(const void *data, size_t n) {
    const unsigned char *s = data;
    uint64_t h = FNV_BASIS;
    for (size_t i = 0; i < n; i++) h = fnv_byte(h, s[i]);
    return h;
}

/* Length of the comment at s, or 0 when s starts none. */
static size_t comment_len(const char *s) {
    if (s[0] != '/' || (s[1] != '*' && s[1] != '/')) return 0;
    const char *end = s[1] == '*' ? strstr(s + 2, "*/") : strchr(s, '\n');
    return end ? (size_t)(end - s) + (s[1] == '*' ? 2 : 0) : strlen(s);
}

uint64_t xent_code_hash(const char *src) {
    uint64_t h = FNV_BASIS;
    int space = 0, started = 0; /* a run of whitespace or comments is pending; a token was hashed */
    char quote = 0;
    for (const char *s = src; *s;) {
        size_t skip = quote ? 0 : comment_len(s);
        if (skip || (!quote && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))) {
            s += skip ? skip : 1;
            space = 1;
            continue;
        }
        if (space && started) h = fnv_byte(h, ' ');
        space = 0;
        started = 1;
        if (quote && *s == '\\' && s[1])
            h = fnv_byte(h, (unsigned char)*s++);
        else if (*s == '"' || *s == '\'')
            quote = quote == *s ? 0 : quote ? quote : *s;
        h = fnv_byte(h, (unsigned char)*s++);
    }
    return h;
}

int xent_template_hash(const char *family, char *buf, size_t len) {
    const char *text = xent_family_template(family);
    if (!text || !buf || len < 17) return XENT_EINVAL;
    snprintf(buf, len, "%016llx", (unsigned long long)xent_code_hash(text));
    return XENT_OK;
}

/* Rows this short are instruction bound: a compile-time class count lets the
 * template drop the items no row fills and unroll its per-row loops exactly.
 * The price is a kernel per c (plans are per problem already, and the kernel
 * cache keys on these defines). */
#define FIXED_C_MAX 256

const char *xent_family_source(xent_family f) {
    return f == XENT_FAMILY_GRAD ? xent_template_xent_grad : xent_template_xent_fwd;
}

const char *xent_family_file(xent_family f) { return f == XENT_FAMILY_GRAD ? "xent_grad.cu" : "xent_fwd.cu"; }

/* xent_grad: its knobs (SPLIT, the cluster, is compiled in), what to compute
 * and the options; c is a launch argument. */
static void grad_defines(FILE *f, const xent_config *cfg, const xent_problem *p) {
    for (int i = 0; i < xent_nknobs; i++)
        if (xent_knobs[i].families & KNOB_GRAD)
            fprintf(f, "#define XENT_%s %d\n", xent_knobs[i].name, xent_knob_get(cfg, &xent_knobs[i]));
    static const int mode[] = {0, 1, 2, 0, 1}; /* combine and rescale have entry points of their own */
    fprintf(f, "#define XENT_MODE %d\n#define XENT_ZLOSS %d\n#define XENT_SOFTCAP %d\n#define XENT_SHARD %d\n",
            mode[p->op], p->z_loss > 0.0f, p->softcap > 0.0f, p->vocab != 0);
}

char *xent_render_defines(const xent_config *cfg, const xent_problem *p) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const int grad = xent_problem_family(p) == XENT_FAMILY_GRAD;
    if (grad) grad_defines(f, cfg, p);
    for (int i = 0; i < xent_nknobs && !grad; i++)
        if (xent_knobs[i].stage == KNOB_RENDER && (xent_knobs[i].families & KNOB_FWD))
            fprintf(f, "#define XENT_%s %d\n", xent_knobs[i].name, xent_knob_get(cfg, &xent_knobs[i]));
    /* SPLIT > 1 is launched with its split but compiled once for all of them */
    if (!grad) fprintf(f, "#define XENT_SEGMENTED %d\n", cfg->split > 1);
    fprintf(f, "#define XENT_LOGIT %d\n#define XENT_TARGET %d\n#define XENT_REDUCTION %d\n", (int)p->logits,
            (int)p->targets, (int)p->reduction);
    fprintf(f, "#define XENT_WEIGHTS %d\n#define XENT_SMOOTHING %d\n#define XENT_LSE %d\n", p->has_weights ? 1 : 0,
            p->label_smoothing > 0.0f ? 1 : 0, p->write_lse ? 1 : 0);
    if (p->c <= FIXED_C_MAX && !grad) fprintf(f, "#define XENT_C %d\n", (int)p->c);
    if (!grad && xent_fwd_one_block(cfg, p)) fprintf(f, "#define XENT_ONE_BLOCK 1\n");
    if (!grad && xent_fwd_edges_once(cfg, p)) fprintf(f, "#define XENT_EDGES_ONCE 1\n");
    if (!grad && xent_fwd_finish_apart(cfg, p)) fprintf(f, "#define XENT_FINISH_APART 1\n");
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *xent_render(const xent_config *cfg, const xent_problem *p) {
    char *defines = xent_render_defines(cfg, p);
    if (!defines) return NULL;
    xent_family fam = xent_problem_family(p);
    const char *tpl = xent_family_source(fam);
    size_t n = strlen(defines) + strlen(tpl) + 64;
    char *src = malloc(n);
    if (src) snprintf(src, n, "%s#line 1 \"%s\"\n%s", defines, xent_family_file(fam), tpl);
    free(defines);
    return src;
}
