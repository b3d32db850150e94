/*
 * skillhost-sdk for C: the call, results and host calls (see skillhost.h), on top of the
 * `wit-bindgen c` bindings in bindings/skill.{c,h}.
 *
 * Memory: the call context owns an arena (a list of malloc'd blocks) for everything the SDK
 * hands out. At the end of the export, the result is copied into the bindings' own types
 * (malloc'd strings the generated post-return function frees after the host has read them)
 * and the arena is released, so no SDK pointer outlives the call.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "skill.h"
#include "skillhost.h"

typedef struct block {
    struct block *next;
    _Alignas(max_align_t) unsigned char data[];
} block;

typedef struct meta_item {
    const char *key, *value;
} meta_item;

typedef struct memory_item {
    skh_memory_kind kind;
    uint8_t priority;
    const char *content;
    size_t tag_count;
    const char **tags;
} memory_item;

typedef enum result_kind { RESULT_OK, RESULT_INVALID_PARAMS, RESULT_FAILED } result_kind;

struct skh_result {
    skh_ctx *ctx;
    result_kind kind;
    skillhost_skill_types_status_t status;
    const char *text;
    meta_item *meta;
    size_t meta_len, meta_cap;
    memory_item *memories;
    size_t memories_len, memories_cap;
};

struct skh_ctx {
    block *blocks;
    const char *session_id;
    uint32_t step;
    const char *params_text;
};

static _Noreturn void out_of_memory(void) {
    fputs("skillhost sdk: out of memory\n", stderr);
    abort();
}

void *skh_alloc(skh_ctx *ctx, size_t n) {
    block *b = calloc(1, sizeof(block) + (n ? n : 1));
    if (!b) out_of_memory();
    b->next = ctx->blocks;
    ctx->blocks = b;
    return b->data;
}

static void ctx_release(skh_ctx *ctx) {
    for (block *b = ctx->blocks; b;) {
        block *next = b->next;
        free(b);
        b = next;
    }
    ctx->blocks = NULL;
}

static const char *vformat(skh_ctx *ctx, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) {
        va_end(again);
        return "(unformattable text)";
    }
    char *out = skh_alloc(ctx, (size_t)n + 1);
    vsnprintf(out, (size_t)n + 1, fmt, again);
    va_end(again);
    return out;
}

static const char *copy_str(skh_ctx *ctx, const char *s, size_t n) {
    char *out = skh_alloc(ctx, n + 1);
    memcpy(out, s, n);
    out[n] = '\0';
    return out;
}

const char *skh_sprintf(skh_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *s = vformat(ctx, fmt, ap);
    va_end(ap);
    return s;
}

const char *skh_json_quote(skh_ctx *ctx, const char *s) {
    if (!s) return "null";
    size_t n = strlen(s);
    char *out = skh_alloc(ctx, n * 6 + 3), *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (*p < 0x20) o += sprintf(o, "\\u%04x", *p);
            else *o++ = (char)*p;
        }
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

const char *skh_session_id(const skh_ctx *ctx) { return ctx->session_id; }
uint32_t skh_step(const skh_ctx *ctx) { return ctx->step; }
const char *skh_params_text(const skh_ctx *ctx) { return ctx->params_text; }

static skh_result *new_result(skh_ctx *ctx, result_kind kind, skillhost_skill_types_status_t status,
                              const char *text) {
    skh_result *r = skh_alloc(ctx, sizeof *r);
    r->ctx = ctx;
    r->kind = kind;
    r->status = status;
    r->text = text;
    return r;
}

#define RESULT_FN(fn, kind, status)                                                        \
    skh_result *fn(skh_ctx *ctx, const char *fmt, ...) {                                   \
        va_list ap;                                                                        \
        va_start(ap, fmt);                                                                 \
        const char *text = vformat(ctx, fmt, ap);                                          \
        va_end(ap);                                                                        \
        return new_result(ctx, kind, status, text);                                        \
    }

RESULT_FN(skh_success, RESULT_OK, SKILLHOST_SKILL_TYPES_STATUS_SUCCESS)
RESULT_FN(skh_failure, RESULT_OK, SKILLHOST_SKILL_TYPES_STATUS_FAILURE)
RESULT_FN(skh_require_more, RESULT_OK, SKILLHOST_SKILL_TYPES_STATUS_REQUIRE_MORE)
RESULT_FN(skh_invalid_params, RESULT_INVALID_PARAMS, SKILLHOST_SKILL_TYPES_STATUS_FAILURE)
RESULT_FN(skh_failed, RESULT_FAILED, SKILLHOST_SKILL_TYPES_STATUS_FAILURE)

skh_result *skh_failed_host(skh_ctx *ctx, const skh_error *err) {
    return new_result(ctx, RESULT_FAILED, SKILLHOST_SKILL_TYPES_STATUS_FAILURE,
                      err ? err->text : "a host call failed without an error");
}

static void *grow(skh_ctx *ctx, void *items, size_t len, size_t *cap, size_t size) {
    if (len < *cap) return items;
    size_t ncap = *cap ? *cap * 2 : 4;
    void *n = skh_alloc(ctx, ncap * size);
    if (len) memcpy(n, items, len * size);
    *cap = ncap;
    return n;
}

skh_result *skh_meta(skh_result *r, const char *key, const char *fmt, ...) {
    if (!r || r->kind != RESULT_OK || !key) return r;
    va_list ap;
    va_start(ap, fmt);
    const char *value = vformat(r->ctx, fmt, ap);
    va_end(ap);
    r->meta = grow(r->ctx, r->meta, r->meta_len, &r->meta_cap, sizeof *r->meta);
    r->meta[r->meta_len++] = (meta_item){copy_str(r->ctx, key, strlen(key)), value};
    return r;
}

skh_result *skh_remember(skh_result *r, skh_memory_kind kind, uint8_t priority, const char *content,
                         const char *const *tags) {
    if (!r || r->kind != RESULT_OK || !content) return r;
    if (kind > SKH_GENERAL) kind = SKH_GENERAL;
    size_t count = 0;
    while (tags && tags[count]) count++;
    const char **copies = skh_alloc(r->ctx, (count ? count : 1) * sizeof *copies);
    for (size_t i = 0; i < count; i++) copies[i] = copy_str(r->ctx, tags[i], strlen(tags[i]));
    r->memories = grow(r->ctx, r->memories, r->memories_len, &r->memories_cap, sizeof *r->memories);
    r->memories[r->memories_len++] = (memory_item){
        kind, priority > 5 ? 5 : priority, copy_str(r->ctx, content, strlen(content)), count, copies};
    return r;
}

/* ---- conversions between the bindings' types and the SDK's -------------------------- */

/* A bindings string (UTF-8, not NUL-terminated) into the arena. */
static const char *from_wit(skh_ctx *ctx, const skill_string_t *s) { return copy_str(ctx, (const char *)s->ptr, s->len); }

/* A borrowed bindings string over `s` (for arguments: the host copies them during the call). */
static skill_string_t borrow(const char *s) {
    skill_string_t out;
    skill_string_set(&out, s ? s : "");
    return out;
}

/* A malloc'd bindings string (for the result, which the generated post-return frees). */
static skill_string_t owned(const char *s) {
    skill_string_t out;
    skill_string_dup(&out, s ? s : "");
    if (s && *s && !out.ptr) out_of_memory();
    return out;
}

static const skh_error *host_error(skh_ctx *ctx, skillhost_skill_types_host_error_t *e) {
    skh_error *err = skh_alloc(ctx, sizeof *err);
    static const char *const prefix[] = {"denied: ", "invalid input: ", "host unavailable: "};
    switch (e->tag) {
    case SKILLHOST_SKILL_TYPES_HOST_ERROR_DENIED: err->kind = SKH_DENIED; break;
    case SKILLHOST_SKILL_TYPES_HOST_ERROR_INVALID_INPUT: err->kind = SKH_INVALID_INPUT; break;
    default: err->kind = SKH_UNAVAILABLE; break;
    }
    err->message = from_wit(ctx, &e->val.denied); /* every case carries a string */
    err->text = skh_sprintf(ctx, "%s%s", prefix[err->kind], err->message);
    skillhost_skill_types_host_error_free(e);
    return err;
}

static skh_strings strings_from_wit(skh_ctx *ctx, const skill_string_t *items, size_t len) {
    const char **out = skh_alloc(ctx, (len ? len : 1) * sizeof *out);
    for (size_t i = 0; i < len; i++) out[i] = from_wit(ctx, &items[i]);
    return (skh_strings){len, out};
}

const skh_error *skh_memory_search(skh_ctx *ctx, const char *query, uint32_t limit, skh_memory_hits *hits) {
    skill_string_t q = borrow(query);
    skillhost_skill_memory_list_memory_hit_t ret;
    skillhost_skill_memory_host_error_t err;
    hits->len = 0;
    hits->items = NULL;
    if (!skillhost_skill_memory_search(&q, limit, &ret, &err)) return host_error(ctx, &err);
    skh_memory_hit *out = skh_alloc(ctx, (ret.len ? ret.len : 1) * sizeof *out);
    for (size_t i = 0; i < ret.len; i++) {
        skillhost_skill_types_memory_hit_t *h = &ret.ptr[i];
        out[i] = (skh_memory_hit){
            .id = from_wit(ctx, &h->id),
            .kind = (skh_memory_kind)h->kind,
            .content = from_wit(ctx, &h->content),
            .priority = h->priority,
            .tags = strings_from_wit(ctx, h->tags.ptr, h->tags.len),
            .score = h->score,
            .created_ms = h->created_ms,
        };
    }
    hits->len = ret.len;
    hits->items = out;
    skillhost_skill_memory_list_memory_hit_free(&ret);
    return NULL;
}

const skh_error *skh_session_get(skh_ctx *ctx, const char *key, const char **value) {
    skill_string_t k = borrow(key);
    skill_option_string_t ret;
    skillhost_skill_session_host_error_t err;
    *value = NULL;
    if (!skillhost_skill_session_get(&k, &ret, &err)) return host_error(ctx, &err);
    if (ret.is_some) {
        *value = from_wit(ctx, &ret.val);
        skill_string_free(&ret.val);
    }
    return NULL;
}

const skh_error *skh_session_set(skh_ctx *ctx, const char *key, const char *value) {
    skill_string_t k = borrow(key), v = borrow(value);
    skillhost_skill_session_host_error_t err;
    if (!skillhost_skill_session_set(&k, &v, &err)) return host_error(ctx, &err);
    return NULL;
}

const skh_error *skh_session_keys(skh_ctx *ctx, skh_strings *keys) {
    skill_list_string_t ret;
    skillhost_skill_session_host_error_t err;
    keys->len = 0;
    keys->items = NULL;
    if (!skillhost_skill_session_keys(&ret, &err)) return host_error(ctx, &err);
    *keys = strings_from_wit(ctx, ret.ptr, ret.len);
    skill_list_string_free(&ret);
    return NULL;
}

void skh_log(skh_ctx *ctx, skh_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const char *text = vformat(ctx, fmt, ap);
    va_end(ap);
    skill_string_t message = borrow(text);
    if (level > SKH_ERROR) level = SKH_ERROR;
    skillhost_skill_log_write((skillhost_skill_log_level_t)level, &message);
}

/* The bindings are generated with --no-object-file (a binary object would be the one
 * non-text file of the SDK); `skillhost skill build` embeds the component type with
 * `wasm-tools component embed` instead, so the symbol the bindings use to pull that object
 * in is defined here. */
void __component_type_object_force_link_skill(void);
void __component_type_object_force_link_skill(void) {}

/* ---- the export ------------------------------------------------------------------------ */

static bool finish(skh_result *r, skill_skill_result_t *ret, skill_skill_error_t *err) {
    if (r->kind != RESULT_OK) {
        err->tag = r->kind == RESULT_INVALID_PARAMS ? SKILLHOST_SKILL_TYPES_SKILL_ERROR_INVALID_PARAMS
                                                    : SKILLHOST_SKILL_TYPES_SKILL_ERROR_FAILED;
        err->val.invalid_params = owned(r->text);
        return false;
    }
    memset(ret, 0, sizeof *ret);
    ret->output = owned(r->text);
    ret->status = r->status;
    if (r->meta_len) {
        ret->metadata.ptr = calloc(r->meta_len, sizeof *ret->metadata.ptr);
        if (!ret->metadata.ptr) out_of_memory();
        ret->metadata.len = r->meta_len;
        for (size_t i = 0; i < r->meta_len; i++) {
            ret->metadata.ptr[i].f0 = owned(r->meta[i].key);
            ret->metadata.ptr[i].f1 = owned(r->meta[i].value);
        }
    }
    if (r->memories_len) {
        ret->new_memories.ptr = calloc(r->memories_len, sizeof *ret->new_memories.ptr);
        if (!ret->new_memories.ptr) out_of_memory();
        ret->new_memories.len = r->memories_len;
        for (size_t i = 0; i < r->memories_len; i++) {
            const memory_item *m = &r->memories[i];
            skillhost_skill_types_new_memory_t *out = &ret->new_memories.ptr[i];
            out->kind = (skillhost_skill_types_memory_kind_t)m->kind;
            out->content = owned(m->content);
            out->priority = m->priority;
            if (m->tag_count) {
                out->tags.ptr = calloc(m->tag_count, sizeof *out->tags.ptr);
                if (!out->tags.ptr) out_of_memory();
                out->tags.len = m->tag_count;
                for (size_t t = 0; t < m->tag_count; t++) out->tags.ptr[t] = owned(m->tags[t]);
            }
        }
    }
    return true;
}

bool exports_skill_execute(skill_invocation_t *call, skill_skill_result_t *ret, skill_skill_error_t *err) {
    skh_ctx ctx = {0};
    ctx.session_id = from_wit(&ctx, &call->session_id);
    ctx.step = call->step;
    ctx.params_text = from_wit(&ctx, &call->params);
    char message[160];
    skh_json_doc *doc = skh_json_parse((const char *)call->params.ptr, call->params.len, message, sizeof message);
    skill_invocation_free(call);
    skh_result *r;
    if (!doc) {
        r = skh_invalid_params(&ctx, "params are not JSON: %s", message);
    } else {
        r = skh_execute(&ctx, skh_json_root(doc));
        if (!r) r = skh_failed(&ctx, "the skill returned no result (skh_execute returned NULL)");
    }
    bool ok = finish(r, ret, err);
    skh_json_free(doc);
    ctx_release(&ctx);
    return ok;
}
