/*
 * skillhost-sdk for C: write a skillhost skill as one function.
 *
 * A skill is one function, `skh_execute`, in `app.c`; `skillhost skill build` compiles it with
 * this SDK and the generated bindings (`bindings/skill.{c,h}`, from `wit-bindgen c` against
 * skillhost:skill@0.1.0, checked in beside this header) into `skill.wasm`:
 *
 *     #include "skillhost.h"
 *
 *     skh_result *skh_execute(skh_ctx *ctx, const skh_json *params) {
 *         const char *name = skh_get_str(params, "name", "");
 *         if (!*name) return skh_invalid_params(ctx, "name: must not be blank");
 *         skh_info(ctx, "greeting %s", name);
 *         skh_result *r = skh_success(ctx, "hello, %s", name);
 *         skh_meta(r, "length", "%zu", strlen(name));
 *         return r;
 *     }
 *
 * `params` is the JSON object the host has already validated against SKILL.md (defaults
 * filled in), read with the small JSON reader below. Return a result built with
 * skh_success / skh_failure / skh_require_more (plus skh_meta, skh_remember), or an error
 * built with skh_invalid_params (the message tells the caller how to fix the call) or
 * skh_failed. Host calls (memory search, session, log) return NULL on success or a
 * `const skh_error *` whose `text` is a sentence fit for the model ("denied: memory.search
 * needs the `memory: read` capability ..."); `return skh_failed_host(ctx, err);` passes it on.
 *
 * WHO FREES WHAT (the whole rule):
 *   1. Everything the SDK hands you (the params tree, strings, memory hits, session values
 *      and keys, errors, results) belongs to the call and is freed by the SDK after
 *      skh_execute returns and the host has copied the result. Never free() any of it, and
 *      do not keep pointers to it past the call (nothing survives a call anyway: each call
 *      gets a fresh instance).
 *   2. Everything you pass to the SDK (format arguments, keys, values, tags, JSON text) is
 *      copied before the function returns; it stays yours, free it whenever you like.
 *   3. skh_alloc(ctx, n) gives you call-lifetime scratch memory under rule 1; memory you
 *      malloc() yourself is yours (free it, or let the instance's end reclaim it).
 *   4. The one exception: a document from skh_json_parse (for JSON you read yourself, such
 *      as a session value) is yours; release it with skh_json_free. Values inside it live
 *      until then.
 *
 * Out of memory inside the SDK aborts the call with "skillhost sdk: out of memory" on
 * stderr (the host shows it in the trap message). So does a failed assert() in your code
 * (`skill build` keeps asserts on: -UNDEBUG): the host appends the guest's stderr tail to
 * the error, so its text reaches the model.
 *
 * Reading files, the network or environment variables (wasi-libc) works only as far as
 * SKILL.md declares it and the user granted it.
 */
#ifndef SKILLHOST_SDK_H
#define SKILLHOST_SDK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SKH_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define SKH_PRINTF(fmt, args)
#endif

/* ------------------------------------------------------------------------------------------
 * JSON reader. Parses objects, arrays, strings (all escapes, \uXXXX with surrogate pairs,
 * decoded to UTF-8), numbers, true/false/null. Reads exactly `len` bytes, never past them;
 * nesting deeper than SKH_JSON_MAX_DEPTH is an error, not a stack overflow.
 *
 * Every accessor accepts NULL and a value of the wrong kind, and then returns the "absent"
 * answer (NULL, 0, false or the fallback), so lookups chain safely:
 *     skh_get_str(skh_get(params, "user"), "name", "anonymous")
 * ---------------------------------------------------------------------------------------- */

#define SKH_JSON_MAX_DEPTH 64

typedef enum skh_json_kind {
    SKH_JSON_MISSING = 0, /* a NULL value: absent key, index out of range */
    SKH_JSON_NULL,
    SKH_JSON_BOOL,
    SKH_JSON_NUMBER,
    SKH_JSON_STRING,
    SKH_JSON_ARRAY,
    SKH_JSON_OBJECT,
} skh_json_kind;

typedef struct skh_json skh_json;
typedef struct skh_json_member skh_json_member;

/* A JSON value. Read it through the functions below; the fields are the SDK's. */
struct skh_json {
    skh_json_kind kind;
    size_t len; /* bytes of a string (without its NUL), items of an array, members of an object */
    union {
        bool boolean;
        double number;
        const char *string;       /* UTF-8, NUL-terminated (may also contain \u0000: use len) */
        const skh_json *items;    /* array */
        const skh_json_member *members; /* object, in document order */
    } as;
};

struct skh_json_member {
    const char *key; /* decoded, NUL-terminated */
    size_t key_len;
    skh_json value;
};

skh_json_kind skh_kind(const skh_json *v);
/* The object's member `key` (the last one if a key repeats), NULL when absent. */
const skh_json *skh_get(const skh_json *object, const char *key);
/* Items of an array, members of an object, bytes of a string; 0 otherwise. */
size_t skh_len(const skh_json *v);
/* Item `i` of an array, NULL when out of range. */
const skh_json *skh_at(const skh_json *array, size_t i);
/* Member `i` of an object (document order), NULL when out of range. */
const skh_json_member *skh_member(const skh_json *object, size_t i);
/* The string, NULL unless `v` is a string (its length: skh_len). */
const char *skh_str(const skh_json *v);
/* The number in *out; false (and *out untouched) unless `v` is a number. */
bool skh_num(const skh_json *v, double *out);
/* An integral number in [INT64_MIN, 2^63) in *out; false for 1.5, "3", 1e300... */
bool skh_int(const skh_json *v, int64_t *out);
bool skh_is_true(const skh_json *v);  /* exactly `true` */
bool skh_is_null(const skh_json *v);  /* exactly `null` (not a missing value) */

/* Member shortcuts with a fallback for "absent or another kind". */
const char *skh_get_str(const skh_json *object, const char *key, const char *fallback);
double skh_get_num(const skh_json *object, const char *key, double fallback);
int64_t skh_get_int(const skh_json *object, const char *key, int64_t fallback);
bool skh_get_bool(const skh_json *object, const char *key, bool fallback);

/* A document you parsed yourself (rule 4: yours, release it with skh_json_free). */
typedef struct skh_json_doc skh_json_doc;
/* Parse `len` bytes of `text`. NULL on error, with a message such as
 * "unexpected character 'x' at byte 12" in `err` (when err_len > 0; always NUL-terminated). */
skh_json_doc *skh_json_parse(const char *text, size_t len, char *err, size_t err_len);
const skh_json *skh_json_root(const skh_json_doc *doc);
void skh_json_free(skh_json_doc *doc);

/* ------------------------------------------------------------------------------------------
 * The call.
 * ---------------------------------------------------------------------------------------- */

typedef struct skh_ctx skh_ctx;
typedef struct skh_result skh_result;
typedef struct skh_error skh_error;

/* The session this call belongs to (stable across a run's steps and a resume). */
const char *skh_session_id(const skh_ctx *ctx);
/* Step number in the agent loop, 1-based; 0 when run directly (`skillhost skill run`). */
uint32_t skh_step(const skh_ctx *ctx);
/* The parameters' JSON text as the host sent it. */
const char *skh_params_text(const skh_ctx *ctx);
/* `n` bytes of call-lifetime memory (rule 3), zeroed. */
void *skh_alloc(skh_ctx *ctx, size_t n);
/* printf into call-lifetime memory (rule 1). */
const char *skh_sprintf(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* `s` as a JSON string literal with its quotes ("null" for NULL), in call-lifetime memory:
 * for building JSON output. */
const char *skh_json_quote(skh_ctx *ctx, const char *s);

/* ------------------------------------------------------------------------------------------
 * Results and errors. Each returns a result owned by the call (rule 1); return it from
 * skh_execute. Returning NULL is a `failed` error ("the skill returned no result").
 * ---------------------------------------------------------------------------------------- */

/* The skill did what was asked; the text is the answer. */
skh_result *skh_success(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* The skill ran but could not do what was asked; the text says why. */
skh_result *skh_failure(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* The skill needs more input from the user; the text is the question. */
skh_result *skh_require_more(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* The parameters were wrong; say how to fix the call ("since: expected an ISO time"). */
skh_result *skh_invalid_params(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* The skill failed for another reason; say what happened. */
skh_result *skh_failed(skh_ctx *ctx, const char *fmt, ...) SKH_PRINTF(2, 3);
/* `failed` with a host error's text. */
skh_result *skh_failed_host(skh_ctx *ctx, const skh_error *err);

/* Add a machine-readable key/value fact (ignored on an error result). Returns `r`. */
skh_result *skh_meta(skh_result *r, const char *key, const char *fmt, ...) SKH_PRINTF(3, 4);

typedef enum skh_memory_kind {
    SKH_PREFERENCE, /* something the user prefers */
    SKH_FACT,       /* a fact about the project or its environment */
    SKH_TASK_RESULT,/* the outcome of a task: counts, conclusions, key lines */
    SKH_SNAPSHOT,   /* a snapshot of intermediate findings */
    SKH_PITFALL,    /* a trap someone fell into, and how to avoid it */
    SKH_GENERAL,    /* anything else */
} skh_memory_kind;

/* Propose a memory (kept only with `memory: write`, within the skill's limits). `priority`
 * 0 (trivia) to 5 (never dropped silently), clamped; `tags`: a NULL-terminated array, or
 * NULL for none. Summarize: counts and key lines, never raw input. Returns `r`. */
skh_result *skh_remember(skh_result *r, skh_memory_kind kind, uint8_t priority, const char *content,
                         const char *const *tags);

/* ------------------------------------------------------------------------------------------
 * Host calls. Each returns NULL on success, or an error owned by the call (rule 1).
 * ---------------------------------------------------------------------------------------- */

typedef enum skh_host_error_kind {
    SKH_DENIED,        /* the skill lacks the capability; the message names it */
    SKH_INVALID_INPUT, /* the arguments were unacceptable (too large, empty key...) */
    SKH_UNAVAILABLE,   /* the host could not complete the call; retrying may help */
} skh_host_error_kind;

struct skh_error {
    skh_host_error_kind kind;
    const char *message; /* the host's message */
    const char *text;    /* "denied: <message>" / "invalid input: ..." / "host unavailable: ..." */
};

typedef struct skh_strings {
    size_t len;
    const char *const *items;
} skh_strings;

typedef struct skh_memory_hit {
    const char *id;
    skh_memory_kind kind;
    const char *content;
    uint8_t priority;
    skh_strings tags;
    float score;        /* relevance to the query; higher is more relevant */
    uint64_t created_ms; /* creation time, ms since the Unix epoch */
} skh_memory_hit;

typedef struct skh_memory_hits {
    size_t len;
    const skh_memory_hit *items; /* best first */
} skh_memory_hits;

/* Long-term memory records most relevant to `query`, at most `limit` (needs `memory: read`). */
const skh_error *skh_memory_search(skh_ctx *ctx, const char *query, uint32_t limit, skh_memory_hits *hits);
/* The session value under `key` in *value, or NULL when there is none (needs `session`). */
const skh_error *skh_session_get(skh_ctx *ctx, const char *key, const char **value);
/* Store `value` under `key` in the current session (needs `session`). */
const skh_error *skh_session_set(skh_ctx *ctx, const char *key, const char *value);
/* All keys of the current session, sorted (needs `session`). */
const skh_error *skh_session_keys(skh_ctx *ctx, skh_strings *keys);

typedef enum skh_level { SKH_TRACE, SKH_DEBUG, SKH_INFO, SKH_WARN, SKH_ERROR } skh_level;
/* One log line for the call report and the audit log (always available; the host caps it). */
void skh_log(skh_ctx *ctx, skh_level level, const char *fmt, ...) SKH_PRINTF(3, 4);
#define skh_debug(ctx, ...) skh_log((ctx), SKH_DEBUG, __VA_ARGS__)
#define skh_info(ctx, ...) skh_log((ctx), SKH_INFO, __VA_ARGS__)
#define skh_warn(ctx, ...) skh_log((ctx), SKH_WARN, __VA_ARGS__)

/* ------------------------------------------------------------------------------------------
 * You write this one.
 * ---------------------------------------------------------------------------------------- */
skh_result *skh_execute(skh_ctx *ctx, const skh_json *params);

#ifdef __cplusplus
}
#endif

#endif /* SKILLHOST_SDK_H */
