/* test_models.c: more models through the one path (issue 31), against transformers 5.17.
 *
 * Fixtures: tests/fixtures/models/ from tools/ref_models.py on the GPU machine:
 *   tiny-8b     a Qwen3-VL shaped like the 8B where the code could care (untied lm_head, three
 *               DeepStack taps, GQA 4, intermediate 3 x hidden); "text" and "image" prompts;
 *   tiny-qwen3  a Qwen3ForCausalLM (no vision, flat config, 1-D RoPE, tied, its template in
 *               tokenizer_config.json); prompts with thinking on and off.
 * Each prompt goes through the engine as a user would send it (chat template, tokenizer, image
 * preprocessing, vision, decoder): the ids must be transformers' ids, the logits of every
 * position within 1e-3 (the fp32 CPU reference), and 24 greedy tokens transformers' greedy ones.
 * Then what the Thinking / text-only surface does end to end: a Thinking checkpoint's reply split
 * into reasoning_content by the server (whole and streamed alike, as the CLI's), and --text-only
 * refusing images while planning less memory. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/prompt.h"
#include "formats/chat.h"
#include "model/weights.h"
#include "server/reasoning.h"
#include "server_harness.h"
#include "test.h"
#include "tiny_fixture.h"
#include "tools/synth.h"

#define TOL 1e-3f
#define MODELS "tests/fixtures/models"

static iris_engine *open_engine(const char *model, int text_only) {
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.model = model;
    o.device = "cpu";
    o.kv_blocks = 64;
    o.max_num_seqs = 2;
    o.text_only = text_only;
    iris_engine *e = NULL;
    iris_err err = {0};
    if (iris_engine_open(&o, &e, &err)) iris_test_fail(__FILE__, __LINE__, "%s: %s", model, err.msg);
    return e;
}

static json_t *manifest(const char *model) {
    char p[256];
    snprintf(p, sizeof p, MODELS "/%s/manifest.json", model);
    return json_load_file(p, 0, NULL);
}

/* One user turn (an image first when given), as tools/make_tiny_models.py's scenarios. */
static int build(iris_engine *e, const char *image, const char *text, int no_thinking, iris_prompt *p) {
    json_t *msgs = iris_prompt_one_turn(NULL, image ? 1 : 0, text);
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    ctx.no_thinking = no_thinking;
    iris_prompt_image im = {.path = image};
    iris_err err = {0};
    int rc = iris_prompt_build(&ctx, msgs, image ? &im : NULL, image ? 1 : 0, p, NULL, &err);
    CHECKF(rc == 0, "prompt: %s", err.msg);
    json_decref(msgs);
    return rc;
}

/* ids equal to transformers', logits of every position within TOL, then 24 greedy tokens. */
static void check_prompt(iris_engine *e, const char *model, const char *scen, const iris_prompt *p) {
    char path[256];
    tiny_arr ids, ref;
    snprintf(path, sizeof path, "../models/%s/%s/input_ids.npy", model, scen);
    REQUIRE(tiny_load(path, &ids) == 0);
    snprintf(path, sizeof path, "../models/%s/%s/logits.npy", model, scen);
    REQUIRE(tiny_load(path, &ref) == 0);
    int n = (int)p->ids.n, V = (int)ref.shape[1];
    int same = n == ids.n;
    for (int i = 0; same && i < n; i++) same = p->ids.ids[i] == ids.i64[i];
    CHECKF(same, "%s/%s: iris's %d prompt ids differ from transformers' %lld", model, scen, n, (long long)ids.n);
    if (same) {
        float *lg = malloc(sizeof(float) * (size_t)n * V), d = 0;
        iris_err err = {0};
        int rc = iris_engine_prompt_logits(e, p, n, NULL, NULL, lg, &err);
        CHECKF(rc == 0, "%s/%s: %s", model, scen, err.msg);
        for (int64_t i = 0; !rc && i < (int64_t)n * V; i++) {
            float x = fabsf(lg[i] - ref.f32[i]);
            d = x > d || isnan(x) ? (isnan(x) ? INFINITY : x) : d;
        }
        printf("  %s / %s: %d tokens, logits max-abs %.3g\n", model, scen, n, d);
        CHECKF(!rc && d <= TOL, "%s/%s: logits max-abs %g > %g", model, scen, d, TOL);
        free(lg);
    }
    tiny_free(&ids);
    tiny_free(&ref);
}

static void check_greedy(iris_engine *e, const char *model, const char *scen, iris_prompt *p) {
    json_t *man = manifest(model);
    json_t *want = json_object_get(json_object_get(json_object_get(man, "scenarios"), scen), "greedy");
    REQUIRE(json_array_size(want) == 24);
    iris_request_params rp;
    iris_request_params_default(e, &rp);
    rp.sampling.do_sample = 0;
    rp.sampling.max_tokens = 24;
    rp.sampling.ignore_eos = 1;
    rp.prompt = p;
    iris_request *r = NULL;
    iris_err err = {0};
    REQUIRE(iris_engine_submit(e, &rp, &r, &err) == 0);
    iris_event ev;
    int g = 0, diff = -1;
    while (iris_request_next(r, &ev, -1) == IRIS_OK) {
        if (ev.kind == IRIS_EVENT_DELTA) {
            if (g < 24 && diff < 0 && ev.token != (int)json_integer_value(json_array_get(want, (size_t)g))) diff = g;
            g++;
        }
        if (ev.kind == IRIS_EVENT_DONE) break;
    }
    CHECKF(g == 24 && diff < 0, "%s/%s: %d greedy tokens, the first differing from transformers' at %d", model, scen, g,
           diff);
    iris_request_free(r);
    json_decref(man);
}

IRIS_TEST(models_8b_shape_parity) {
    /* the loader takes the untied lm_head and the three taps from the config, no size branch */
    iris_model *m = NULL;
    iris_err err = {0};
    REQUIRE(iris_model_open(MODELS "/tiny-8b/model", NULL, &m, &err) == 0);
    CHECK_EQ_INT(m->lm_head_tied, 0);
    CHECK(m->text.lm_head.data != m->text.embed_tokens.data);
    CHECK_EQ_INT(m->cfg.vision_config.n_deepstack, 3);
    CHECK_EQ_INT(m->cfg.text_config.num_attention_heads / m->cfg.text_config.num_key_value_heads, 4);
    iris_model_close(m);

    iris_engine *e = open_engine(MODELS "/tiny-8b/model", 0);
    REQUIRE(e);
    static const struct {
        const char *scen, *image, *text;
    } cases[] = {{"text", NULL, "Hello, who are you?"}, {"image", TINY_DIR "/images/a.png", "What is in this image?"}};
    for (int i = 0; i < 2; i++) {
        iris_prompt p;
        if (build(e, cases[i].image, cases[i].text, 0, &p)) continue;
        check_prompt(e, "tiny-8b", cases[i].scen, &p);
        check_greedy(e, "tiny-8b", cases[i].scen, &p);
        iris_prompt_free(&p);
    }
    iris_engine_close(e);
}

IRIS_TEST(models_qwen3_text_parity) {
    iris_engine *e = open_engine(MODELS "/tiny-qwen3/model", 0);
    REQUIRE(e);
    const iris_model *m = iris_engine_model(e);
    CHECK_STR(m->cfg.architecture, "Qwen3ForCausalLM");
    CHECK_EQ_INT(m->has_vision, 0);
    CHECK_EQ_INT(m->chat_style, IRIS_CHAT_QWEN3);
    for (int nothink = 0; nothink < 2; nothink++) {
        iris_prompt p;
        if (build(e, NULL, "Hello, who are you?", nothink, &p)) continue;
        const char *scen = nothink ? "nothink" : "text";
        check_prompt(e, "tiny-qwen3", scen, &p);
        check_greedy(e, "tiny-qwen3", scen, &p);
        iris_prompt_free(&p);
    }
    /* no vision tower: an image is refused before anything is decoded */
    iris_prompt p;
    json_t *msgs = iris_prompt_one_turn(NULL, 1, "x");
    iris_prompt_ctx ctx;
    iris_engine_prompt_ctx(e, &ctx);
    iris_prompt_image im = {.path = TINY_DIR "/images/a.png"};
    iris_err err = {0};
    CHECK_EQ_INT(iris_prompt_build(&ctx, msgs, &im, 1, &p, NULL, &err), IRIS_EUNSUPPORTED);
    CHECK_CONTAINS(err.msg, "text only");
    json_decref(msgs);
    iris_engine_close(e);
}

/* ---- Thinking: the reply split into reasoning_content ---------------------------------------- */

/* A copy of tiny-8b whose chat_template.json is Qwen3-VL-Thinking's (the checkpoint's own
 * template decides, not its name); files linked, the template written. */
static int thinking_copy(char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/iris-thinking-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json"};
    char src[512], dst[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (!realpath(MODELS "/tiny-8b/model", src)) return -1;
        snprintf(src + strlen(src), sizeof src - strlen(src), "/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (symlink(src, dst)) return -1;
    }
    char *t = ts_slurp("tests/fixtures/chat/qwen3vl_thinking_chat_template.jinja", NULL);
    json_t *j = json_pack("{s:s}", "chat_template", t ? t : "");
    snprintf(dst, sizeof dst, "%s/chat_template.json", dir);
    int rc = t && json_dump_file(j, dst, 0) == 0 ? 0 : -1;
    json_decref(j);
    free(t);
    return rc;
}

static void remove_copy(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* Concatenated delta.reasoning_content and delta.content of an SSE body. */
static void sse_parts(const char *body, char *reason, char *content, size_t cap) {
    reason[0] = content[0] = 0;
    for (const char *l = body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "data: {", 7)) continue;
        const char *end = strchr(l, '\n');
        json_t *j = json_loadb(l + 6, end ? (size_t)(end - l - 6) : strlen(l + 6), 0, NULL);
        json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
        const char *r = json_string_value(json_object_get(d, "reasoning_content"));
        const char *c = json_string_value(json_object_get(d, "content"));
        if (r && strlen(reason) + strlen(r) < cap) strcat(reason, r);
        if (c && strlen(content) + strlen(c) < cap) strcat(content, c);
        json_decref(j);
    }
}

IRIS_TEST(models_thinking_reasoning_content) {
    char dir[64];
    REQUIRE(thinking_copy(dir, sizeof dir) == 0);
    ts_server s;
    if (ts_server_start_model(&s, dir, "") != 0) {
        iris_test_fail(__FILE__, __LINE__, "server did not start");
        remove_copy(dir);
        return;
    }
    const char *q = "Hello, who are you?";
    char *body = ts_chat_body(NULL, q, "\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true");
    char *out = NULL;
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    json_t *j = ts_json(out);
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    const char *R = json_string_value(json_object_get(msg, "reasoning_content"));
    json_t *cj = json_object_get(msg, "content");
    CHECKF(R != NULL, "no reasoning_content in %s", out);
    CHECK(json_is_null(cj) || json_is_string(cj));
    const char *C = json_is_string(cj) ? json_string_value(cj) : "";

    /* the raw reply to the same prompt (a completion: no split), rendered by the Thinking template */
    char raw_body[512], *raw_out = NULL;
    snprintf(raw_body, sizeof raw_body, "{\"prompt\":\"<|im_start|>user\\n%s<|im_end|>\\n<|im_start|>assistant\\n"
             "<think>\\n\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}", q);
    CHECK_EQ_INT(ts_post(s.port, "/v1/completions", raw_body, &raw_out), 200);
    json_t *rj = ts_json(raw_out);
    const char *raw = ts_jstr(rj, "choices.0.text");
    REQUIRE(raw);
    const char *wr, *wc;
    size_t wrn, wcn;
    iris_reasoning_split(raw, strlen(raw), &wr, &wrn, &wc, &wcn);
    printf("  raw reply \"%s\": reasoning %zu bytes, content %zu bytes\n", raw, wrn, wcn);
    CHECK(R && strlen(R) == wrn && !memcmp(R, wr, wrn));
    CHECK(strlen(C) == wcn && (!wcn || !memcmp(C, wc, wcn)));

    /* streamed: the deltas add up to the same split */
    char *sbody = ts_chat_body(NULL, q, "\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stream\":true");
    char *sout = NULL, sr[4096], sc[4096];
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", sbody, &sout), 200);
    sse_parts(sout ? sout : "", sr, sc, sizeof sr);
    CHECK_STR(sr, R ? R : "");
    CHECK_STR(sc, C);

    /* the CLI: reasoning apart from the answer (--json), hidden with --reasoning off; its reply
     * stops at an end token, so the server's is asked again without ignore_eos */
    char *b2 = ts_chat_body(NULL, q, "\"max_tokens\":12,\"temperature\":0"), *o2 = NULL;
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", b2, &o2), 200);
    json_t *j2 = ts_json(o2);
    R = ts_jstr(j2, "choices.0.message.reasoning_content");
    C = ts_jstr(j2, "choices.0.message.content");
    if (!C) C = "";
    char cmd[1024], *cli = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --device cpu --max-tokens 12 --temperature 0 --json '%s' > %s.cli 2>/dev/null",
             ts_bin(), dir, q, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s.cli", dir);
    json_t *cj2 = ts_json(cli = ts_slurp(cmd, NULL));
    CHECK_STR(ts_jstr(cj2, "reasoning"), R ? R : "");
    CHECK_STR(ts_jstr(cj2, "text"), C);
    unlink(cmd);
    json_decref(cj2);
    free(cli);
    snprintf(cmd, sizeof cmd, "%s run %s --device cpu --max-tokens 12 --temperature 0 --reasoning off --json '%s' > %s.cli "
             "2>/dev/null", ts_bin(), dir, q, dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s.cli", dir);
    cj2 = ts_json(cli = ts_slurp(cmd, NULL));
    CHECK(cj2 && !json_object_get(cj2, "reasoning"));
    CHECK_STR(ts_jstr(cj2, "text"), C);
    unlink(cmd);
    json_decref(cj2);
    free(cli);

    json_decref(j), json_decref(rj), json_decref(j2);
    free(body), free(out), free(raw_out), free(sbody), free(sout), free(b2), free(o2);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    remove_copy(dir);
}

/* ---- --text-only ------------------------------------------------------------------------------- */

IRIS_TEST(models_text_only_refuses_images) {
    ts_server s;
    REQUIRE(ts_server_start(&s, "--text-only") == 0);
    char *url = ts_data_url(TS_IMG_A);
    char *body = ts_chat_body(url, "What is in this image?", "\"max_tokens\":4");
    char *out = NULL;
    long st = ts_post(s.port, "/v1/chat/completions", body, &out);
    ts_check_error(st, out, 400, "messages", "an image to a --text-only server");
    CHECK_CONTAINS(out, "images_not_supported");
    CHECK_CONTAINS(out, "--text-only");
    free(out), free(body);
    /* text still runs, and the decoder is the same: the answer a full server gives */
    body = ts_chat_body(NULL, "Hello, who are you?", "\"max_tokens\":8,\"temperature\":0");
    char *a = ts_chat_text(s.port, body, &st, NULL);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    REQUIRE(ts_server_start(&s, "") == 0);
    char *b = ts_chat_text(s.port, body, &st, NULL);
    CHECK(a && b && !strcmp(a, b));
    CHECK_EQ_INT(ts_server_stop(&s), 0);
    free(a), free(b), free(body), free(url);
}

IRIS_TEST(models_text_only_plans_less) {
    char dir[] = "/tmp/iris-8b-headers-XXXXXX";
    REQUIRE(mkdtemp(dir));
    iris_synth_opts so = {.like = "8B"};
    iris_err err = {0};
    REQUIRE(iris_synth_write_headers(dir, &so, &err) == 0);
    iris_plan_model pm;
    REQUIRE(iris_plan_model_load(dir, "8B", &pm, &err) == 0);
    /* the 8B's tower: 576,388,336 BF16 parameters in 316 aligned slots */
    CHECK(pm.vision_weight_bytes >= 576388336ull * 2 && pm.vision_weight_bytes < 576388336ull * 2 + 316 * 256);
    iris_plan_settings ps;
    iris_plan_settings_default(&ps);
    ps.max_model_len = 8192;
    iris_plan *full = calloc(1, sizeof *full), *text = calloc(1, sizeof *text);
    REQUIRE(iris_plan_make(&pm, &ps, 24 * IRIS_GIB, "24 GiB", 0, full, &err) == 0);
    ps.text_only = 1;
    REQUIRE(iris_plan_make(&pm, &ps, 24 * IRIS_GIB, "24 GiB", 0, text, &err) == 0);
    CHECK_EQ_INT(full->part_bytes[IRIS_PART_WEIGHTS] - text->part_bytes[IRIS_PART_WEIGHTS], pm.vision_weight_bytes);
    CHECK(text->part_bytes[IRIS_PART_ACTIVATIONS] <= full->part_bytes[IRIS_PART_ACTIVATIONS]);
    CHECK(text->part_bytes[IRIS_PART_IMAGE_EMBEDS] < full->part_bytes[IRIS_PART_IMAGE_EMBEDS]);
    CHECK_EQ_INT(text->image_tokens, 0);
    CHECK_EQ_INT(text->vision_bytes, 0);
    /* the KV cache takes what the rest leaves: everything else shrinks, the cache grows */
    uint64_t rest_full = full->total_bytes - full->part_bytes[IRIS_PART_KV_CACHE];
    uint64_t rest_text = text->total_bytes - text->part_bytes[IRIS_PART_KV_CACHE];
    CHECK(rest_text + pm.vision_weight_bytes < rest_full);
    CHECK(text->kv_blocks > full->kv_blocks);
    printf("  8B at 8K context: %.2f GiB besides the KV cache, %.2f GiB text only (%.2f GiB of vision weights and "
           "%.1f MiB of encoder scratch and DeepStack rows left off)\n", rest_full / (double)IRIS_GIB,
           rest_text / (double)IRIS_GIB, pm.vision_weight_bytes / (double)IRIS_GIB,
           (rest_full - rest_text - pm.vision_weight_bytes) / (double)IRIS_MIB);
    char *txt = iris_plan_format(text);
    CHECK_CONTAINS(txt, "stays off the card");
    free(txt);
    /* the CLI's flag reaches the plan */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s plan %s --vram 24GiB --text-only 2>&1 | grep -q 'stays off the card'", ts_bin(), dir);
    CHECK(system(cmd) == 0);
    free(full), free(text);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* Plain Qwen3 on the server: thinking by default (reasoning_content), and
 * chat_template_kwargs.enable_thinking=false gives the prompt with the empty think block
 * (transformers' 22 tokens, not 16) and no split. */
IRIS_TEST(models_qwen3_server_enable_thinking) {
    ts_server s;
    REQUIRE(ts_server_start_model(&s, MODELS "/tiny-qwen3/model", "") == 0);
    const char *msgs = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello, who are you?\"}]}],"
                       "\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true%s}";
    char body[512], *out = NULL;
    snprintf(body, sizeof body, msgs, "");
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    json_t *j = ts_json(out);
    CHECK_EQ_INT(ts_jint(j, "usage.prompt_tokens"), 16);
    CHECK(ts_jstr(j, "choices.0.message.reasoning_content") != NULL);
    json_decref(j), free(out);
    snprintf(body, sizeof body, msgs, ",\"chat_template_kwargs\":{\"enable_thinking\":false}");
    CHECK_EQ_INT(ts_post(s.port, "/v1/chat/completions", body, &out), 200);
    j = ts_json(out);
    CHECK_EQ_INT(ts_jint(j, "usage.prompt_tokens"), 22);
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    CHECK(json_object_get(m, "reasoning_content") == NULL);
    CHECK(json_is_string(json_object_get(m, "content")));
    json_decref(j), free(out);
    CHECK_EQ_INT(ts_server_stop(&s), 0);
}
