/* grammar_tools.c: the grammar of tool calls in Qwen3's format (grammar.h's iris_grammar_from_tools).
 *
 * A call is what Qwen3-VL's chat template writes for one (and what the model was taught):
 *     <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * where NAME is one of the tools' names and ARGS a value of that tool's "parameters" schema
 * (compiled by iris_grammar_from_schema, then copied into this grammar: its rules and byte sets
 * renumbered).  Parallel calls follow one another separated by "\n", as the template joins them.
 *
 * Required (tool_choice "required" or a named function): the output is one call (or, parallel,
 * one or more), then the end token.  Auto: any text that does not contain "<tool_call>", and
 * once it does, the rest is a call (then more calls when parallel, then the end).  The text is a
 * right-linear automaton over the bytes of "<tool_call>" matched so far (T_k: k bytes matched;
 * no proper prefix of "<tool_call>" is also its suffix, so a mismatch goes back to T_0, or to T_1
 * on '<'); every T_k may end the output, and its recursion sits in tail position, so the matcher's
 * stack stays one frame deep however long the text.  The single added token "<tool_call>" of
 * Qwen's vocabulary (not special: the vocabulary trie holds it) spells the same bytes.
 *
 * Owns: nothing past the call; the grammar it returns is the caller's (iris_grammar_free).
 * Does not: render tools into the prompt (formats/chat.c) or parse calls out of the text
 * (server/tool_calls.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model/grammar_internal.h"

static const char OPEN[] = "<tool_call>";

/* Copy sub's rules, elements and byte sets into g; returns the rule of sub's root, -1 when out of
 * memory. */
static int import_grammar(iris_grammar *g, const iris_grammar *sub) {
    int set0 = g->n_sets, rule0 = g->n_rules;
    for (int i = 0; i < sub->n_sets; i++)
        if (gb_set(g, &sub->sets[i]) < 0) return -1;
    for (int r = 0; r < sub->n_rules; r++)
        if (gb_rule(g) < 0) return -1;
    gseq q = {0};
    int rc = 0;
    for (int r = 0; r < sub->n_rules && !rc; r++)
        for (int a = 0; a < sub->rules[r].n && !rc; a++) {
            for (const gelem *e = &sub->el[sub->rules[r].alts[a]]; e->type != GE_END; e++) {
                if (e->type == GE_CHARS) gseq_chars(g, &q, set0 + e->arg);
                else gseq_ref(&q, rule0 + e->arg);
            }
            rc = gb_alt(g, rule0 + r, &q);
        }
    free(q.e);
    return rc ? -1 : rule0 + sub->root;
}

typedef struct tb {
    iris_grammar *g;
    gseq q;
    int bad;
} tb;

static int new_rule(tb *b) {
    int r = gb_rule(b->g);
    if (r < 0) b->bad = 1;
    return r;
}

static void lit(tb *b, const char *s) { gseq_lit(b->g, &b->q, s, strlen(s)); }

static void end_alt(tb *b, int rule) {
    if (gb_alt(b->g, rule, &b->q)) b->bad = 1;
}

/* The byte set of every byte but a and c. */
static int all_but(tb *b, int a, int c) {
    gset s;
    memset(&s, 0xFF, sizeof s);
    s.w[a >> 5] &= ~(1u << (a & 31));
    s.w[c >> 5] &= ~(1u << (c & 31));
    int id = gb_set(b->g, &s);
    if (id < 0) b->bad = 1;
    return id;
}

/* T_0 of the auto mode's text; `call` is what follows a complete "<tool_call>". */
static int text_rules(tb *b, int call) {
    enum { K = sizeof OPEN - 1 };
    int t[K];
    for (int k = 0; k < K; k++) t[k] = new_rule(b);
    if (b->bad) return -1;
    for (int k = 0; k < K; k++) {
        end_alt(b, t[k]);  /* the text may end here */
        gseq_lit(b->g, &b->q, &OPEN[k], 1);
        gseq_ref(&b->q, k + 1 < K ? t[k + 1] : call);
        end_alt(b, t[k]);
        if (k > 0) {
            lit(b, "<");
            gseq_ref(&b->q, t[1]);
            end_alt(b, t[k]);
        }
        gseq_chars(b->g, &b->q, all_but(b, (unsigned char)OPEN[k], '<'));
        gseq_ref(&b->q, t[0]);
        end_alt(b, t[k]);
    }
    return b->bad ? -1 : t[0];
}

/* Check one entry of tools and compile its parameters into g: the rule of its arguments. */
static int tool_args(tb *b, json_t *tool, size_t i, const char **name, iris_err *err) {
    json_t *fn = json_object_get(tool, "function");
    if (!json_is_object(fn)) fn = tool;
    *name = json_string_value(json_object_get(fn, "name"));
    if (!*name || !**name || strpbrk(*name, "\"\\"))
        return iris_err_set(err, IRIS_EINVAL, "tools[%zu]: a function needs a \"name\" without quotes or "
                            "backslashes", i);
    json_t *params = json_object_get(fn, "parameters");
    /* no parameters: OpenAI's empty parameter list, so the arguments are {} */
    char *text = params && !json_is_null(params)
                     ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY)
                     : strdup("{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}");
    if (!text) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    iris_grammar *sub = NULL;
    iris_err sub_err = {0};
    int rc = iris_grammar_from_schema(text, &sub, &sub_err);
    free(text);
    if (rc) return iris_err_set(err, rc, "tools[%zu].function.parameters (\"%.64s\"): %s", i, *name, sub_err.msg);
    int r = import_grammar(b->g, sub);
    iris_grammar_free(sub);
    if (r < 0) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    return r;
}

int iris_grammar_from_tools(const char *tools_json, const char *only, int required, int parallel,
                            iris_grammar **out, iris_err *err) {
    *out = NULL;
    json_error_t je;
    json_t *tools = json_loads(tools_json ? tools_json : "", 0, &je);
    if (!json_is_array(tools) || json_array_size(tools) == 0) {
        json_decref(tools);
        return iris_err_set(err, IRIS_EINVAL, "tools: a non-empty array of tools is needed");
    }
    tb b = {.g = calloc(1, sizeof(iris_grammar))};
    if (!b.g) {
        json_decref(tools);
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    gb_init(b.g);
    int rc = 0, n_alts = 0;
    int body = new_rule(&b);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        const char *name = NULL;
        int args = tool_args(&b, tool, i, &name, err);
        if (args < 0) {
            rc = err && err->code ? err->code : IRIS_EINVAL;
            break;
        }
        if (only && strcmp(only, name)) continue;
        lit(&b, "{\"name\": \"");
        lit(&b, name);
        lit(&b, "\", \"arguments\": ");
        gseq_ref(&b.q, args);
        lit(&b, "}");
        end_alt(&b, body);
        n_alts++;
    }
    if (!rc && n_alts == 0) rc = iris_err_set(err, IRIS_EINVAL, "tool_choice: no tool is named \"%s\"", only);
    /* call: "\n" body "\n</tool_call>" more, after "<tool_call>"; calls: "<tool_call>" call;
     * more: "" | "\n" calls (parallel). */
    int call = rc ? -1 : new_rule(&b), calls = rc ? -1 : new_rule(&b), more = rc ? -1 : new_rule(&b);
    if (!rc && !b.bad) {
        lit(&b, "\n");
        gseq_ref(&b.q, body);
        lit(&b, "\n</tool_call>");
        gseq_ref(&b.q, more);
        end_alt(&b, call);
        lit(&b, OPEN);
        gseq_ref(&b.q, call);
        end_alt(&b, calls);
        end_alt(&b, more);
        if (parallel) {
            lit(&b, "\n");
            gseq_ref(&b.q, calls);
            end_alt(&b, more);
        }
        b.g->root = required || only ? calls : text_rules(&b, call);
    }
    free(b.q.e);
    json_decref(tools);
    if (!rc && (b.bad || b.g->root < 0))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory building the tools grammar");
    if (rc) {
        iris_grammar_free(b.g);
        return rc;
    }
    *out = b.g;
    return IRIS_OK;
}
