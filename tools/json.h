/* json.h — the one JSON writer of the tools: nesting, commas and string
 * escapes are kept here, so every --json output is valid JSON (RFC 8259).
 * A number that JSON cannot hold (NaN, an infinity) is written as null. */
#ifndef XENT_TOOLS_JSON_H
#define XENT_TOOLS_JSON_H

#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH];  /* values written so far at each depth */
    char close[JSON_MAX_DEPTH]; /* '}' or ']' for each open container */
} json;

/* Start a document on f. Each value call names its key inside an object and
 * passes NULL inside an array or for the document's top value. */
void json_start(json *j, FILE *f);
void json_object(json *j, const char *key);
void json_array(json *j, const char *key);
/* Close the innermost object or array; a newline ends the document. */
void json_end(json *j);
void json_string(json *j, const char *key, const char *value); /* NULL: null */
void json_number(json *j, const char *key, double value);      /* non-finite: null */
void json_int(json *j, const char *key, long long value);
void json_bool(json *j, const char *key, int value);

#endif
