/* json.c — see json.h. The top container's members go one a line, so that
 * a long list reads (and diffs) by line; deeper ones stay on theirs. */
#include "tools/json.h"

#include <math.h>

static void put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* The separator and key before a value at the current depth. */
static void member(json *j, const char *key) {
    int d = j->depth;
    if (d > 0 && j->count[d]++) fputc(',', j->f);
    if (d == 1)
        fputs("\n  ", j->f);
    else if (d > 1 && j->count[d] > 1)
        fputc(' ', j->f);
    if (key && d > 0 && j->close[d - 1] == '}') {
        put_string(j->f, key);
        fputs(": ", j->f);
    }
}

static void finish(json *j) {
    if (j->depth == 0) fputc('\n', j->f);
}

void json_start(json *j, FILE *f) {
    j->f = f;
    j->depth = 0;
    j->count[0] = 0;
}

static void open_container(json *j, const char *key, char open, char close) {
    member(j, key);
    fputc(open, j->f);
    if (j->depth + 1 < JSON_MAX_DEPTH) {
        j->close[j->depth] = close;
        j->count[++j->depth] = 0;
    }
}

void json_object(json *j, const char *key) { open_container(j, key, '{', '}'); }
void json_array(json *j, const char *key) { open_container(j, key, '[', ']'); }

void json_end(json *j) {
    if (j->depth == 0) return;
    if (j->depth == 1 && j->count[1]) fputc('\n', j->f);
    fputc(j->close[--j->depth], j->f);
    finish(j);
}

void json_string(json *j, const char *key, const char *value) {
    member(j, key);
    if (value)
        put_string(j->f, value);
    else
        fputs("null", j->f);
    finish(j);
}

void json_number(json *j, const char *key, double value) {
    member(j, key);
    if (isfinite(value))
        fprintf(j->f, "%.10g", value);
    else
        fputs("null", j->f);
    finish(j);
}

void json_int(json *j, const char *key, long long value) {
    member(j, key);
    fprintf(j->f, "%lld", value);
    finish(j);
}

void json_bool(json *j, const char *key, int value) {
    member(j, key);
    fputs(value ? "true" : "false", j->f);
    finish(j);
}
