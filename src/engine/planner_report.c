/* planner_report.c: the memory plan as a table, as the one failure message,
 * and as JSON (planner.h).
 *
 * Sizes are printed twice: exact bytes (grouped by thousands) and a human
 * unit (GiB with 2 decimals, MiB below 1 GiB); the JSON holds exact bytes
 * only.  Estimated parts (CUDA context, graphs) say so.  The failure message
 * is one string: what does not fit, every part, the budget, then every
 * alternative that was planned, so the user fixes it in one go.
 * Owns nothing: results are malloc'd strings the caller frees.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

/* A growing string; on allocation failure it stays NULL and writes stop. */
typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)k;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

static char *done(sbuf *b) {
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    return b->s;
}

/* 1234567 -> "1,234,567" */
static const char *grouped(uint64_t v, char buf[32]) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), j = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[j++] = ',';
        buf[j++] = tmp[i];
    }
    buf[j] = 0;
    return buf;
}


_Static_assert(IRIS_PLAN_DENSE_AUTO_PERCENT == 10, "the dense-weights row says 10%");
_Static_assert(IRIS_PLAN_WORKER_AUTO_PERCENT == 1, "the vision-worker row says 1%");

/* What the part's bytes are made of, in words and numbers. */
static void part_how(const iris_plan *p, int part, char *out, size_t size) {
    char a[32], b[32], c[32];
    const iris_plan_settings *s = &p->settings;
    switch (part) {
    case IRIS_PART_WEIGHTS: {
        size_t k = 0;
        out[0] = 0;
        for (int dt = 0; dt < IRIS_DT_COUNT && k < size; dt++)
            if (p->dtype_bytes[dt])
                k += (size_t)snprintf(out + k, size - k, "%s%s %s", k ? ", " : "", iris_dtype_name((iris_dtype)dt),
                                      iris_plan_human(p->dtype_bytes[dt], a));
        break;
    }
    case IRIS_PART_DENSE:
        if (p->dense)
            snprintf(out, size, "BF16 copies of the FP8 decoder linears, for prefill and batches over 16 rows");
        else
            snprintf(out, size, "none (%s)", !p->weights_fp8 ? "no FP8 linears"
                                             : s->dense_weights == IRIS_DENSE_OFF ? "--dense-weights off"
                                             : "auto: they would take over 10% of the budget, or not fit");
        break;
    case IRIS_PART_KV_CACHE:
        snprintf(out, size, "%s blocks x %d tokens x %s B/token (%s)%s", grouped((uint64_t)p->kv_blocks, a),
                 IRIS_KV_BLOCK_TOKENS, grouped(p->kv_bytes_per_token, b), iris_plan_kv_dtype_name(s->kv_cache_dtype),
                 p->fits ? "" : ", the least the context needs");
        break;
    case IRIS_PART_ACTIVATIONS: {
        char d[32];
        snprintf(out, size, "shared: vision %s patches %s | decoder step %s tokens %s", grouped((uint64_t)p->image_patches, a),
                 iris_plan_human(p->vision_bytes, b), grouped((uint64_t)s->max_batch_tokens, c),
                 iris_plan_human(p->lm_step_bytes, d));
        break;
    }
    case IRIS_PART_IMAGE_EMBEDS:
        snprintf(out, size, "%s rows (merged + DeepStack), kept until prefilled", grouped((uint64_t)p->image_room_tokens, a));
        break;
    case IRIS_PART_SAMPLING:
        snprintf(out, size, "%d sequences: fp32 logits + u16 token counts over the vocabulary", s->max_num_seqs);
        break;
    case IRIS_PART_STEP_META:
        snprintf(out, size, "ids, positions, slots for %s rows; block tables for %s tokens", grouped((uint64_t)s->max_batch_tokens, a),
                 grouped((uint64_t)p->context, b));
        break;
    case IRIS_PART_WORKSPACE: snprintf(out, size, "matmul workspace"); break;
    case IRIS_PART_VISION_WORKER:
        if (p->vision_worker)
            snprintf(out, size, "a second encoder beside the steps: vision %s patches %s + matmul workspace",
                     grouped((uint64_t)p->image_patches, a), iris_plan_human(p->vision_bytes, b));
        else
            snprintf(out, size, "none (%s)", p->text_only ? "no vision" : s->vision_worker == IRIS_WORKER_OFF ? "off"
                                             : s->max_num_seqs < 2 ? "one sequence"
                                             : "auto: it would take over 1% of the budget, or not fit");
        break;
    case IRIS_PART_CUDA_GRAPHS:
        snprintf(out, size, "estimate: %d decode batch sizes x %s", p->n_graphs, iris_plan_human(IRIS_PLAN_GRAPH_ESTIMATE, a));
        break;
    case IRIS_PART_CUDA_CONTEXT:
        snprintf(out, size, p->context_measured ? "measured" : "estimate: measured at start on the GPU");
        break;
    default: out[0] = 0;
    }
}

static void table(const iris_plan *p, sbuf *b) {
    char a[32], h[32], how[256];
    put(b, "  %-20s %16s %11s   %s\n", "part", "bytes", "size", "made of");
    for (int i = 0; i < IRIS_PART_COUNT; i++) {
        part_how(p, i, how, sizeof how);
        put(b, "  %-20s %16s %11s   %s\n", iris_plan_part_name(i), grouped(p->part_bytes[i], a),
            iris_plan_human(p->part_bytes[i], h), how);
    }
    put(b, "  %-20s %16s %11s   ", "total", grouped(p->total_bytes, a), iris_plan_human(p->total_bytes, h));
    if (p->total_bytes <= p->budget_bytes)
        put(b, "of the %s budget (%s unused)\n", iris_plan_human(p->budget_bytes, a),
            iris_plan_human(p->budget_bytes - p->total_bytes, h));
    else
        put(b, "over the %s budget by %s\n", iris_plan_human(p->budget_bytes, a),
            iris_plan_human(p->total_bytes - p->budget_bytes, h));
}

/* What a placement try gave, for the reasons below. */
static const char *try_gave(const iris_plan_place_try *t, char buf[64]) {
    char a[32];
    if (t->fits) snprintf(buf, 64, "a context of %s tokens", grouped((uint64_t)t->context, a));
    else snprintf(buf, 64, "no context that fits");
    return buf;
}

/* The try with this placement, or NULL; `which` -1 for either value. */
static const iris_plan_place_try *try_of(const iris_plan *p, int host, int fp8) {
    for (int i = 0; i < p->n_place_tries; i++)
        if ((host < 0 || p->place_tries[i].embed_host == host) && (fp8 < 0 || p->place_tries[i].lm_head_fp8 == fp8))
            return &p->place_tries[i];
    return NULL;
}

/* Where the token embeddings and the lm_head went, what each takes and why (planner.h). */
static void placement(const iris_plan *p, sbuf *b) {
    char a[32], c[32], g[64], t[32];
    const char *target = grouped((uint64_t)p->place_target, t);
    const iris_plan_place_try *dev = try_of(p, 0, -1), *stored = try_of(p, p->embed_host, 0);
    if (!stored) stored = try_of(p, -1, 0);
    put(b, "placement (--embeddings, --lm-head-dtype):\n");
    if (p->embed_host) {
        put(b, "  token embeddings: in host memory, %s off the card; each step uploads its rows (%s B a token)",
            iris_plan_human(p->embed_bytes, a), grouped(p->embed_row_bytes, c));
        if (!p->embed_auto) put(b, "; --embeddings host\n");
        else if (dev) put(b, "; auto: on the card they left %s (the aim: %s)\n", try_gave(dev, g), target);
        else put(b, "; auto\n");
    } else {
        put(b, "  token embeddings: on the card, %s%s", iris_plan_human(p->embed_bytes, a),
            p->lm_head_tied && !p->lm_head_fp8 ? " (the tied lm_head reads them too)" : "");
        if (!p->embed_auto) put(b, "; --embeddings device\n");
        else if (!p->fits) put(b, "; auto: no placement fits\n");
        else if (p->context >= p->place_target) put(b, "; auto: the context reaches %s with them\n", target);
        else if (p->lm_head_tied) put(b, "; auto: the tied lm_head reads the table, so on the host it saves nothing alone\n");
        else put(b, "; auto\n");
    }
    if (p->lm_head_fp8) {
        put(b, "  lm_head: FP8 quantized at load, %s on the card (stored %s %s)", iris_plan_human(p->lm_head_bytes, a),
            iris_dtype_name((iris_dtype)p->lm_head_stored_dtype), iris_plan_human(p->lm_head_stored_bytes, c));
        if (!p->lm_head_auto) put(b, "; --lm-head-dtype fp8\n");
        else if (stored) put(b, "; auto: as stored it left %s\n", try_gave(stored, g));
        else put(b, "; auto\n");
    } else {
        put(b, "  lm_head: %s as stored, %s on the card%s", iris_dtype_name((iris_dtype)p->lm_head_stored_dtype),
            iris_plan_human(p->lm_head_tied && !p->embed_host ? p->embed_bytes : p->lm_head_bytes, a),
            p->lm_head_tied && !p->embed_host ? " (the embedding table, tied)" : "");
        if (!p->lm_head_auto) put(b, "; --lm-head-dtype stored\n");
        else if (!p->fits) put(b, "; auto: no placement fits\n");
        else if (p->lm_head_stored_dtype == IRIS_DT_BF16 || p->lm_head_stored_dtype == IRIS_DT_F32)
            put(b, "; auto: FP8 only when nothing else fits (--lm-head-dtype fp8%s frees %s)\n",
                p->lm_head_tied && !p->embed_host ? " --embeddings host" : "",
                iris_plan_human(p->lm_head_stored_bytes - p->lm_head_fp8_bytes, c));
        else put(b, "; auto\n");
    }
}

/* "Org/Name-FP8" when the label is a repo id of a BF16 model, else "". */
static void fp8_repo(const char *label, char *out, size_t size) {
    out[0] = 0;
    const char *slash = strchr(label, '/');
    if (!slash || slash == label || label[0] == '.' || strchr(slash + 1, '/') || strstr(label, "FP8")) return;
    size_t n = strcspn(label, "@");
    snprintf(out, size, "%.*s-FP8", (int)n, label);
}

static void suggestions(const iris_plan *p, sbuf *b) {
    char a[32], c[32], repo[600];
    put(b, "Settings that would fit (each alone, the others as asked):\n");
    for (int i = 0; i < p->n_suggestions; i++) {
        const iris_plan_suggestion *g = &p->suggestions[i];
        char gives[160] = "";
        if (g->fits)
            snprintf(gives, sizeof gives, "context %s tokens, %lld full-length sequence%s at once", grouped((uint64_t)g->context, a),
                     (long long)g->n_full_seqs, g->n_full_seqs == 1 ? "" : "s");
        switch (g->kind) {
        case IRIS_SUGGEST_EMBED_HOST:
            put(b, "  --embeddings host (the token-embedding table in host memory, weights on the card %s): %s%s\n",
                iris_plan_human(g->weight_bytes, c), g->fits ? "fits, " : "does not fit either", gives);
            break;
        case IRIS_SUGGEST_LM_HEAD_FP8:
            put(b, "  --lm-head-dtype fp8 --embeddings host (the lm_head quantized to FP8 at load, weights on the "
                "card %s): %s%s\n", iris_plan_human(g->weight_bytes, c), g->fits ? "fits, " : "does not fit either", gives);
            break;
        case IRIS_SUGGEST_MAX_MODEL_LEN:
            if (g->fits) put(b, "  --max-model-len %lld: the largest that fits (%s)\n", (long long)g->value, gives);
            else put(b, "  --max-model-len: none; not even %s tokens fit with the other settings\n", grouped((uint64_t)p->context, a));
            break;
        case IRIS_SUGGEST_MAX_IMAGE_PIXELS:
            if (g->fits)
                put(b, "  --max-image-pixels %lld: the largest that fits (%s image tokens; %s)\n", (long long)g->value,
                    grouped((uint64_t)g->value / 1024, c), gives);
            else put(b, "  --max-image-pixels: no value down to %s fits\n", grouped((uint64_t)IRIS_PLAN_MIN_IMAGE_PIXELS, a));
            break;
        case IRIS_SUGGEST_MAX_BATCH_TOKENS:
            if (g->fits) put(b, "  --max-batch-tokens %lld: the largest that fits (%s)\n", (long long)g->value, gives);
            else put(b, "  --max-batch-tokens: no value down to %d fits\n", p->settings.max_num_seqs);
            break;
        case IRIS_SUGGEST_KV_FP8:
            put(b, "  --kv-cache-dtype fp8: %s%s\n", g->fits ? "fits, " : "does not fit either", gives);
            break;
        case IRIS_SUGGEST_FP8_CHECKPOINT:
        case IRIS_SUGGEST_FP8_CHECKPOINT_KV_FP8:
            fp8_repo(p->label, repo, sizeof repo);
            put(b, "  the FP8 checkpoint of this model%s (Qwen's block-FP8, weights %s%s%s%s): %s%s\n",
                g->kind == IRIS_SUGGEST_FP8_CHECKPOINT_KV_FP8 ? " with --kv-cache-dtype fp8" : "",
                iris_plan_human(g->weight_bytes, c), repo[0] ? "; iris pull " : "", repo,
                repo[0] ? " or iris quantize" : "; iris quantize writes it", g->fits ? "fits, " : "does not fit either",
                gives);
            break;
        }
    }
}

char *iris_plan_format(const iris_plan *p) {
    sbuf b = {0};
    char a[32], c[32];
    if (!p->fits) {
        put(&b, "%s does not fit in %s (%s): %s.\n", p->label, iris_plan_human(p->budget_bytes, a), p->budget_source, p->why);
        table(p, &b);
        placement(p, &b);
        suggestions(p, &b);
        return done(&b);
    }
    put(&b, "Memory plan for %s (%s weights)\n", p->label, p->weights_fp8 ? "FP8" : p->weights_int4 ? "4-bit" : "BF16");
    put(&b, "budget: %s (%s)\n", iris_plan_human(p->budget_bytes, a), p->budget_source);
    table(p, &b);
    placement(p, &b);
    put(&b, "context: %s tokens (%s; the model allows %s)\n", grouped((uint64_t)p->context, a),
        p->context_auto ? "the largest that fits" : "--max-model-len", grouped((uint64_t)p->max_position_embeddings, c));
    put(&b, "full-length sequences at once: %lld (the KV pool holds %s tokens; up to %d sequences run together)\n",
        (long long)p->n_full_seqs, grouped((uint64_t)p->kv_blocks * IRIS_KV_BLOCK_TOKENS, a), p->settings.max_num_seqs);
    if (p->text_only && p->vision_weight_bytes)
        put(&b, "text only (--text-only): the vision tower (%s) stays off the card, images are refused; prefill "
            "chunk: %d tokens (--max-batch-tokens)\n", iris_plan_human(p->vision_weight_bytes, c),
            p->settings.max_batch_tokens);
    else if (p->text_only)
        put(&b, "text only: the model has no vision tower; prefill chunk: %d tokens (--max-batch-tokens)\n",
            p->settings.max_batch_tokens);
    else
        put(&b, "largest image: %s pixels = %s tokens (--max-image-pixels); prefill chunk: %d tokens (--max-batch-tokens)\n",
            grouped((uint64_t)p->settings.max_image_pixels, c), grouped((uint64_t)p->image_tokens, a),
            p->settings.max_batch_tokens);
    if (!p->text_only && p->video_pixels > 0) {
        char d[32];
        put(&b, "largest video: %s pixels over its frames = %s tokens (", grouped((uint64_t)p->video_pixels, c),
            grouped((uint64_t)p->video_tokens, a));
        if (p->video_pixels < p->settings.max_video_pixels)
            put(&b, "--max-video-pixels %s lowered to leave %s tokens of the context",
                grouped((uint64_t)p->settings.max_video_pixels, d), grouped(IRIS_PLAN_VIDEO_ROOM_TOKENS, c));
        else
            put(&b, "--max-video-pixels");
        put(&b, "); each frame pair within the largest image; larger videos are resized down\n");
    }
    if (p->image_tokens > p->context)
        put(&b, "note: the largest image (%lld tokens) is longer than the context; lower --max-image-pixels\n",
            (long long)p->image_tokens);
    return done(&b);
}

static const char *suggestion_name(int kind) {
    switch (kind) {
    case IRIS_SUGGEST_EMBED_HOST: return "embeddings_host";
    case IRIS_SUGGEST_LM_HEAD_FP8: return "lm_head_dtype_fp8";
    case IRIS_SUGGEST_MAX_MODEL_LEN: return "max_model_len";
    case IRIS_SUGGEST_MAX_IMAGE_PIXELS: return "max_image_pixels";
    case IRIS_SUGGEST_MAX_BATCH_TOKENS: return "max_batch_tokens";
    case IRIS_SUGGEST_KV_FP8: return "kv_cache_dtype_fp8";
    case IRIS_SUGGEST_FP8_CHECKPOINT: return "fp8_checkpoint";
    case IRIS_SUGGEST_FP8_CHECKPOINT_KV_FP8: return "fp8_checkpoint_kv_cache_dtype_fp8";
    }
    return "?";
}

char *iris_plan_json(const iris_plan *p) {
    json_t *o = json_object(), *parts = json_array(), *regions = json_array(), *sugg = json_array(),
           *dts = json_object(), *graphs = json_array();
    if (!o || !parts || !regions || !sugg || !dts || !graphs) goto fail;
    for (int i = 0; i < IRIS_PART_COUNT; i++) {
        char how[256];
        part_how(p, i, how, sizeof how);
        json_array_append_new(parts, json_pack("{s:s, s:I, s:b, s:s}", "name", iris_plan_part_name(i), "bytes",
                                               (json_int_t)p->part_bytes[i], "estimate",
                                               i == IRIS_PART_CUDA_GRAPHS ||
                                                   (i == IRIS_PART_CUDA_CONTEXT && !p->context_measured),
                                               "made_of", how));
    }
    for (int i = 0; i < p->n_regions; i++)
        json_array_append_new(regions, json_pack("{s:s, s:s, s:I, s:I}", "name", p->regions[i].name, "part",
                                                 iris_plan_part_name(p->regions[i].part), "offset",
                                                 (json_int_t)p->regions[i].offset, "bytes",
                                                 (json_int_t)p->regions[i].bytes));
    for (int i = 0; i < p->n_suggestions; i++) {
        const iris_plan_suggestion *g = &p->suggestions[i];
        json_array_append_new(sugg, json_pack("{s:s, s:b, s:I, s:I, s:I, s:I}", "setting", suggestion_name(g->kind),
                                              "fits", g->fits, "value", (json_int_t)g->value, "context",
                                              (json_int_t)g->context, "full_length_seqs", (json_int_t)g->n_full_seqs,
                                              "weight_bytes", (json_int_t)g->weight_bytes));
    }
    for (int dt = 0; dt < IRIS_DT_COUNT; dt++)
        if (p->dtype_bytes[dt]) json_object_set_new(dts, iris_dtype_name((iris_dtype)dt), json_integer((json_int_t)p->dtype_bytes[dt]));
    for (int i = 0; i < p->n_graphs; i++) json_array_append_new(graphs, json_integer(p->graph_batch[i]));

    json_t *settings = json_pack("{s:I, s:i, s:i, s:I, s:s}", "max_model_len", (json_int_t)p->settings.max_model_len,
                                 "max_num_seqs", p->settings.max_num_seqs, "max_batch_tokens",
                                 p->settings.max_batch_tokens, "max_image_pixels",
                                 (json_int_t)p->settings.max_image_pixels, "kv_cache_dtype",
                                 iris_plan_kv_dtype_name(p->settings.kv_cache_dtype));
    json_object_set_new(o, "model", json_string(p->label));
    json_object_set_new(o, "fits", json_boolean(p->fits));
    if (!p->fits) json_object_set_new(o, "why", json_string(p->why));
    json_object_set_new(o, "budget_bytes", json_integer((json_int_t)p->budget_bytes));
    json_object_set_new(o, "budget_source", json_string(p->budget_source));
    json_object_set_new(o, "settings", settings);
    json_object_set_new(o, "weights_fp8", json_boolean(p->weights_fp8));
    json_object_set_new(o, "weights_int4", json_boolean(p->weights_int4));
    json_object_set_new(o, "dense_weights", json_boolean(p->dense));
    json_object_set_new(o, "vision_worker", json_boolean(p->vision_worker));
    json_t *tries = json_array();
    for (int i = 0; tries && i < p->n_place_tries; i++) {
        const iris_plan_place_try *t = &p->place_tries[i];
        json_array_append_new(tries, json_pack("{s:s, s:s, s:b, s:I, s:I}", "embeddings", t->embed_host ? "host" : "device",
                                               "lm_head_dtype", t->lm_head_fp8 ? "fp8" : "stored", "fits", t->fits,
                                               "context", (json_int_t)t->context, "weight_bytes",
                                               (json_int_t)t->weight_bytes));
    }
    json_object_set_new(o, "placement",
                        json_pack("{s:s, s:b, s:I, s:I, s:s, s:b, s:b, s:s, s:I, s:I, s:I, s:o*}", "embeddings",
                                  p->embed_host ? "host" : "device", "embeddings_auto", p->embed_auto, "embed_bytes",
                                  (json_int_t)p->embed_bytes, "embed_row_bytes", (json_int_t)p->embed_row_bytes,
                                  "lm_head_dtype", p->lm_head_fp8 ? "F8_E4M3" : iris_dtype_name((iris_dtype)p->lm_head_stored_dtype),
                                  "lm_head_auto", p->lm_head_auto, "lm_head_tied", p->lm_head_tied,
                                  "lm_head_stored_dtype", iris_dtype_name((iris_dtype)p->lm_head_stored_dtype),
                                  "lm_head_bytes", (json_int_t)p->lm_head_bytes, "lm_head_stored_bytes",
                                  (json_int_t)p->lm_head_stored_bytes, "target_context", (json_int_t)p->place_target,
                                  "tries", tries));
    json_object_set_new(o, "weight_bytes_by_dtype", dts);
    json_object_set_new(o, "context", json_integer(p->context));
    json_object_set_new(o, "context_auto", json_boolean(p->context_auto));
    json_object_set_new(o, "max_position_embeddings", json_integer(p->max_position_embeddings));
    json_object_set_new(o, "full_length_seqs", json_integer(p->n_full_seqs));
    json_object_set_new(o, "kv_bytes_per_token", json_integer((json_int_t)p->kv_bytes_per_token));
    json_object_set_new(o, "kv_block_bytes", json_integer((json_int_t)p->kv_block_bytes));
    json_object_set_new(o, "kv_blocks", json_integer(p->kv_blocks));
    json_object_set_new(o, "image_tokens", json_integer(p->image_tokens));
    json_object_set_new(o, "max_video_pixels", json_integer(p->settings.max_video_pixels));
    json_object_set_new(o, "video_pixels", json_integer(p->video_pixels));
    json_object_set_new(o, "video_tokens", json_integer(p->video_tokens));
    json_object_set_new(o, "text_only", json_boolean(p->text_only));
    json_object_set_new(o, "vision_weight_bytes", json_integer((json_int_t)p->vision_weight_bytes));
    json_object_set_new(o, "image_patches", json_integer(p->image_patches));
    json_object_set_new(o, "image_room_tokens", json_integer(p->image_room_tokens));
    json_object_set_new(o, "vision_bytes", json_integer((json_int_t)p->vision_bytes));
    json_object_set_new(o, "lm_step_bytes", json_integer((json_int_t)p->lm_step_bytes));
    json_object_set_new(o, "graph_batch_sizes", graphs);
    json_object_set_new(o, "parts", parts);
    json_object_set_new(o, "device_bytes", json_integer((json_int_t)p->device_bytes));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)p->total_bytes));
    json_object_set_new(o, "unused_bytes",
                        json_integer(p->total_bytes <= p->budget_bytes ? (json_int_t)(p->budget_bytes - p->total_bytes) : 0));
    json_object_set_new(o, "regions", regions);
    json_object_set_new(o, "suggestions", sugg);
    char *s = json_dumps(o, JSON_INDENT(2));
    json_decref(o);
    return s;
fail:
    json_decref(o), json_decref(parts), json_decref(regions), json_decref(sugg), json_decref(dts), json_decref(graphs);
    return NULL;
}
