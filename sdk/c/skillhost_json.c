/*
 * skillhost-sdk for C: the JSON reader (see skillhost.h). It depends on libc only, so it can
 * be tested natively. A document is one arena: every node, decoded string and array lives in
 * blocks freed together by skh_json_free.
 *
 * The parser is a recursive descent bounded by SKH_JSON_MAX_DEPTH; every read checks the
 * cursor against the end first, so input that is not NUL-terminated, truncated or hostile
 * is an error message, never a read past the buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "skillhost.h"

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    _Alignas(max_align_t) unsigned char data[];
} arena_block;

struct skh_json_doc {
    arena_block *blocks;
    skh_json root;
};

static void *arena_alloc(skh_json_doc *doc, size_t n) {
    const size_t align = _Alignof(max_align_t);
    n = (n + align - 1) & ~(align - 1);
    arena_block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        b = malloc(sizeof(arena_block) + cap);
        if (!b) return NULL;
        b->next = doc->blocks;
        b->used = 0;
        b->cap = cap;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

typedef struct parser {
    const char *at, *end, *start;
    skh_json_doc *doc;
    char *err;
    size_t err_len;
    bool failed;
} parser;

static bool fail(parser *p, const char *what) {
    if (!p->failed && p->err && p->err_len) {
        size_t offset = (size_t)(p->at - p->start);
        if (p->at >= p->end)
            snprintf(p->err, p->err_len, "%s at the end of the text (byte %zu)", what, offset);
        else if ((unsigned char)*p->at >= 0x20 && (unsigned char)*p->at < 0x7f)
            snprintf(p->err, p->err_len, "%s: unexpected '%c' at byte %zu", what, *p->at, offset);
        else
            snprintf(p->err, p->err_len, "%s: unexpected byte 0x%02x at byte %zu", what,
                     (unsigned char)*p->at, offset);
    }
    p->failed = true;
    return false;
}

static bool oom(parser *p) {
    if (!p->failed && p->err && p->err_len) snprintf(p->err, p->err_len, "out of memory");
    p->failed = true;
    return false;
}

static void skip_ws(parser *p) {
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r')) p->at++;
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(p->end - p->at) < n || memcmp(p->at, word, n) != 0) return fail(p, "invalid literal");
    p->at += n;
    return true;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

static size_t put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string starting at the opening quote; decoded into the arena (never longer than its
 * source: an escape is at least as long as the UTF-8 it stands for). */
static bool parse_string(parser *p, const char **out, size_t *out_len) {
    p->at++; /* the opening quote */
    const char *scan = p->at;
    while (scan < p->end && *scan != '"') {
        if (*scan == '\\') scan++;
        if (scan < p->end) scan++;
    }
    if (scan >= p->end) {
        p->at = p->end;
        return fail(p, "unterminated string");
    }
    char *buf = arena_alloc(p->doc, (size_t)(scan - p->at) + 1);
    if (!buf) return oom(p);
    size_t n = 0;
    while (p->at < scan) {
        unsigned char c = (unsigned char)*p->at;
        if (c < 0x20) return fail(p, "control character in a string (escape it)");
        if (c != '\\') {
            buf[n++] = (char)c;
            p->at++;
            continue;
        }
        if (scan - p->at < 2) return fail(p, "unterminated escape");
        char e = p->at[1];
        p->at += 2;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            if (scan - p->at < 4) return fail(p, "\\u needs four hex digits");
            int hi = hex4(p->at);
            if (hi < 0) return fail(p, "\\u needs four hex digits");
            p->at += 4;
            uint32_t cp = (uint32_t)hi;
            if (hi >= 0xD800 && hi <= 0xDBFF) {
                /* a high surrogate: a low one must follow, else it stands for U+FFFD */
                int lo = (scan - p->at >= 6 && p->at[0] == '\\' && p->at[1] == 'u') ? hex4(p->at + 2) : -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + (((uint32_t)hi - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    p->at += 6;
                } else {
                    cp = 0xFFFD;
                }
            } else if (hi >= 0xDC00 && hi <= 0xDFFF) {
                cp = 0xFFFD; /* a lone low surrogate */
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            p->at--;
            return fail(p, "invalid escape");
        }
    }
    buf[n] = '\0';
    p->at = scan + 1; /* the closing quote */
    *out = buf;
    *out_len = n;
    return true;
}

static bool parse_number(parser *p, double *out) {
    const char *s = p->at;
    if (p->at < p->end && *p->at == '-') p->at++;
    if (p->at >= p->end) return fail(p, "invalid number");
    if (*p->at == '0') {
        p->at++;
    } else if (*p->at >= '1' && *p->at <= '9') {
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9') p->at++;
    } else {
        return fail(p, "invalid number");
    }
    if (p->at < p->end && *p->at == '.') {
        p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9') return fail(p, "invalid number (digits after '.')");
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9') p->at++;
    }
    if (p->at < p->end && (*p->at == 'e' || *p->at == 'E')) {
        p->at++;
        if (p->at < p->end && (*p->at == '+' || *p->at == '-')) p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9') return fail(p, "invalid number (exponent digits)");
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9') p->at++;
    }
    /* strtod needs a NUL-terminated copy: the source need not be terminated. */
    size_t n = (size_t)(p->at - s);
    char small[64];
    char *copy = n < sizeof small ? small : malloc(n + 1);
    if (!copy) return oom(p);
    memcpy(copy, s, n);
    copy[n] = '\0';
    *out = strtod(copy, NULL);
    if (copy != small) free(copy);
    return true;
}

static bool parse_value(parser *p, skh_json *v, int depth);

/* Items or members are collected in a growing heap vector, then moved into the arena. */
static bool grow(parser *p, void **vec, size_t *cap, size_t len, size_t size) {
    if (len < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *n = realloc(*vec, ncap * size);
    if (!n) return oom(p);
    *vec = n;
    *cap = ncap;
    return true;
}

static bool finish_vec(parser *p, void *vec, size_t len, size_t size, const void **out) {
    if (len == 0) {
        *out = NULL;
        free(vec);
        return true;
    }
    void *dst = arena_alloc(p->doc, len * size);
    if (!dst) {
        free(vec);
        return oom(p);
    }
    memcpy(dst, vec, len * size);
    free(vec);
    *out = dst;
    return true;
}

static bool parse_array(parser *p, skh_json *v, int depth) {
    p->at++;
    skh_json *items = NULL;
    size_t len = 0, cap = 0;
    skip_ws(p);
    if (p->at < p->end && *p->at == ']') {
        p->at++;
    } else {
        for (;;) {
            if (!grow(p, (void **)&items, &cap, len, sizeof *items)) goto error;
            if (!parse_value(p, &items[len], depth + 1)) goto error;
            len++;
            skip_ws(p);
            if (p->at < p->end && *p->at == ',') {
                p->at++;
                continue;
            }
            if (p->at < p->end && *p->at == ']') {
                p->at++;
                break;
            }
            fail(p, "expected ',' or ']' in an array");
            goto error;
        }
    }
    v->kind = SKH_JSON_ARRAY;
    v->len = len;
    return finish_vec(p, items, len, sizeof *items, (const void **)&v->as.items);
error:
    free(items);
    return false;
}

static bool parse_object(parser *p, skh_json *v, int depth) {
    p->at++;
    skh_json_member *members = NULL;
    size_t len = 0, cap = 0;
    skip_ws(p);
    if (p->at < p->end && *p->at == '}') {
        p->at++;
    } else {
        for (;;) {
            skip_ws(p);
            if (p->at >= p->end || *p->at != '"') {
                fail(p, "expected a string key in an object");
                goto error;
            }
            if (!grow(p, (void **)&members, &cap, len, sizeof *members)) goto error;
            skh_json_member *m = &members[len];
            if (!parse_string(p, &m->key, &m->key_len)) goto error;
            skip_ws(p);
            if (p->at >= p->end || *p->at != ':') {
                fail(p, "expected ':' after an object key");
                goto error;
            }
            p->at++;
            if (!parse_value(p, &m->value, depth + 1)) goto error;
            len++;
            skip_ws(p);
            if (p->at < p->end && *p->at == ',') {
                p->at++;
                continue;
            }
            if (p->at < p->end && *p->at == '}') {
                p->at++;
                break;
            }
            fail(p, "expected ',' or '}' in an object");
            goto error;
        }
    }
    v->kind = SKH_JSON_OBJECT;
    v->len = len;
    return finish_vec(p, members, len, sizeof *members, (const void **)&v->as.members);
error:
    free(members);
    return false;
}

static bool parse_value(parser *p, skh_json *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > SKH_JSON_MAX_DEPTH) return fail(p, "nested deeper than " "64" " levels");
    skip_ws(p);
    if (p->at >= p->end) return fail(p, "expected a value");
    switch (*p->at) {
    case '{': return parse_object(p, v, depth);
    case '[': return parse_array(p, v, depth);
    case '"':
        v->kind = SKH_JSON_STRING;
        return parse_string(p, &v->as.string, &v->len);
    case 't':
        v->kind = SKH_JSON_BOOL;
        v->as.boolean = true;
        return literal(p, "true");
    case 'f':
        v->kind = SKH_JSON_BOOL;
        return literal(p, "false");
    case 'n':
        v->kind = SKH_JSON_NULL;
        return literal(p, "null");
    default:
        if (*p->at == '-' || (*p->at >= '0' && *p->at <= '9')) {
            v->kind = SKH_JSON_NUMBER;
            return parse_number(p, &v->as.number);
        }
        return fail(p, "expected a value");
    }
}

skh_json_doc *skh_json_parse(const char *text, size_t len, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    skh_json_doc *doc = calloc(1, sizeof *doc);
    if (!doc) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return NULL;
    }
    parser p = {.at = text, .end = text + len, .start = text, .doc = doc, .err = err, .err_len = err_len};
    if (!text && len) {
        p.end = p.at;
    }
    if (parse_value(&p, &doc->root, 1)) {
        skip_ws(&p);
        if (p.at < p.end) fail(&p, "text after the JSON value");
    }
    if (p.failed) {
        skh_json_free(doc);
        return NULL;
    }
    return doc;
}

const skh_json *skh_json_root(const skh_json_doc *doc) { return doc ? &doc->root : NULL; }

void skh_json_free(skh_json_doc *doc) {
    if (!doc) return;
    for (arena_block *b = doc->blocks; b;) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(doc);
}

skh_json_kind skh_kind(const skh_json *v) { return v ? v->kind : SKH_JSON_MISSING; }

const skh_json *skh_get(const skh_json *object, const char *key) {
    if (!object || object->kind != SKH_JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (size_t i = object->len; i-- > 0;) {
        const skh_json_member *m = &object->as.members[i];
        if (m->key_len == n && memcmp(m->key, key, n) == 0) return &m->value;
    }
    return NULL;
}

size_t skh_len(const skh_json *v) {
    if (!v) return 0;
    switch (v->kind) {
    case SKH_JSON_STRING:
    case SKH_JSON_ARRAY:
    case SKH_JSON_OBJECT: return v->len;
    default: return 0;
    }
}

const skh_json *skh_at(const skh_json *array, size_t i) {
    if (!array || array->kind != SKH_JSON_ARRAY || i >= array->len) return NULL;
    return &array->as.items[i];
}

const skh_json_member *skh_member(const skh_json *object, size_t i) {
    if (!object || object->kind != SKH_JSON_OBJECT || i >= object->len) return NULL;
    return &object->as.members[i];
}

const char *skh_str(const skh_json *v) { return v && v->kind == SKH_JSON_STRING ? v->as.string : NULL; }

bool skh_num(const skh_json *v, double *out) {
    if (!v || v->kind != SKH_JSON_NUMBER) return false;
    if (out) *out = v->as.number;
    return true;
}

bool skh_int(const skh_json *v, int64_t *out) {
    double d;
    if (!skh_num(v, &d) || !isfinite(d) || d != floor(d)) return false;
    /* -2^63 is exact as a double; 2^63 is not representable as int64 */
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return false;
    if (out) *out = (int64_t)d;
    return true;
}

bool skh_is_true(const skh_json *v) { return v && v->kind == SKH_JSON_BOOL && v->as.boolean; }

bool skh_is_null(const skh_json *v) { return v && v->kind == SKH_JSON_NULL; }

const char *skh_get_str(const skh_json *object, const char *key, const char *fallback) {
    const char *s = skh_str(skh_get(object, key));
    return s ? s : fallback;
}

double skh_get_num(const skh_json *object, const char *key, double fallback) {
    double d;
    return skh_num(skh_get(object, key), &d) ? d : fallback;
}

int64_t skh_get_int(const skh_json *object, const char *key, int64_t fallback) {
    int64_t i;
    return skh_int(skh_get(object, key), &i) ? i : fallback;
}

bool skh_get_bool(const skh_json *object, const char *key, bool fallback) {
    const skh_json *v = skh_get(object, key);
    return v && v->kind == SKH_JSON_BOOL ? v->as.boolean : fallback;
}
