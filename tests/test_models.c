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
