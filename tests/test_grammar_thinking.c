/* test_grammar_thinking.c: structured output on a model that thinks: the grammar starts after the
 * reasoning's "</think>" (model/sampler.h iris_sampler_grammar_after, engine_req.c), as vLLM starts
 * it once its reasoning parser sees the reasoning end.
 *   - the sampler: before "</think>" a token the grammar refuses is drawn (whole rows, candidates,
 *     probabilities), no mask is asked for and an end token does not end the output; from the
 *     token after it only the grammar's tokens, and its end token stops the output;
 *   - the engine on tiny-qwen3 (plain Qwen3's template, which thinks; random weights, seeds at
 *     temperature 1 that reach "</think>"): the reasoning is text the grammar would have refused
 *     from the first token, the content right after "</think>" is the schema's JSON; with
 *     enable_thinking off or a plain text prompt the grammar starts at the first token; a
 *     vocabulary without "</think>" refuses a constrained request;
 *   - the server: a forced tool call (tool_choice "required", a named function) while the model
 *     thinks is accepted, and the reply carries reasoning_content and tool_calls, streamed too;
 *     response_format's JSON comes after the reasoning; the CLI's --json-schema likewise. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "formats/tokenizer.h"
#include "iris.h"
#include "model/grammar.h"
#include "model/sampler.h"
#include "server/reasoning.h"
#include "server_harness.h"
#include "test.h"

#define QWEN3 "tests/fixtures/models/tiny-qwen3/model"
#define THINK_END 505   /* "</think>" in tiny-qwen3's vocabulary */
#define IM_END 482      /* <|im_end|> */
#define N_VOCAB 512

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"name\",\"n\"],"
    "\"additionalProperties\":false}";

static iris_tok *qwen3_tok(void) {
    static iris_tok *tok;
    iris_err err = {0};
    if (!tok && iris_tok_load(QWEN3 "/tokenizer.json", &tok, &err)) iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return tok;
}

static iris_vocab *qwen3_vocab(void) {
    static iris_vocab *v;
    iris_err err = {0};
    if (!v && qwen3_tok() && iris_vocab_build(qwen3_tok(), N_VOCAB, &v, &err))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return v;
}

/* A sampler under SCHEMA (ignore_eos: only the grammar's end stops it), armed after "</think>"
 * when `after`. */
static iris_sampler *schema_sampler(int greedy, int after) {
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    p.do_sample = !greedy, p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.seed = 3, p.ignore_eos = 1;
    iris_stop_ids end = {.n = 1, .ids = {IM_END}};
    iris_sampler *s = NULL;
    iris_grammar *g = NULL;
    iris_err err = {0};
    if (iris_sampler_init(&s, &p, &end, N_VOCAB, &err) || iris_grammar_from_schema(SCHEMA, &g, &err) ||
        iris_sampler_set_grammar(s, g, qwen3_vocab(), &end, &err) ||
        (after && iris_sampler_grammar_after(s, THINK_END, &err)))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return s;
}

static int bit(const uint32_t *m, int t) { return (m[t >> 5] >> (t & 31)) & 1; }

IRIS_TEST(grammar_thinking_sampler) {
    REQUIRE(qwen3_vocab());
    int Z = iris_tok_find(qwen3_tok(), "Z"), brace = iris_tok_find(qwen3_tok(), "{");
    REQUIRE(Z >= 0 && brace >= 0);
    CHECK_EQ_INT(iris_tok_find(qwen3_tok(), "</think>"), THINK_END);
    float logits[N_VOCAB], probs[N_VOCAB];
    uint32_t mask[N_VOCAB / 32];
    iris_err err = {0};
    for (int i = 0; i < N_VOCAB; i++) logits[i] = 0.0f;
    logits[Z] = 10.0f;                               /* the model wants a token JSON cannot start with */
    int32_t ids[3] = {Z, brace, 7};
    float vals[3] = {10.0f, 0.0f, 0.0f};

    iris_sampler *s = schema_sampler(1, 1), *from_start = schema_sampler(1, 0);
    /* Reasoning: free.  No mask, the refused token drawn from the whole row and the candidates. */
    for (int step = 0; step < 3; step++) {
        CHECK_EQ_INT(iris_sampler_constrained(s), 0);
        CHECK_EQ_INT(iris_sampler_mask(s, mask, &err), 0);
        CHECK_EQ_INT(iris_sampler_sample(s, logits, NULL, &err), Z);
        CHECK_EQ_INT(iris_sampler_sample_top(s, ids, vals, 3, NULL, &err), Z);
        CHECK_EQ_INT(iris_sampler_accept(s, step == 1 ? IM_END : Z), IRIS_FINISH_NONE); /* no end stop yet */
    }
    /* The same grammar from the first token: Z is refused (the difference the arming makes). */
    CHECK_EQ_INT(iris_sampler_constrained(from_start), 1);
    CHECK_EQ_INT(iris_sampler_mask(from_start, mask, &err), 1);
    CHECK(!bit(mask, Z) && bit(mask, brace));
    CHECK(iris_sampler_sample(from_start, logits, NULL, &err) != Z);
    /* The arming token itself is free, then the grammar constrains from its start. */
    CHECK_EQ_INT(iris_sampler_accept(s, THINK_END), IRIS_FINISH_NONE);
    CHECK_EQ_INT(iris_sampler_constrained(s), 1);
    CHECK_EQ_INT(iris_sampler_mask(s, mask, &err), 1);
    CHECK(!bit(mask, Z) && bit(mask, brace) && !bit(mask, THINK_END) && !bit(mask, IM_END));
    int t = iris_sampler_sample(s, logits, NULL, &err);
    CHECKF(t >= 0 && t != Z && bit(mask, t), "token %d after </think>", t);
    CHECK_EQ_INT(iris_sampler_sample_top(s, ids, vals, 3, NULL, &err), IRIS_EINVAL); /* Z: not masked */
    /* A whole object, token by token, each allowed by its step's mask; then the end stops it. */
    iris_tok_ids enc = {0};
    const char *obj = "{\"name\": \"ab\", \"n\": 7}";
    REQUIRE(iris_tok_encode(qwen3_tok(), obj, strlen(obj), &enc, &err) == 0);
    for (size_t i = 0; i < enc.n; i++) {
        CHECK_EQ_INT(iris_sampler_mask(s, mask, &err), 1);
        CHECKF(bit(mask, enc.ids[i]), "token %zu (%d) of %s refused", i, enc.ids[i], obj);
        CHECK(!bit(mask, IM_END));
        CHECK_EQ_INT(iris_sampler_accept(s, enc.ids[i]), IRIS_FINISH_NONE);
    }
    CHECK_EQ_INT(iris_sampler_mask(s, mask, &err), 1);
    CHECK(bit(mask, IM_END) && !bit(mask, Z));
    CHECK_EQ_INT(iris_sampler_accept(s, IM_END), IRIS_FINISH_STOP);   /* whatever ignore_eos says */
    iris_tok_ids_free(&enc);
    iris_sampler_free(s);
    iris_sampler_free(from_start);

    /* Sampled (temperature 1): before the arming token the refused token holds its mass. */
    s = schema_sampler(0, 1);
    REQUIRE(iris_sampler_probs(s, logits, probs, &err) == 0);
    CHECKF(probs[Z] > 0.5f, "p(Z) %g before </think>", probs[Z]);
    iris_sampler_accept(s, THINK_END);
    REQUIRE(iris_sampler_probs(s, logits, probs, &err) == 0);
    CHECK(probs[Z] == 0.0f && probs[brace] > 0.0f);
    /* Armed only before the first token, and only with a grammar. */
    CHECK_EQ_INT(iris_sampler_grammar_after(s, THINK_END, &err), IRIS_EINVAL);
    iris_sampler_free(s);
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    REQUIRE(iris_sampler_init(&s, &p, NULL, N_VOCAB, &err) == 0);
    CHECK_EQ_INT(iris_sampler_grammar_after(s, THINK_END, &err), IRIS_EINVAL);
    iris_sampler_free(s);
}

/* ---- the engine ---------------------------------------------------------------------------------- */

typedef struct gen_out {
    char text[8192];    /* random weights write any byte, NUL too: len counts */
    size_t len;
    int first_end;      /* index of the first "</think>" token, -1 */
    int n_tokens, finish;
} gen_out;

static void collect(iris_request *r, gen_out *o) {
    size_t n = 0;
    iris_event ev;
    o->n_tokens = 0, o->first_end = -1, o->text[0] = 0;
    while (iris_request_next(r, &ev, 60000) == IRIS_OK) {
        if (ev.text_len && n + ev.text_len < sizeof o->text)
            memcpy(o->text + n, ev.text, ev.text_len), n += ev.text_len;
        o->text[n] = 0, o->len = n;
        if (ev.kind == IRIS_EVENT_DONE) {
            o->finish = ev.finish_reason;
            break;
        }
        if (ev.token == THINK_END && o->first_end < 0) o->first_end = o->n_tokens;
        o->n_tokens++;
    }
}

/* The object of SCHEMA, or a failed CHECK. */
static void check_object(const char *s, const char *what) {
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    json_t *name = json_object_get(j, "name"), *n = json_object_get(j, "n");
    CHECKF(j && json_is_string(name) && json_is_integer(n) && json_object_size(j) == 2, "%s: \"%s\" (%s)", what, s,
           je.text);
    json_decref(j);
}

/* 1 when SCHEMA's grammar from its start accepts s (the reasoning, were the grammar on from the
 * first token, would be a prefix of the object: "</think>" can only sit in a JSON string). */
static int grammar_accepts(const char *s, size_t n) {
    iris_grammar *g = NULL;
    iris_grammar_matcher *m = NULL;
    iris_err err = {0};
    if (iris_grammar_from_schema(SCHEMA, &g, &err) || iris_grammar_matcher_init(&m, g, qwen3_vocab(), &err))
        iris_test_fail(__FILE__, __LINE__, "%s", err.msg);
    int ok = m && iris_grammar_matcher_accept_bytes(m, s, n, NULL) == 0;
    iris_grammar_matcher_free(m);
    iris_grammar_free(g);
    return ok;
}

/* An engine on model with kv_blocks KV blocks (max_num_seqs too, when not 0), or NULL with the
 * failure recorded. */
static iris_engine *open_engine(const char *model, int kv_blocks, int max_num_seqs) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = model;
    o.kv_blocks = kv_blocks;
    if (max_num_seqs) o.max_num_seqs = max_num_seqs;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "engine open on %s: %s", model, err.msg);
    return e;
}

/* A request for SCHEMA's object: the user asks for it (the chat template renders the turn), or
 * prompt_text is the whole prompt when given. */
static void schema_params(iris_engine *e, const char *prompt_text, iris_request_params *p) {
    iris_request_params_default(e, p);
    if (prompt_text) p->prompt_text = prompt_text;
    else p->messages_json = "[{\"role\":\"user\",\"content\":\"Give me a JSON object.\"}]";
    p->sampling.json_schema = SCHEMA;
}

static int submit(iris_engine *e, int64_t seed, int no_thinking, const char *prompt_text, iris_request **r) {
    iris_request_params p;
    schema_params(e, prompt_text, &p);
    p.no_thinking = no_thinking;
    p.sampling.seed = seed;
    p.sampling.max_tokens = 700;
    p.sampling.do_sample = 1, p.sampling.temperature = 1.0f, p.sampling.top_k = 0, p.sampling.top_p = 1.0f;
    iris_err err = {0};
    int rc = iris_engine_submit(e, &p, r, &err);
    CHECKF(rc == 0, "seed %lld: %s", (long long)seed, err.msg);
    return rc;
}

IRIS_TEST(grammar_thinking_engine) {
    iris_engine *e = open_engine(QWEN3, 512, 8);
    REQUIRE(e);
    REQUIRE(iris_engine_reasoning(e, 0) && !iris_engine_reasoning(e, 1) && qwen3_vocab());
    enum { N = 16 };
    iris_request *r[N] = {0};
    gen_out *res = calloc(N + 2, sizeof *res);
    REQUIRE(res);
    for (int i = 0; i < N; i++) submit(e, i + 1, 0, NULL, &r[i]);
    for (int i = 0; i < N; i++)
        if (r[i]) collect(r[i], &res[i]), iris_request_free(r[i]);
    int reached = 0;
    for (int i = 0; i < N; i++) {
        const gen_out *x = &res[i];
        if (getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "seed %d: </think> at %d of %d: %s\n", i + 1, x->first_end,
                                                 x->n_tokens, x->text);
        const char *close = memmem(x->text, x->len, "</think>", 8);
        /* ended (<|im_end|>) or cut short while thinking, or too late for a whole object: skipped */
        if (x->first_end < 0 || (x->finish == IRIS_FINISH_REASON_LENGTH && x->n_tokens - x->first_end < 64)) continue;
        reached++;
        REQUIRE(close);
        /* free before: what the grammar would have refused from the first token */
        CHECKF(!grammar_accepts(x->text, (size_t)(close - x->text) + 8), "seed %d: the reasoning fits the grammar",
               i + 1);
        /* constrained after: the object starts right after "</think>" and ends the reply */
        CHECKF(x->finish == IRIS_FINISH_REASON_STOP, "seed %d: finish %d", i + 1, x->finish);
        CHECKF(close[8] == '{', "seed %d: content \"%s\"", i + 1, close + 8);
        check_object(close + 8, "content after </think>");
        const char *rs, *cs;
        size_t rsn, csn;
        iris_reasoning_split(x->text, x->len, &rs, &rsn, &cs, &csn);
        CHECK(cs == close + 8 && csn == x->len - (size_t)(close + 8 - x->text));
    }
    printf("  %d of %d seeds reached </think> within 700 tokens\n", reached, N);
    CHECKF(reached >= 4, "only %d of %d seeds reached </think>", reached, N);
    /* enable_thinking off, and a plain text prompt: the grammar from the first token */
    iris_request *a = NULL, *b = NULL;
    if (!submit(e, 1, 1, NULL, &a)) collect(a, &res[N]);
    if (!submit(e, 1, 0, "Give me a JSON object:", &b)) collect(b, &res[N + 1]);
    iris_request_free(a), iris_request_free(b);
    check_object(res[N].text, "enable_thinking off");
    check_object(res[N + 1].text, "a plain text prompt");
    free(res);
    iris_engine_close(e);
}

/* A model that thinks whose vocabulary lacks "</think>": a constrained request is refused by name
 * (its grammar could never start), a free one runs. */
IRIS_TEST(grammar_thinking_no_end_token) {
    char dir[] = "/tmp/iris-think-vocab-XXXXXX", path[256], real[PATH_MAX];
    REQUIRE(mkdtemp(dir) && realpath(QWEN3, real));
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char src[PATH_MAX + 64];
        snprintf(src, sizeof src, "%s/%s", real, files[i]);
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK(symlink(src, path) == 0);
    }
    json_t *tj = json_load_file(QWEN3 "/tokenizer.json", 0, NULL), *added = json_object_get(tj, "added_tokens");
    REQUIRE(tj);
    for (size_t i = json_array_size(added); i-- > 0;)
        if (!strcmp(json_string_value(json_object_get(json_array_get(added, i), "content")), "</think>"))
            json_array_remove(added, i);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CHECK(json_dump_file(tj, path, 0) == 0);
    json_decref(tj);
    iris_engine *e = open_engine(dir, 64, 0);
    if (e) {
        iris_request_params p;
        schema_params(e, NULL, &p);
        p.sampling.max_tokens = 4;
        iris_err err = {0};
        iris_request *r = NULL;
        CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), IRIS_EUNSUPPORTED);
        CHECK_CONTAINS(err.msg, "\"</think>\"");
        p.no_thinking = 1;                  /* no reasoning: the grammar from the first token */
        CHECK_EQ_INT(iris_engine_submit(e, &p, &r, &err), 0);
        iris_request_free(r);
        iris_engine_close(e);
    }
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    CHECK(system(path) == 0);
}

/* ---- the server and the CLI ---------------------------------------------------------------------- */

#define TOOL                                                                                                      \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","            \
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}},\"required\":[\"city\"],"                     \
    "\"additionalProperties\":false}}}"
#define ASK "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"temperature\":1,\"top_k\":0," \
            "\"top_p\":1,\"max_tokens\":700"

typedef struct call_reply {
    char reasoning[8192], name[64], args[512], finish[32];
    int has_reasoning, has_content, n_calls;
} call_reply;

static void copy_str(char *dst, size_t cap, const char *s) { snprintf(dst, cap, "%s", s ? s : ""); }

static void read_whole(const char *out, call_reply *c) {
    memset(c, 0, sizeof *c);
    json_t *j = ts_json(out);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *r = json_string_value(json_object_get(msg, "reasoning_content"));
    c->has_reasoning = r != NULL, copy_str(c->reasoning, sizeof c->reasoning, r);
    c->has_content = json_is_string(json_object_get(msg, "content"));
    json_t *calls = json_object_get(msg, "tool_calls");
    c->n_calls = (int)json_array_size(calls);
    copy_str(c->name, sizeof c->name, ts_jstr(j, "choices.0.message.tool_calls.0.function.name"));
    copy_str(c->args, sizeof c->args, ts_jstr(j, "choices.0.message.tool_calls.0.function.arguments"));
    copy_str(c->finish, sizeof c->finish, ts_jstr(j, "choices.0.finish_reason"));
    json_decref(j);
}

/* The streamed reply: delta.reasoning_content and the first call's name and argument fragments
 * put together. */
static void read_stream(const char *body, call_reply *c) {
    memset(c, 0, sizeof *c);
    for (const char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "data: {", 7)) continue;
        const char *end = strchr(l, '\n');
        json_t *j = json_loadb(l + 6, end ? (size_t)(end - l - 6) : strlen(l + 6), 0, NULL);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *d = json_object_get(ch, "delta");
        const char *r = json_string_value(json_object_get(d, "reasoning_content"));
        if (r && strlen(c->reasoning) + strlen(r) < sizeof c->reasoning) strcat(c->reasoning, r), c->has_reasoning = 1;
        c->has_content |= json_is_string(json_object_get(d, "content")) &&
                          json_string_length(json_object_get(d, "content")) > 0;
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), k, tc) {  /* entries of one index merge */
            json_t *fn = json_object_get(tc, "function");
            const char *name = json_string_value(json_object_get(fn, "name"));
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            if (name) copy_str(c->name, sizeof c->name, name), c->n_calls++;
            if (args && strlen(c->args) + strlen(args) < sizeof c->args) strcat(c->args, args);
        }
        const char *f = json_string_value(json_object_get(ch, "finish_reason"));
        if (f) copy_str(c->finish, sizeof c->finish, f);
        json_decref(j);
    }
}

/* A forced call's reply: the call after the reasoning, or (ended while thinking) neither content
 * nor a call.  Returns 1 for a call. */
static int check_call(const call_reply *c, int seed, const char *what) {
    CHECKF(!c->has_content, "%s seed %d: content beside a forced call", what, seed);
    if (!c->n_calls) {
        CHECKF(!strcmp(c->finish, "stop") || !strcmp(c->finish, "length"), "%s seed %d: finish %s", what, seed,
               c->finish);
        return 0;
    }
    CHECKF(c->has_reasoning && c->n_calls == 1 && !strcmp(c->name, "get_weather") && !strcmp(c->finish, "tool_calls"),
           "%s seed %d: %d call(s) %s, finish %s, reasoning %d", what, seed, c->n_calls, c->name, c->finish,
           c->has_reasoning);
    json_t *a = json_loads(c->args, 0, NULL);
    CHECKF(json_is_string(json_object_get(a, "city")) && json_object_size(a) == 1, "%s seed %d: arguments %s", what,
           seed, c->args);
    json_decref(a);
    return 1;
}

static long post(int port, const char *body, char **out) {
    *out = NULL;
    return ts_post(port, "/v1/chat/completions", body, out);
}

/* A call to get_weather forced at seed (tool_choice "required", or the function by name when
 * named), streamed when stream, its reply read into c: the HTTP status (the body on stderr when
 * not 200). */
static long forced_call(int port, int seed, int named, int stream, call_reply *c) {
    char body[2048], *out = NULL;
    snprintf(body, sizeof body, "{" ASK ",\"tools\":[" TOOL "],\"tool_choice\":%s,\"seed\":%d%s}",
             named ? "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}" : "\"required\"", seed,
             stream ? ",\"stream\":true" : "");
    long status = post(port, body, &out);
    if (status != 200 || getenv("IRIS_TEST_VERBOSE")) fprintf(stderr, "seed %d: %s\n", seed, out ? out : "");
    (stream ? read_stream : read_whole)(out ? out : "", c);
    free(out);
    return status;
}

IRIS_TEST(grammar_thinking_server) {
    ts_server s;
    REQUIRE(ts_server_start_model(&s, QWEN3, "") == 0);
    char body[2048], *out = NULL;
    call_reply whole, streamed;
    int calls = 0, first = 0;
    for (int seed = 1; seed <= 32 && calls < 2; seed++) {
        CHECKF(forced_call(s.port, seed, 0, 0, &whole) == 200, "seed %d: the forced call failed", seed);
        if (check_call(&whole, seed, "required") && !calls++) first = seed;
    }
    printf("  %d forced calls after </think>, the first at seed %d\n", calls, first);
    CHECK(calls >= 1);
    if (first) {
        /* streamed: the same reasoning and call */
        call_reply again;
        CHECK(forced_call(s.port, first, 0, 0, &again) == 200);
        CHECK(forced_call(s.port, first, 0, 1, &streamed) == 200);
        CHECK(check_call(&streamed, first, "streamed"));
        CHECK_STR(streamed.reasoning, again.reasoning);
        CHECK_STR(streamed.args, again.args);
        /* a named function, forced the same way */
        CHECK(forced_call(s.port, first, 1, 0, &whole) == 200);
        CHECK(check_call(&whole, first, "named"));
    }
    /* response_format: the object after the reasoning */
    int objects = 0;
    for (int seed = 1; seed <= 32 && !objects; seed++) {
        snprintf(body, sizeof body, "{" ASK ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"o\",\"schema\":%s}},\"seed\":%d}", SCHEMA, seed);
        CHECK(post(s.port, body, &out) == 200);
        json_t *j = ts_json(out ? out : "");
        const char *content = ts_jstr(j, "choices.0.message.content");
        if (content && ts_jstr(j, "choices.0.message.reasoning_content")) {
            check_object(content, "response_format after </think>");
            objects++;
        }
        json_decref(j);
        free(out);
    }
    CHECK_EQ_INT(objects, 1);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}

/* `iris run --json-schema` (the CLI's one path through the engine): the reasoning apart, the
 * answer the schema's object; --reasoning off (plain Qwen3: no thinking) the object at once. */
IRIS_TEST(grammar_thinking_cli) {
    char schema[] = "/tmp/iris-think-schema-XXXXXX", res[64], cmd[1024];
    int fd = mkstemp(schema);
    REQUIRE(fd >= 0);
    CHECK(write(fd, SCHEMA, strlen(SCHEMA)) == (ssize_t)strlen(SCHEMA));
    close(fd);
    snprintf(res, sizeof res, "%s.out", schema);
    int objects = 0;
    for (int seed = 1; seed <= 32 && !objects; seed++) {
        snprintf(cmd, sizeof cmd, "%s run %s --device cpu --json-schema %s --temperature 1 --top-k 0 --top-p 1 "
                 "--seed %d --max-tokens 700 --json 'Give me a JSON object.' > %s 2>/dev/null", ts_bin(), QWEN3,
                 schema, seed, res);
        CHECK(system(cmd) == 0);
        char *o = ts_slurp(res, NULL);
        json_t *j = ts_json(o ? o : "");
        const char *text = ts_jstr(j, "text"), *why = ts_jstr(j, "reasoning");
        CHECKF(why != NULL, "seed %d: no reasoning in %s", seed, o ? o : "");
        if (text && *text) check_object(text, "iris run --json-schema"), objects++;
        json_decref(j);
        free(o);
    }
    CHECK_EQ_INT(objects, 1);
    snprintf(cmd, sizeof cmd, "%s run %s --device cpu --json-schema %s --temperature 1 --top-k 0 --top-p 1 --seed 1 "
             "--reasoning off --json 'Give me a JSON object.' > %s 2>/dev/null", ts_bin(), QWEN3, schema, res);
    CHECK(system(cmd) == 0);
    char *o = ts_slurp(res, NULL);
    json_t *j = ts_json(o ? o : "");
    check_object(ts_jstr(j, "text") ? ts_jstr(j, "text") : "", "iris run --reasoning off");
    json_decref(j);
    free(o);
    unlink(res), unlink(schema);
}
