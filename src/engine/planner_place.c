/* planner_place.c: where the token embeddings and the lm_head go (planner.h, --embeddings and
 * --lm-head-dtype; the rule is written there).
 *
 * The candidates are tried in the order of their cost: everything on the card; the table in
 * host memory (exact: the step uploads its rows); then the lm_head in FP8 too (an accuracy cost).
 * A flag removes the candidates it rules out; a candidate that saves nothing (the table of a
 * tied lm_head alone, which the card keeps for the logits) is not tried.  A candidate wins when
 * it fits with the target context (--max-model-len, else IRIS_PLAN_AUTO_PLACE_CONTEXT), or when
 * it fits at all and the next would add the FP8 lm_head by auto: auto changes the logits only
 * for a plan that does not fit otherwise, and never quantizes a tied lm_head (the 2B's, the
 * 4B's: with the table on the host it saves only half the table; the flags can ask for it).
 * When none wins, the one with the longest context; when none fits, the first, as the flags ask
 * (the failure message lists it; each setting that would fit is planned with the placement
 * chosen again, as a run with it would; the placements the flags ruled out are listed).  Owns
 * nothing.
 */
#include <string.h>

#include "planner_internal.h"

int iris_plan_lm_head_quantizable(const iris_plan_model *m) {
    return m->lm_head_dtype == IRIS_DT_BF16 || m->lm_head_dtype == IRIS_DT_F32;
}

uint64_t iris_plan_placed_weights(const iris_plan_model *m, int embed_host, int lm_head_fp8, uint64_t *dtb) {
    uint64_t d[IRIS_DT_COUNT];
    memcpy(d, m->dtype_bytes, sizeof d);
    uint64_t w = m->weight_bytes, E = m->embed_bytes;
    int tied = m->cfg.tie_word_embeddings, q = lm_head_fp8 && iris_plan_lm_head_quantizable(m);
    if (q) {
        /* untied: the stored lm_head gives way to its FP8 copy; tied: the copy comes beside the table */
        w = w - m->lm_head_bytes + m->lm_head_fp8_bytes;
        d[m->lm_head_dtype] -= m->lm_head_bytes;
        d[IRIS_DT_F8_E4M3] += m->lm_head_fp8_bytes - m->lm_head_fp8_scale_bytes;
        d[IRIS_DT_F32] += m->lm_head_fp8_scale_bytes;
    }
    if (embed_host && !(tied && !q)) {
        /* (tied with a stored lm_head: the table stays on the card for the logits) */
        w -= E;
        d[m->embed_dtype] -= E;
    }
    if (dtb) memcpy(dtb, d, sizeof d);
    return w;
}

/* The candidates (embed_host, lm_head_fp8) the settings allow, cheapest first. */
static int candidates(const iris_plan_model *m, const iris_plan_settings *s, int out[3][2]) {
    static const int lm_auto[3][2] = {{0, 0}, {1, 0}, {1, 1}};
    static const int lm_stored[2][2] = {{0, 0}, {1, 0}};
    static const int lm_fp8[2][2] = {{0, 1}, {1, 1}};
    const int(*list)[2] = s->lm_head_dtype == IRIS_LM_HEAD_FP8 ? lm_fp8 : s->lm_head_dtype == IRIS_LM_HEAD_STORED ? lm_stored
                                                                                                         : lm_auto;
    int n_list = s->lm_head_dtype == IRIS_LM_HEAD_AUTO ? 3 : 2, n = 0;
    int tied = m->cfg.tie_word_embeddings, quant = iris_plan_lm_head_quantizable(m);
    for (int i = 0; i < n_list; i++) {
        int h = list[i][0], f = list[i][1];
        if ((s->embeddings == IRIS_EMBED_DEVICE && h) || (s->embeddings == IRIS_EMBED_HOST && !h)) continue;
        /* nothing to quantize; or tied: auto leaves a tied lm_head (the 2B's, the 4B's) as it is */
        if (s->lm_head_dtype == IRIS_LM_HEAD_AUTO && f && (!quant || tied)) continue;
        if (s->embeddings == IRIS_EMBED_AUTO && h && tied && !(f && quant)) continue;  /* saves nothing */
        out[n][0] = h, out[n][1] = f, n++;
    }
    return n;
}

void iris_plan_place_choose(plan_in *in, iris_plan *p, plan_place *out) {
    const iris_plan_model *m = in->m;
    int64_t max_pos = m->cfg.text_config.max_position_embeddings;
    memset(out, 0, sizeof *out);
    out->target = in->s.max_model_len ? in->s.max_model_len
                  : max_pos < IRIS_PLAN_AUTO_PLACE_CONTEXT ? max_pos : IRIS_PLAN_AUTO_PLACE_CONTEXT;
    int cand[3][2], n = candidates(m, &in->s, cand), pick = -1, best = -1;
    if (n == 0) cand[0][0] = in->s.embeddings == IRIS_EMBED_HOST, cand[0][1] = in->s.lm_head_dtype == IRIS_LM_HEAD_FP8, n = 1;
    for (int i = 0; i < n && pick < 0; i++) {
        in->weight_bytes = iris_plan_placed_weights(m, cand[i][0], cand[i][1], NULL);
        iris_plan_once(in, p);
        out->tries[out->n_tries++] = (iris_plan_place_try){cand[i][0], cand[i][1], p->fits, p->fits ? p->context : 0,
                                                           in->weight_bytes};
        /* the next candidate adds the FP8 lm_head by auto: taken only when this one does not fit */
        int exact_last = i + 1 == n || (in->s.lm_head_dtype == IRIS_LM_HEAD_AUTO && cand[i + 1][1] && !cand[i][1]);
        if (p->fits && (p->context >= out->target || exact_last)) pick = i;
        else if (p->fits && (best < 0 || p->context > out->tries[best].context)) best = i;
    }
    if (pick < 0) pick = best >= 0 ? best : 0;
    int last = n - 1;  /* the suggestions' placement: the last that auto takes without changing the logits */
    while (last > 0 && in->s.lm_head_dtype == IRIS_LM_HEAD_AUTO && cand[last][1]) last--;
    out->most_saving = iris_plan_placed_weights(m, cand[last][0], cand[last][1], NULL);
    out->embed_host = cand[pick][0];
    out->lm_head_fp8 = cand[pick][1] && m->lm_head_dtype != IRIS_DT_F8_E4M3;  /* stored FP8: nothing to do */
    out->embed_auto = in->s.embeddings == IRIS_EMBED_AUTO;
    out->lm_head_auto = in->s.lm_head_dtype == IRIS_LM_HEAD_AUTO;
    in->weight_bytes = iris_plan_placed_weights(m, cand[pick][0], cand[pick][1], out->dtype_bytes);
    if (pick != out->n_tries - 1) iris_plan_once(in, p);  /* p holds the last pass tried */
}

void iris_plan_place_fill(const plan_in *in, const plan_place *pl, iris_plan *p) {
    const iris_plan_model *m = in->m;
    int tied = m->cfg.tie_word_embeddings, q = pl->lm_head_fp8 && iris_plan_lm_head_quantizable(m);
    p->embed_host = pl->embed_host;
    p->lm_head_fp8 = q;
    p->embed_auto = pl->embed_auto;
    p->lm_head_auto = pl->lm_head_auto;
    p->lm_head_tied = tied;
    p->lm_head_stored_dtype = m->lm_head_dtype;
    p->embed_bytes = m->embed_bytes;
    p->embed_row_bytes = (uint64_t)m->cfg.text_config.hidden_size * 2;
    p->lm_head_stored_bytes = tied ? m->embed_bytes : m->lm_head_bytes;
    p->lm_head_fp8_bytes = m->lm_head_fp8_bytes;
    p->lm_head_bytes = q ? m->lm_head_fp8_bytes : tied ? (pl->embed_host ? m->embed_bytes : 0) : m->lm_head_bytes;
    p->place_target = pl->target;
    p->n_place_tries = pl->n_tries;
    memcpy(p->place_tries, pl->tries, sizeof p->place_tries);
    memcpy(p->dtype_bytes, pl->dtype_bytes, sizeof p->dtype_bytes);
}

static void add_suggestion(iris_plan *p, int kind, const iris_plan *alt, uint64_t weights) {
    if (p->n_suggestions >= IRIS_PLAN_MAX_SUGGESTIONS) return;
    p->suggestions[p->n_suggestions++] = (iris_plan_suggestion){
        .kind = kind, .fits = alt->fits, .context = alt->fits ? alt->context : 0,
        .n_full_seqs = alt->fits ? alt->n_full_seqs : 0, .weight_bytes = weights};
}

void iris_plan_place_suggest(const plan_in *in0, const plan_place *pl, iris_plan *p, iris_plan *alt) {
    const iris_plan_model *m = in0->m;
    int tied = m->cfg.tie_word_embeddings, quant = iris_plan_lm_head_quantizable(m);
    plan_in in = *in0;
    in.weight_bytes = iris_plan_placed_weights(m, pl->embed_host, pl->lm_head_fp8, NULL);
    /* --embeddings host, the lm_head as chosen (a tied one's table saves nothing alone) */
    if (!pl->embed_host && (!tied || (pl->lm_head_fp8 && quant))) {
        in.weight_bytes = iris_plan_placed_weights(m, 1, pl->lm_head_fp8, NULL);
        iris_plan_once(&in, alt);
        add_suggestion(p, IRIS_SUGGEST_EMBED_HOST, alt, in.weight_bytes);
    }
    /* --lm-head-dtype fp8 with the table in host memory */
    if (!pl->lm_head_fp8 && quant) {
        in = *in0;
        in.weight_bytes = iris_plan_placed_weights(m, 1, 1, NULL);
        iris_plan_once(&in, alt);
        add_suggestion(p, IRIS_SUGGEST_LM_HEAD_FP8, alt, in.weight_bytes);
    }
}
