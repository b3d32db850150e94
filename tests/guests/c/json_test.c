/* Native test of the C SDK's JSON reader (sdk/c/skillhost_json.c), run by tests/guests.rs.
 * Every document is parsed from an exact-size heap copy, and every proper prefix of it must
 * be refused with a message: a read past the end would be caught by the sanitizer. */
#include <stdio.h>
#include <stdlib.h>

#include "skillhost.h"

static int failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "json_test.c:%d: CHECK failed: %s\n", __LINE__, #cond);      \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* Parse `text` from an exact-size heap copy (no NUL after it). */
static skh_json_doc *parse(const char *text, char *err, size_t err_len) {
    size_t n = strlen(text);
    char *copy = malloc(n ? n : 1);
    memcpy(copy, text, n);
    skh_json_doc *doc = skh_json_parse(copy, n, err, err_len);
    free(copy);
    return doc;
}

/* Every proper prefix of a valid document is an error with a message (no crash, no read past). */
static void prefixes_fail(const char *text) {
    size_t n = strlen(text);
    for (size_t k = 0; k < n; k++) {
        char *copy = malloc(k ? k : 1);
        memcpy(copy, text, k);
        char err[128];
        skh_json_doc *doc = skh_json_parse(copy, k, err, sizeof err);
        /* "12" is a valid document whose prefix "1" is valid too: only the structure is checked */
        if (doc) {
            skh_json_kind kind = skh_kind(skh_json_root(doc));
            CHECK(kind == SKH_JSON_NUMBER);
            skh_json_free(doc);
        } else {
            CHECK(err[0] != '\0');
        }
        free(copy);
    }
}

static void refused(const char *text, const char *want) {
    char err[128];
    skh_json_doc *doc = parse(text, err, sizeof err);
    CHECK(doc == NULL);
    if (!strstr(err, want)) {
        fprintf(stderr, "for %s: error %s lacks %s\n", text, err, want);
        failures++;
    }
    skh_json_free(doc);
}

int main(void) {
    char err[128];
    const char *doc_text =
        "{\"name\": \"Ada \\\"L\\\" \\\\ \\/ \\b\\f\\n\\r\\t\", \"n\": -1.25e1, \"i\": 42, \"big\": 1e300,"
        " \"ok\": true, \"no\": false, \"nil\": null, \"list\": [1, [2, [3]], {\"k\": \"v\"}, []],"
        " \"u\": \"\\u00e9\\u4e2d\\ud83d\\ude00\", \"lone\": \"\\ud800x\", \"nul\": \"a\\u0000b\","
        " \"dup\": 1, \"dup\": 2, \"empty\": {}}";
    skh_json_doc *doc = parse(doc_text, err, sizeof err);
    CHECK(doc != NULL);
    const skh_json *root = skh_json_root(doc);
    CHECK(skh_kind(root) == SKH_JSON_OBJECT);
    CHECK(strcmp(skh_get_str(root, "name", ""), "Ada \"L\" \\ / \b\f\n\r\t") == 0);
    CHECK(skh_get_num(root, "n", 0) == -12.5);
    CHECK(skh_get_int(root, "i", 0) == 42);
    CHECK(skh_get_int(root, "n", 7) == 7);   /* not integral */
    CHECK(skh_get_int(root, "big", 7) == 7); /* out of int64 range */
    CHECK(skh_get_int(root, "name", 7) == 7);
    CHECK(skh_get_bool(root, "ok", false) == true);
    CHECK(skh_get_bool(root, "no", true) == false);
    CHECK(skh_is_null(skh_get(root, "nil")));
    CHECK(!skh_is_null(skh_get(root, "absent")));
    CHECK(skh_kind(skh_get(root, "absent")) == SKH_JSON_MISSING);
    const skh_json *list = skh_get(root, "list");
    CHECK(skh_len(list) == 4);
    int64_t three = 0;
    CHECK(skh_int(skh_at(skh_at(skh_at(list, 1), 1), 0), &three) && three == 3);
    CHECK(strcmp(skh_get_str(skh_at(list, 2), "k", ""), "v") == 0);
    CHECK(skh_len(skh_at(list, 3)) == 0 && skh_kind(skh_at(list, 3)) == SKH_JSON_ARRAY);
    CHECK(skh_at(list, 4) == NULL);
    CHECK(strcmp(skh_get_str(root, "u", ""), "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80") == 0);
    CHECK(strcmp(skh_get_str(root, "lone", ""), "\xef\xbf\xbdx") == 0);
    const skh_json *nul = skh_get(root, "nul");
    CHECK(skh_len(nul) == 3 && memcmp(skh_str(nul), "a\0b", 3) == 0);
    CHECK(skh_get_int(root, "dup", 0) == 2);
    CHECK(skh_len(skh_get(root, "empty")) == 0 && skh_kind(skh_get(root, "empty")) == SKH_JSON_OBJECT);
    const skh_json_member *first = skh_member(root, 0);
    CHECK(first && strcmp(first->key, "name") == 0);
    /* NULL and wrong kinds are the absent answer, never a crash */
    CHECK(skh_get(NULL, "x") == NULL && skh_at(NULL, 0) == NULL && skh_len(NULL) == 0);
    CHECK(skh_str(skh_get(root, "i")) == NULL && skh_get(list, "x") == NULL);
    skh_json_free(doc);
    prefixes_fail(doc_text);

    refused("", "expected a value");
    refused("{\"a\" 1}", "expected ':'");
    refused("[1 2]", "expected ',' or ']'");
    refused("{\"a\":1,}", "expected a string key");
    refused("\"abc", "unterminated string");
    refused("\"a\\x\"", "invalid escape");
    refused("\"\\u12\"", "four hex digits");
    refused("\"tab\there\"", "control character");
    refused("01", "text after the JSON value");
    refused("1.", "digits after '.'");
    refused("-", "invalid number");
    refused("1e+", "exponent digits");
    refused("tru", "invalid literal");
    refused("nul", "invalid literal");
    refused("[1] x", "text after the JSON value");

    /* bounded depth: 64 levels parse, 65 are refused, 100000 do not overflow the stack */
    char deep[200001];
    for (int levels = 64; levels <= 65; levels++) {
        memset(deep, '[', (size_t)levels);
        memset(deep + levels, ']', (size_t)levels);
        deep[2 * levels] = '\0';
        skh_json_doc *d = parse(deep, err, sizeof err);
        CHECK((levels == 64) == (d != NULL));
        if (!d) CHECK(strstr(err, "nested deeper than 64 levels") != NULL);
        skh_json_free(d);
    }
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    deep[200000] = '\0';
    CHECK(parse(deep, err, sizeof err) == NULL);

    /* a NULL error buffer is fine */
    CHECK(skh_json_parse("x", 1, NULL, 0) == NULL);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("json reader: all checks passed\n");
    return 0;
}
