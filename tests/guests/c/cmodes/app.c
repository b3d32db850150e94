/* skillhost's C SDK test skill: one mode per SDK feature (the same as pymodes). */
#include <assert.h>
#include <string.h>

#include "skillhost.h"

static int lookup(const char *key) {
    /* a C bug: the key is never there */
    assert(strcmp(key, "present") == 0 && "the key is present");
    return 1;
}

skh_result *skh_execute(skh_ctx *ctx, const skh_json *params) {
    const char *mode = skh_get_str(params, "mode", "");
    const char *arg = skh_get_str(params, "arg", "");
    if (strcmp(mode, "greet") == 0) {
        skh_info(ctx, "greeting %s", arg);
        skh_result *r = skh_success(ctx, "hello, %s from %s step %u", arg, skh_session_id(ctx), skh_step(ctx));
        skh_meta(r, "chars", "%zu", strlen(arg));
        const char *tags[] = {"c", NULL};
        skh_remember(r, SKH_FACT, 2, skh_sprintf(ctx, "greeted %s in c", arg), tags);
        return r;
    }
    if (strcmp(mode, "bad") == 0) return skh_invalid_params(ctx, "arg: give a number, e.g. {\"arg\": \"3\"}");
    if (strcmp(mode, "boom") == 0) return skh_success(ctx, "%d", lookup("missing"));
    if (strcmp(mode, "search") == 0) {
        skh_memory_hits hits;
        const skh_error *err = skh_memory_search(ctx, arg, 5, &hits);
        if (err) return skh_failed_host(ctx, err);
        const char *text = "";
        for (size_t i = 0; i < hits.len; i++)
            text = skh_sprintf(ctx, "%s%s%s", text, i ? "\n" : "", hits.items[i].content);
        return skh_meta(skh_success(ctx, "%s", text), "hits", "%zu", hits.len);
    }
    if (strcmp(mode, "session") == 0) {
        const char *before, *after;
        skh_strings keys;
        const skh_error *err = skh_session_get(ctx, "py", &before);
        if (!err) err = skh_session_set(ctx, "py", arg);
        if (!err) err = skh_session_get(ctx, "py", &after);
        if (!err) err = skh_session_keys(ctx, &keys);
        if (err) return skh_failed_host(ctx, err);
        const char *list = "";
        for (size_t i = 0; i < keys.len; i++)
            list = skh_sprintf(ctx, "%s%s%s", list, i ? ", " : "", skh_json_quote(ctx, keys.items[i]));
        return skh_success(ctx, "{\"before\": %s, \"after\": %s, \"keys\": [%s]}", skh_json_quote(ctx, before),
                           skh_json_quote(ctx, after), list);
    }
    return skh_invalid_params(ctx, "mode: unknown mode %s", skh_json_quote(ctx, mode));
}
