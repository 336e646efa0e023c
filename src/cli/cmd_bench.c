/* cmd_bench.c: `iris bench MODEL [--batch 1,8,32,64] [--prompt-tokens N]
 * [--gen-tokens N] [--device cuda|cpu]`: prefill and decode speed of the
 * engine's own step, printed as one JSON object.
 *
 * The engine is opened as `iris serve` opens it (its loader, memory plan and
 * runner), sized for the largest batch; while it has no requests, the
 * engine's runner (engine/runner.h) is driven directly.  Prefill: one
 * sequence of N random tokens (logits of the last row).  Decode: for each
 * batch size B, B sequences that share the prompt's cache blocks (the prompt
 * is rounded to whole blocks so each sequence's new tokens land in blocks of
 * their own) decode --gen-tokens steps, one token each a step, asking for
 * greedy's candidates as the engine does (decode graphs where the backend
 * records them); --host-sampling downloads every row's fp32 logits instead
 * (the path of requests with penalties or logprobs).  --json-schema FILE:
 * after each batch size's free decode, the same batch decodes again with
 * every sequence constrained to the schema, as the engine runs such requests:
 * greedy samplers with the schema's grammar, each fed the token it drew, the
 * masks asked for by the runner while the device runs the forward and applied
 * where the candidates are chosen (engine/runner.c); a sequence whose output
 * completes starts a new one.  Reported beside the free figure: tok/s, the
 * ratio to free decode, the host's mask time a step (summed over the rows,
 * which run in parallel on the thread pool, and the wall time of the step's
 * mask phase, which the forward hides while it is shorter), whole rows taken.
 * --image: time to first token of one request through the engine.  Memory: the engine's arena and
 * the device's used memory (cudaMemGetInfo; the whole device).
 * Figures are reported, never asserted (DESIGN.md). */
#include <stdio.h>   /* before jpeglib.h, which needs FILE and size_t */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>

#include "backend/backend.h"
#include "clock.h"
#include "cli.h"
#include "engine_flags.h"
#include "opts.h"
#include "engine/engine.h"
#include "err.h"
#include "formats/config.h"
#include "hub/resolve.h"
#include "formats/safetensors.h"
#include "engine/prompt.h"
#include "model/text.h"
#include "engine/runner.h"
#include "formats/tokenizer.h"
#include "model/grammar.h"
#include "model/sampler.h"
#include "model/vision.h"
#include "engine/planner.h"
#ifdef IRIS_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_info.h"
#endif

#define MAX_BATCHES 16

static int parse_batches(const char *s, int *out, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || *n == MAX_BATCHES) return -1;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *n ? 0 : -1;
}

/* A WxH test picture (smooth gradients and stripes) as a JPEG at `path`. */
static int write_test_jpeg(const char *path, int w, int h) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * 3);
    for (int y = 0; row && y < h; y++) {
        for (int x = 0; x < w; x++) {
            row[3 * x] = (unsigned char)(255 * x / (w > 1 ? w - 1 : 1));
            row[3 * x + 1] = (unsigned char)(255 * y / (h > 1 ? h - 1 : 1));
            row[3 * x + 2] = (unsigned char)(((x / 32 + y / 32) & 1) ? 200 : 40);
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return fclose(f) || !row ? -1 : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define IMAGE_QUESTION "Describe the colours, the shapes and where each of them is in this picture, in a few words."

/* The image path through the engine: preprocessing (the prompt builder, on this thread), then
 * time to first token of one request (vision encoder, prefill, sampling), and the vision
 * encoder's share of it from the engine's counters.  Prints JSON members. */
static int bench_image(iris_engine *e, const char *image, iris_err *err) {
    iris_prompt p;
    memset(&p, 0, sizeof p);
    json_t *msgs = iris_prompt_one_turn(NULL, 1, IMAGE_QUESTION);
    iris_prompt_image pim = {.path = image};
    double pre[5], vms[5], ttft[5];
    int rc = msgs ? IRIS_OK : iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int i = 0; i < 5 && !rc; i++) {
        iris_prompt_free(&p);
        double a = iris_now_s();
        iris_prompt_ctx pctx;
        iris_engine_prompt_ctx(e, &pctx);
        rc = iris_prompt_build(&pctx, msgs, &pim, 1, &p, NULL, err);
        pre[i] = (iris_now_s() - a) * 1e3;
    }
    int n_prompt = (int)p.ids.n, g[3] = {0, 0, 0};
    if (!rc) memcpy(g, p.grid_thw, sizeof g);
    for (int i = 0; i < 6 && !rc; i++) {   /* the first warms up */
        iris_prompt q;
        iris_prompt_ctx ectx;
        iris_engine_prompt_ctx(e, &ectx);
        rc = iris_prompt_build(&ectx, msgs, &pim, 1, &q, NULL, err);
        if (rc) break;
        iris_request_params rp;
        iris_request_params_default(e, &rp);
        rp.prompt = &q;
        rp.sampling.max_tokens = 1;
        rp.sampling.do_sample = 0;
        iris_engine_stats s0, s1;
        iris_engine_get_stats(e, &s0);
        iris_request *r = NULL;
        rc = iris_engine_submit(e, &rp, &r, err);
        iris_prompt_free(&q);
        iris_event ev;
        while (!rc && iris_request_next(r, &ev, -1) == IRIS_OK && ev.kind != IRIS_EVENT_DONE) {}
        if (!rc && ev.finish_reason == IRIS_FINISH_REASON_ERROR) *err = ev.err, rc = ev.err.code ? ev.err.code : IRIS_EINVAL;
        iris_engine_get_stats(e, &s1);
        if (!rc && i) ttft[i - 1] = ev.usage.ttft_s * 1e3, vms[i - 1] = (s1.vision_s - s0.vision_s) * 1e3;
        iris_request_free(r);
    }
    iris_prompt_free(&p);
    json_decref(msgs);
    if (rc) return rc;
    qsort(pre, 5, sizeof *pre, cmp_double);
    qsort(vms, 5, sizeof *vms, cmp_double);
    qsort(ttft, 5, sizeof *ttft, cmp_double);
    printf(",\"image\":{\"path\":\"%s\",\"grid_thw\":[%d,%d,%d],\"prompt_tokens\":%d,\"preprocess_ms\":%.2f,"
           "\"vision_ms\":%.2f,\"ttft_ms\":%.2f,\"ttft_ms_min\":%.2f,\"ttft_with_preprocess_ms\":%.2f,"
           "\"ttft_note\":\"engine submit to first token (vision encoder, prefill, sampling), median of 5, prefix cache off\"}",
           image, g[0], g[1], g[2], n_prompt, pre[2], vms[2], ttft[2], ttft[0], pre[2] + ttft[2]);
    return IRIS_OK;
}

/* --json-schema: every sequence's greedy sampler under the schema's grammar. */
typedef struct schema_run {
    const char *schema;             /* the JSON Schema's text */
    iris_vocab *v;
    iris_stop_ids end;
    iris_sampler **smp;             /* [max_batch] */
    int32_t *next;                  /* [max_batch] the token each sequence drew */
    int *masked;                    /* [max_batch] all 1 */
    double *mask_s;                 /* [max_batch] seconds in masks, this batch size */
    int ends, whole;                /* outputs completed, rows that came back whole */
    double wall_s;                  /* the runner's wall time in masks (out.mask_s), this batch size */
} schema_run;

typedef struct {
    iris_runner *run;               /* the engine's own step */
    int V, G, blocks_per_seq;
    int32_t *tok, *pos, *bt;
    iris_text_seq *q;
    int host_sampling;
    int *need;                      /* greedy rows: 1 token each, as the engine asks */
    schema_run *sr;                 /* NULL: free decode */
} bench;

/* Sequence i's sampler: a new output under the schema. */
static int schema_restart(schema_run *sr, int i, iris_err *err) {
    iris_sampler_free(sr->smp[i]);
    sr->smp[i] = NULL;
    iris_sampling p;
    iris_sampling_default(&p, NULL);
    p.do_sample = 0;
    iris_grammar *g = NULL;
    int rc = iris_sampler_init(&sr->smp[i], &p, &sr->end, iris_vocab_n(sr->v), err);
    if (!rc) rc = iris_grammar_from_schema(sr->schema, &g, err);
    if (!rc) rc = iris_sampler_set_grammar(sr->smp[i], g, sr->v, &sr->end, err);
    return rc;
}

/* iris_runner_sampling.mask, timed (rows run on the thread pool: one slot each). */
static int schema_mask(void *ud, int row, uint32_t *words, iris_err *err) {
    schema_run *sr = ud;
    double a = iris_now_s();
    int rc = iris_sampler_mask(sr->smp[row], words, err);
    sr->mask_s[row] += iris_now_s() - a;
    return rc;
}

/* The constrained step's tokens: each row's draw, accepted; a completed output starts anew. */
static int schema_take(schema_run *sr, const iris_runner_out *out, int V, iris_err *err) {
    for (int i = 0; i < out->n_rows; i++) {
        int whole = out->k == 0 || out->whole[i];
        int tok = whole ? iris_sampler_sample(sr->smp[i], out->logits + (size_t)i * V, NULL, err)
                        : iris_sampler_sample_top(sr->smp[i], out->ids + (size_t)i * out->k,
                                                  out->vals + (size_t)i * out->k, out->k, NULL, err);
        if (tok < 0) return tok;
        sr->whole += whole;
        if (i == 0) sr->wall_s += out->mask_s;
        sr->next[i] = tok;
        if (iris_sampler_accept(sr->smp[i], tok) != IRIS_FINISH_NONE) {
            sr->ends++;
            int rc = schema_restart(sr, i, err);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Step of `n_seqs` sequences after `past` tokens: one new token each. */
static int decode_step(bench *x, int n_seqs, int past, iris_err *err) {
    for (int s = 0; s < n_seqs; s++) {
        x->tok[s] = x->sr ? x->sr->next[s] : (int32_t)((s * 7919 + past * 31) % x->V);
        x->pos[3 * s] = x->pos[3 * s + 1] = x->pos[3 * s + 2] = past;
        x->q[s] = (iris_text_seq){.n_past = past, .n_new = 1, .tokens = &x->tok[s], .pos = &x->pos[3 * s],
                                  .pos_stride = 1, .block_table = x->bt + (size_t)s * x->blocks_per_seq};
    }
    iris_runner_sampling smp = {.need = x->need};
    if (x->sr) smp.masked = x->sr->masked, smp.mask = schema_mask, smp.ud = x->sr;
    iris_runner_out out;
    int rc = iris_runner_step(x->run, x->q, n_seqs, x->host_sampling ? NULL : &smp, &out, err);
    return rc || !x->sr ? rc : schema_take(x->sr, &out, x->V, err);
}

/* Every batch size's decode, free (sr NULL) or constrained: one JSON array's members; free_tps
 * [n] gets (sr NULL) or compares with (sr) the free figures. */
static int decode_runs(bench *x, schema_run *sr, const int *batches, int n, int past0, double *free_tps,
                       iris_err *err) {
    int rc = 0;
    x->sr = sr;
    for (int bi = 0; bi < n && !rc; bi++) {
        int B = batches[bi];
        for (int s = 0; sr && s < B && !rc; s++) {
            sr->next[s] = x->tok[0], sr->mask_s[s] = 0;
            rc = schema_restart(sr, s, err);
        }
        if (!rc) rc = decode_step(x, B, past0, err); /* warm-up: this batch size's shapes */
        if (sr) {
            sr->ends = sr->whole = 0, sr->wall_s = 0;
            for (int s = 0; s < B; s++) sr->mask_s[s] = 0;
        }
        double a = iris_now_s();
        for (int g = 0; g < x->G && !rc; g++) rc = decode_step(x, B, past0 + g, err);
        double dt = iris_now_s() - a, tps = (double)B * x->G / dt;
        if (rc) break;
        printf("%s{\"batch\":%d,\"step_ms\":%.3f,\"tok_per_s\":%.0f", bi ? "," : "", B, dt / x->G * 1e3, tps);
        if (!sr) free_tps[bi] = tps;
        if (sr) {
            double ms = 0;
            for (int s = 0; s < B; s++) ms += sr->mask_s[s];
            printf(",\"vs_free\":%.3f,\"mask_ms_per_step\":%.3f,\"mask_wall_ms_per_step\":%.3f,\"whole_rows\":%d,"
                   "\"outputs_completed\":%d", tps / free_tps[bi], ms / x->G * 1e3, sr->wall_s / x->G * 1e3, sr->whole,
                   sr->ends);
        }
        printf("}");
        fflush(stdout);
    }
    x->sr = NULL;
    return rc;
}

typedef struct bench_args {
    const char *model, *image, *batch, *schema_file;
    int host_sampling, batches[MAX_BATCHES], n_batches;
    long long P, G;
    iris_cli_engine ce;
} bench_args;

/* The command line into x: -1 to go on, else the exit status (help: 0, bad usage: 2). */
static int parse_args(int argc, char **argv, bench_args *x) {
    memset(x, 0, sizeof *x);
    *x = (bench_args){.batches = {1, 8, 32, 64}, .n_batches = 4, .P = 128, .G = 32};
    iris_opt own[] = {
        {"--batch", 0, IRIS_OPT_STR, &x->batch, "B,B,..", "decode batch sizes (default 1,8,32,64; each 1..4096)", 0, 0,
         NULL, NULL, 0},
        {"--prompt-tokens", 0, IRIS_OPT_INT, &x->P, "N", "the prefill's tokens (default 128)", 1, 1 << 20, NULL, NULL, 0},
        {"--gen-tokens", 0, IRIS_OPT_INT, &x->G, "N", "decode steps per batch size (default 32)", 1, 1 << 16, NULL, NULL,
         0},
        {"--image", 0, IRIS_OPT_STR, &x->image, "WxH|PATH",
         "also the image path for one image (a WxH test picture, or a file)\nand a 20-token question: preprocessing "
         "ms, vision encoder ms and\ntime to first token through the engine (median of 5, prefix cache\noff; the "
         "model needs its tokenizer.json)", 0, 0, NULL, NULL, 0},
        {"--host-sampling", 0, IRIS_OPT_FLAG, &x->host_sampling, NULL,
         "decode steps download every row's fp32 logits (as requests with\npenalties or logprobs do) instead of each "
         "row's most likely tokens\npicked on the GPU", 0, 0, NULL, NULL, 0},
        {"--json-schema", 0, IRIS_OPT_STR, &x->schema_file, "FILE",
         "also decode every batch size with each sequence constrained to the\nJSON Schema in FILE (greedy, masks "
         "applied where the candidates\nare chosen, as the engine runs such requests): tok/s beside the\nfree "
         "decode's, their ratio, host mask ms a step (summed over\nrows; the model needs its tokenizer.json); with "
         "--host-sampling:\nwhole rows, masked and sampled on the host after the step", 0, 0, NULL, NULL, 0},
        IRIS_OPT_TABLE_END,
    };
    iris_cli_spec sp = {
        .cmd = "bench",
        .usage = "MODEL [options]",
        .about = "Prefill and decode speed of the text decoder, as JSON (tok/s per batch size, memory).\n"
                 "The device is cuda unless --device says otherwise.\n"
                 "With --images N: image throughput through the engine (iris bench MODEL --images N --help).",
        .max_pos = 1,
        .tables = {own, iris_cli_engine_flags(&x->ce, IRIS_CLI_E_DEVICE | IRIS_CLI_E_MEMORY | IRIS_CLI_E_KV |
                                                          IRIS_CLI_E_HUB)},
    };
    const char *pos[1];
    int n_pos, rc = iris_cli_parse(&sp, argc, argv, pos, &n_pos);
    if (rc >= 0) return rc;
    if (!n_pos) return iris_cli_usage_error("bench", "give MODEL");
    x->model = pos[0];
    if (x->batch && parse_batches(x->batch, x->batches, &x->n_batches))
        return iris_cli_usage_error("bench", "--batch '%s': give sizes like 1,8,32,64 (each 1..4096, at most %d)",
                                    x->batch, MAX_BATCHES);
    return -1;
}

/* --json-schema's file, the vocabulary trie and the samplers' room (the schema is compiled, so a
 * bad one fails here, before any figure). */
static int schema_open(iris_engine *e, const bench_args *ba, int max_batch, schema_run *sr, iris_err *err) {
    char *text = iris_cli_read_text(ba->schema_file, err);
    if (!text) return err->code ? err->code : IRIS_EIO;
    sr->schema = text;
    iris_grammar *g = NULL;
    int rc = iris_grammar_from_schema(text, &g, err);
    iris_grammar_free(g);
    if (rc) return rc;
    iris_prompt_ctx pc;
    iris_engine_prompt_ctx(e, &pc);
    rc = iris_vocab_build(pc.tok, iris_engine_text(e)->cfg.vocab_size, &sr->v, err);
    iris_stop_ids_default(&sr->end, NULL);
    sr->smp = calloc((size_t)max_batch, sizeof *sr->smp);
    sr->next = calloc((size_t)max_batch, sizeof *sr->next);
    sr->masked = malloc(sizeof(int) * (size_t)max_batch);
    sr->mask_s = calloc((size_t)max_batch, sizeof *sr->mask_s);
    if (!rc && (!sr->smp || !sr->next || !sr->masked || !sr->mask_s))
        rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < max_batch; i++) sr->masked[i] = 1;
    return rc;
}

static void schema_close(schema_run *sr, int max_batch) {
    for (int i = 0; sr->smp && i < max_batch; i++) iris_sampler_free(sr->smp[i]);
    iris_vocab_free(sr->v);
    free((char *)sr->schema), free(sr->smp), free(sr->next), free(sr->masked), free(sr->mask_s);
}

int iris_cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)  /* image throughput: cmd_bench_images.c */
        if (!strncmp(argv[i], "--images", 8) && (!argv[i][8] || argv[i][8] == '='))
            return iris_cmd_bench_images(argc, argv);
    bench_args ba;
    int st = parse_args(argc, argv, &ba);
    if (st >= 0) return st;
    const char *model = ba.model, *image = ba.image;
    int host_sampling = ba.host_sampling, *batches = ba.batches, n_batches = ba.n_batches;
    long P = (long)ba.P, G = (long)ba.G;
    iris_err err = {0};
    int max_batch = 0;
    for (int i = 0; i < n_batches; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    /* the prompt's blocks are shared; each sequence owns the blocks of its new tokens */
    int prompt_blocks = (int)((P + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK), past0 = prompt_blocks * IRIS_KV_BLOCK;
    int own = (int)((G + IRIS_KV_BLOCK - 1) / IRIS_KV_BLOCK);
    /* --image WxH: a test picture of that size, not resized (the plan admits its pixels) */
    int iw = 0, ih = 0;
    char tmp[64] = "";
    const char *path = image;
    long long pixels = 0;
    if (image && sscanf(image, "%dx%d", &iw, &ih) == 2 && iw > 0 && ih > 0 && access(image, R_OK) != 0) {
        snprintf(tmp, sizeof tmp, "/tmp/iris-bench-%dx%d-%d.jpg", iw, ih, (int)getpid());
        if (write_test_jpeg(tmp, iw, ih)) {
            iris_err_set(&err, IRIS_EIO, "could not write %s", tmp);
            return iris_cli_fail(&err);
        }
        path = tmp, pixels = (long long)iw * ih;
    }
    /* The engine, as `iris serve` opens it, sized for the largest batch and the prompt. */
    iris_engine_opts o;
    iris_engine_opts_default(&o);
    o.device = "cuda";
    iris_cli_engine_apply(&ba.ce, &o);
    o.model = model;
    o.max_num_seqs = max_batch;
    if (o.max_batch_tokens < past0 && (o.max_batch_tokens || past0 > IRIS_PLAN_DEFAULT_MAX_BATCH_TOKENS))
        o.max_batch_tokens = past0;  /* 0: the plan's choice, at least the default */
    o.max_model_len = past0 + (int)G + IRIS_KV_BLOCK;
    o.prefix_caching = 0;
    o.max_image_pixels = pixels;
    iris_engine *e = NULL;
    double t0 = iris_now_s();
    int rc = iris_engine_open(&o, &e, &err);
    double t_load = iris_now_s() - t0;
    if (rc) {
        if (tmp[0]) unlink(tmp);
        return iris_cli_fail(&err);
    }
    iris_model_info mi;
    iris_engine_model_info(e, &mi);
    const iris_text *t = iris_engine_text(e);
    iris_backend *be = iris_engine_backend(e);
    bench x = {.run = iris_engine_runner(e), .V = t->cfg.vocab_size, .G = (int)G, .host_sampling = host_sampling,
               .blocks_per_seq = prompt_blocks + own};
    size_t rows = (size_t)(past0 > max_batch ? past0 : max_batch), w_bytes = iris_engine_weight_bytes(e);
    x.tok = malloc(sizeof(int32_t) * rows);
    x.pos = malloc(sizeof(int32_t) * 3 * rows);
    x.bt = malloc(sizeof(int32_t) * (size_t)max_batch * x.blocks_per_seq);
    x.q = calloc((size_t)max_batch, sizeof *x.q);
    x.need = malloc(sizeof(int) * (size_t)max_batch);
    schema_run sr = {0};
    if (ba.schema_file) rc = schema_open(e, &ba, max_batch, &sr, &err);
    if (rc) goto done;
    if (!x.tok || !x.pos || !x.bt || !x.q || !x.need) rc = iris_err_set(&err, IRIS_ENOMEM, "out of memory");
    else if (prompt_blocks + max_batch * own > mi.kv_blocks)
        rc = iris_err_set(&err, IRIS_ELIMIT, "%d KV blocks needed, the engine has %d", prompt_blocks + max_batch * own,
                          mi.kv_blocks);
    if (rc) goto done;
    for (int s = 0; s < max_batch; s++) x.need[s] = 1;
    for (int s = 0; s < max_batch; s++)
        for (int j = 0; j < x.blocks_per_seq; j++)
            x.bt[(size_t)s * x.blocks_per_seq + j] = j < prompt_blocks ? j : prompt_blocks + s * own + (j - prompt_blocks);

    const iris_text_config *c = &t->cfg;
    printf("{\"model\":\"%s\",\"device\":\"%s\",\"layers\":%d,\"hidden\":%d,\"fp8_linears\":%d,\"weights_bytes\":%zu,"
           "\"load_s\":%.3f,\"prompt_tokens\":%ld,\"gen_tokens\":%ld,\"kv_cache_dtype\":\"%s\",\"sampling\":\"%s\",\"decode_graphs\":%s,\"dense_weights\":%s",
           mi.dir, be->name, c->num_hidden_layers, c->hidden_size, t->n_fp8, w_bytes, t_load, P, G,
           o.kv_cache_dtype ? o.kv_cache_dtype : "bf16",
           host_sampling || !be->get_topk ? "host, fp32 rows" : "top-k on the device",
           be->graph_begin ? "true" : "false", t->layers[0].q_proj.dense ? "true" : "false");
    fflush(stdout);

    /* Prefill, twice (the first warms up kernels and cuBLASLt's plans); the prompt
     * is padded with its own tokens to whole blocks so decode starts on a block edge. */
    double t_pre = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        for (int j = 0; j < past0; j++) {
            x.tok[j] = (int32_t)((j * 2654435761u) % (uint32_t)c->vocab_size);
            x.pos[j] = x.pos[past0 + j] = x.pos[2 * past0 + j] = j;
        }
        iris_text_seq q = {.n_new = past0, .tokens = x.tok, .pos = x.pos, .pos_stride = past0, .block_table = x.bt,
                           .logits_from = past0 - 1};
        iris_runner_out out;
        double a = iris_now_s();
        rc = iris_runner_step(x.run, &q, 1, NULL, &out, &err);
        t_pre = iris_now_s() - a;
    }
    if (rc) goto done;
    printf(",\"prefill\":{\"tokens\":%d,\"ms\":%.2f,\"tok_per_s\":%.0f}", past0, t_pre * 1e3, past0 / t_pre);
    double free_tps[MAX_BATCHES];
    printf(",\"decode\":[");
    rc = decode_runs(&x, NULL, batches, n_batches, past0, free_tps, &err);
    printf("]");
    if (!rc && sr.schema) {
        printf(",\"decode_json_schema\":{\"schema\":\"%s\",\"sampling\":\"%s\",\"runs\":[", ba.schema_file,
               host_sampling || !be->get_topk ? "whole rows, masks on the host after the step"
                                              : "masks during the forward, applied in the device's top-k");
        rc = decode_runs(&x, &sr, batches, n_batches, past0, free_tps, &err);
        printf("]}");
    }
#ifdef IRIS_CUDA
    iris_cuda_mem cm;
    if (!rc && !strcmp(be->name, "cuda") && iris_cuda_mem_info(be, &cm) == 0)
        printf(",\"memory\":{\"arena_bytes\":%zu,\"arena_peak_bytes\":%zu,\"device_used_bytes\":%zu}", cm.arena_bytes,
               cm.peak_bytes, cm.device_used);
#endif
    fflush(stdout);
    if (!rc && image) rc = bench_image(e, path, &err);
    printf("}\n");
done:
    if (tmp[0]) unlink(tmp);
    schema_close(&sr, max_batch);
    iris_engine_close(e);
    free(x.tok), free(x.pos), free(x.bt), free(x.q), free(x.need);
    if (rc) {
        printf("\n");
        return iris_cli_fail(&err);
    }
    return 0;
}
