/* sampler.c: next-token selection (penalties, greedy, temperature, top-k,
 * top-p, min-p, seeded draws) and the stop-string matcher.  The order of
 * operations and the semantics of each knob are in sampler.h.
 *
 * Owns: per request, the PRNG state, the list of distinct prompt+generated
 * tokens (repetition penalty), the counts of generated tokens (presence and
 * frequency penalties), scratch of n_vocab floats/ints/doubles and, for a
 * constrained request, its grammar matcher and mask (model/grammar.h).  A grammar
 * armed after a token (a Thinking model's "</think>") waits with gwait set: until
 * then every grammar read below (mask, penalize, the candidates' check, the end
 * stop) goes by armed(), so those rows cost and mean what a free row does.
 * Sampling never allocates, except a grammar matcher growing its stack arena.
 *
 * Numerics: logits are processed in fp32 as HF does (penalties, /T); the
 * softmax, cumulative masses and the draw are in double, so the top-p and
 * min-p boundaries only differ from torch's fp32 on exact ties of mass.
 * Speed: top-k is a size-k heap (O(V log k)); top-p without top-k first keeps
 * only the tokens above a logit cut that is lowered until the kept mass
 * reaches top_p (every token below the cut has at least that much mass above
 * it, so it would be removed anyway), so only a few tokens are sorted.
 */
#include "model/sampler.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "rng.h"

struct iris_sampler {
    iris_sampling p;        /* without its stop strings (the stop matcher's) */
    iris_stop_ids stop;     /* none when p.ignore_eos */
    int n_vocab;
    uint64_t rng[4];
    int n_generated;
    uint8_t *seen;          /* bitmap: token in prompt or generated text */
    int *uniq;              /* distinct tokens of `seen`, in order of appearance */
    int n_uniq, cap_uniq;
    int *gen_count;         /* [n_vocab] counts of generated tokens */
    int *gen_uniq;          /* distinct generated tokens */
    int n_gen_uniq, cap_gen_uniq;
    float *work;            /* [n_vocab] processed logits */
    int *cand;              /* [n_vocab] candidate ids */
    iris_grammar *grammar;  /* owned; NULL: unconstrained */
    iris_grammar_matcher *gm;
    uint32_t *gmask;        /* [n_vocab bits] this step's allowed tokens */
    int gmask_state;        /* 1: gmask is this step's, -1: this step's failed (gerr), 0: not computed */
    iris_err gerr;
    iris_stop_ids gend;     /* end tokens allowed once the grammar is complete */
    int gbroken;            /* a token the grammar refused was accepted */
    int gwait;              /* the token that arms the grammar once sampled; -1: armed */
};

/* ---- PRNG: xoshiro256** seeded through splitmix64 (base/rng.h) ---- */


/* Uniform in [0, 1) with 53 random bits. */
static double uniform01(uint64_t s[4]) { return (double)(iris_xoshiro_next(s) >> 11) * 0x1.0p-53; }

/* ---- parameters ---- */

void iris_sampling_default(iris_sampling *p, const iris_generation_config *gc) {
    memset(p, 0, sizeof *p);
    p->do_sample = 1;
    p->temperature = 0.7f;
    p->top_k = 20;
    p->top_p = 0.8f;
    p->repetition_penalty = 1.0f;
    p->seed = -1;
    if (!gc) return;
    p->do_sample = gc->do_sample;
    p->temperature = gc->temperature;
    p->top_k = gc->top_k;
    p->top_p = gc->top_p;
    p->repetition_penalty = gc->repetition_penalty;
}

void iris_stop_ids_default(iris_stop_ids *s, const iris_generation_config *gc) {
    memset(s, 0, sizeof *s);
    if (!gc) {
        s->ids[0] = 151645;
        s->ids[1] = 151643;
        s->n = 2;
        return;
    }
    for (int i = 0; i < gc->n_eos && i < IRIS_SAMPLER_MAX_STOP_IDS && i < 8; i++) s->ids[s->n++] = gc->eos_token_id[i];
}

int iris_sampling_check(const iris_sampling *p, iris_err *err) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return iris_err_set(err, IRIS_EINVAL, "temperature %g: must be a finite number >= 0 (0 = greedy)",
                            p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return iris_err_set(err, IRIS_EINVAL, "top_p %g: must be in (0, 1] (1 = off)", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return iris_err_set(err, IRIS_EINVAL, "min_p %g: must be in [0, 1] (0 = off)", p->min_p);
    if (p->top_k < 0)
        return iris_err_set(err, IRIS_EINVAL, "top_k %d: must be >= 0 (0 = off)", p->top_k);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return iris_err_set(err, IRIS_EINVAL, "repetition_penalty %g: must be a finite number > 0 (1 = off)",
                            p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return iris_err_set(err, IRIS_EINVAL, "presence_penalty %g: must be in [-2, 2]", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return iris_err_set(err, IRIS_EINVAL, "frequency_penalty %g: must be in [-2, 2]", p->frequency_penalty);
    if (p->max_tokens < 0)
        return iris_err_set(err, IRIS_EINVAL, "max_tokens %d: must be >= 1 (or 0 for no limit)", p->max_tokens);
    if (p->top_logprobs < 0 || p->top_logprobs > IRIS_SAMPLER_MAX_LOGPROBS)
        return iris_err_set(err, IRIS_EINVAL, "top_logprobs %d: must be in [0, %d]", p->top_logprobs,
                            IRIS_SAMPLER_MAX_LOGPROBS);
    if (p->n_stop < 0 || p->n_stop > IRIS_MAX_STOP)
        return iris_err_set(err, IRIS_EINVAL, "stop: %d strings; at most %d", p->n_stop, IRIS_MAX_STOP);
    return 0;
}

/* ---- life cycle ---- */

int iris_sampler_init(iris_sampler **out, const iris_sampling *p, const iris_stop_ids *stop, int n_vocab,
                      iris_err *err) {
    *out = NULL;
    int rc = iris_sampling_check(p, err);
    if (rc) return rc;
    if (n_vocab <= 0) return iris_err_set(err, IRIS_EINVAL, "vocabulary size %d: must be > 0", n_vocab);
    if (stop && (stop->n < 0 || stop->n > IRIS_SAMPLER_MAX_STOP_IDS))
        return iris_err_set(err, IRIS_EINVAL, "%d stop token ids: at most %d", stop->n, IRIS_SAMPLER_MAX_STOP_IDS);
    iris_sampler *s = calloc(1, sizeof *s);
    if (!s) return iris_err_set(err, IRIS_ENOMEM, "sampler: out of memory");
    s->p = *p;
    memset(s->p.stop, 0, sizeof s->p.stop);
    s->p.n_stop = 0;
    if (stop && !p->ignore_eos) s->stop = *stop;
    s->n_vocab = n_vocab;
    s->gwait = -1;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    if (p->repetition_penalty != 1.0f) s->seen = calloc(((size_t)n_vocab + 7) / 8, 1);
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
        s->gen_count = calloc((size_t)n_vocab, sizeof *s->gen_count);
    if (!s->work || !s->cand || (p->repetition_penalty != 1.0f && !s->seen) ||
        ((p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) && !s->gen_count)) {
        iris_sampler_free(s);
        return iris_err_set(err, IRIS_ENOMEM, "sampler: out of memory for a vocabulary of %d", n_vocab);
    }
    uint64_t seed = (uint64_t)p->seed;
    if (p->seed < 0) {
        /* No seed asked for: different runs differ. */
        static atomic_ulong counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
               ((uint64_t)atomic_fetch_add(&counter, 1) << 32) ^ (uint64_t)(uintptr_t)s;
    }
    for (int i = 0; i < 4; i++, seed += IRIS_SPLITMIX_GAMMA) s->rng[i] = iris_mix64(seed);
    *out = s;
    return 0;
}

void iris_sampler_free(iris_sampler *s) {
    if (!s) return;
    free(s->seen);
    free(s->uniq);
    free(s->gen_count);
    free(s->gen_uniq);
    free(s->work);
    free(s->cand);
    iris_grammar_matcher_free(s->gm);
    iris_grammar_free(s->grammar);
    free(s->gmask);
    free(s);
}

int iris_sampler_set_grammar(iris_sampler *s, iris_grammar *g, const iris_vocab *v, const iris_stop_ids *end,
                             iris_err *err) {
    if (s->grammar || iris_vocab_n(v) != s->n_vocab) {
        iris_grammar_free(g);
        return iris_err_set(err, IRIS_EINVAL, "grammar: a vocabulary of %d tokens for a sampler of %d (or set twice)",
                            iris_vocab_n(v), s->n_vocab);
    }
    s->grammar = g;
    s->gend = *end;
    s->gmask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *s->gmask);
    if (!s->gmask) return iris_err_set(err, IRIS_ENOMEM, "sampler: out of memory");
    return iris_grammar_matcher_init(&s->gm, g, v, err);
}

/* This step's mask in s->gmask, the end tokens included once the output is complete; computed
 * once a step (the matcher moves only in iris_sampler_accept), failures included. */
static int grammar_mask(iris_sampler *s, iris_err *err) {
    if (s->gmask_state > 0) return 0;
    if (s->gmask_state < 0) {
        if (err) *err = s->gerr;
        return s->gerr.code;
    }
    int rc = s->gbroken ? iris_err_set(&s->gerr, IRIS_EINVAL, "grammar: a token outside the grammar was accepted")
                        : iris_grammar_matcher_mask(s->gm, s->gmask, &s->gerr);
    if (!rc && iris_grammar_matcher_complete(s->gm))
        for (int i = 0; i < s->gend.n; i++) {
            int t = s->gend.ids[i];
            if (t >= 0 && t < s->n_vocab) s->gmask[t >> 5] |= 1u << (t & 31);
        }
    s->gmask_state = rc ? -1 : 1;
    if (rc && !s->gerr.code) s->gerr.code = rc;
    if (rc && err) *err = s->gerr;
    return rc;
}

int iris_sampler_grammar_after(iris_sampler *s, int token, iris_err *err) {
    if (!s->gm || s->n_generated > 0 || token < 0 || token >= s->n_vocab)
        return iris_err_set(err, IRIS_EINVAL, "grammar: armed after token %d of %d, with %s grammar and %d token(s) "
                            "generated", token, s->n_vocab, s->gm ? "a" : "no", s->n_generated);
    s->gwait = token;
    return 0;
}

/* The grammar constrains this step: set, and armed. */
static int armed(const iris_sampler *s) { return s->gm != NULL && s->gwait < 0; }

int iris_sampler_constrained(const iris_sampler *s) { return armed(s); }

int iris_sampler_mask(iris_sampler *s, uint32_t *words, iris_err *err) {
    if (!armed(s)) return 0;
    int rc = grammar_mask(s, err);
    if (rc) return rc;
    memcpy(words, s->gmask, ((size_t)s->n_vocab + 31) / 32 * sizeof *words);
    return 1;
}

int iris_sampler_n_generated(const iris_sampler *s) { return s->n_generated; }

static int push_int(int **arr, int *n, int *cap, int v) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 256;
        int *a = realloc(*arr, (size_t)nc * sizeof *a);
        if (!a) return IRIS_ENOMEM;
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = v;
    return 0;
}

static int note_seen(iris_sampler *s, int t) {
    if (!s->seen || (s->seen[t >> 3] & (1u << (t & 7)))) return 0;
    s->seen[t >> 3] |= (uint8_t)(1u << (t & 7));
    return push_int(&s->uniq, &s->n_uniq, &s->cap_uniq, t);
}

int iris_sampler_add_prompt(iris_sampler *s, const int *ids, int n, iris_err *err) {
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return iris_err_set(err, IRIS_EINVAL, "prompt token %d at position %d: outside the vocabulary [0, %d)",
                                ids[i], i, s->n_vocab);
        if (note_seen(s, ids[i])) return iris_err_set(err, IRIS_ENOMEM, "sampler: out of memory");
    }
    return 0;
}

iris_finish iris_sampler_accept(iris_sampler *s, int token) {
    s->n_generated++;
    if (s->gm && !armed(s)) {
        if (token == s->gwait) s->gwait = -1;   /* the grammar starts at the next token */
    } else if (s->gm) {
        s->gmask_state = 0;
        int end = 0;
        for (int i = 0; i < s->gend.n; i++) end |= token == s->gend.ids[i];
        if (end && iris_grammar_matcher_complete(s->gm)) return IRIS_FINISH_STOP;
        if (iris_grammar_matcher_accept_token(s->gm, token, NULL)) s->gbroken = 1;
    }
    if (token >= 0 && token < s->n_vocab) {
        /* Allocation failure here only weakens a penalty; never fail a request for it. */
        (void)note_seen(s, token);
        if (s->gen_count && s->gen_count[token]++ == 0)
            (void)push_int(&s->gen_uniq, &s->n_gen_uniq, &s->cap_gen_uniq, token);
    }
    for (int i = 0; i < s->stop.n; i++)
        if (token == s->stop.ids[i]) return IRIS_FINISH_STOP;
    if (s->p.max_tokens > 0 && s->n_generated >= s->p.max_tokens) return IRIS_FINISH_LENGTH;
    return IRIS_FINISH_NONE;
}

const char *iris_finish_name(iris_finish f) {
    switch (f) {
    case IRIS_FINISH_STOP: return "stop";
    case IRIS_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

/* ---- logits processing ---- */

/* Copy logits into work (NaN -> -inf), apply the penalties; returns the index
 * of the maximum (lowest id on ties) or -1 when nothing is finite. */
static int penalize(iris_sampler *s, const float *logits) {
    float *w = s->work;
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) w[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    float rp = s->p.repetition_penalty;
    if (rp != 1.0f)
        for (int k = 0; k < s->n_uniq; k++) {
            float *x = &w[s->uniq[k]];
            *x = *x < 0.0f ? *x * rp : *x / rp;
        }
    if (s->gen_count)
        for (int k = 0; k < s->n_gen_uniq; k++) {
            int t = s->gen_uniq[k];
            w[t] -= s->p.frequency_penalty * (float)s->gen_count[t] + s->p.presence_penalty;
        }
    if (armed(s))
        for (int i = 0; i < n; i++)
            if (!((s->gmask[i >> 5] >> (i & 31)) & 1)) w[i] = -INFINITY;
    int best = -1;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (w[i] > bv) {
            bv = w[i];
            best = i;
        }
    return best;
}

/* Temperatures below 1e-5 are greedy (as vLLM): logits / T would overflow. */
static int greedy(const iris_sampler *s) { return s->p.do_sample == 0 || s->p.temperature < 1e-5f; }

/* k-th largest of the finite values in w (a size-k min-heap). */
static float kth_largest(const float *w, int n, int k, float *heap) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        float v = w[i];
        if (!(v > -INFINITY)) continue;
        if (m < k) {
            int c = m++;
            while (c > 0 && heap[(c - 1) / 2] > v) {
                heap[c] = heap[(c - 1) / 2];
                c = (c - 1) / 2;
            }
            heap[c] = v;
        } else if (v > heap[0]) {
            int c = 0;
            for (;;) {
                int l = 2 * c + 1, r = l + 1, sm = c;
                float smv = v;
                if (l < k && heap[l] < smv) sm = l, smv = heap[l];
                if (r < k && heap[r] < smv) sm = r;
                if (sm == c) break;
                heap[c] = heap[sm];
                c = sm;
            }
            heap[c] = v;
        }
    }
    return m < k ? -INFINITY : heap[0];
}

static int cmp_int(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

static int cmp_desc(const void *a, const void *b, void *arg) {
    const float *w = arg;
    int i = *(const int *)a, j = *(const int *)b;
    float x = w[i], y = w[j];
    if (x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

/* Steps 5 and 7 over candidates idx[0..n) of the processed logits w (m: their maximum), shared by
 * the whole-row and the candidates' paths so both sum the same terms in the same order. */

/* top_p: how many of the candidates (value-descending) stay, the mass ranked above each < top_p. */
static int top_p_keep(const float *w, const int *idx, int n, float m, double z_ref, float top_p) {
    if (top_p >= 1.0f) return n;
    double above = 0.0;
    int keep;
    for (keep = 0; keep < n; keep++) {
        if (keep > 0 && above >= (double)top_p) break;
        above += exp((double)w[idx[keep]] - m) / z_ref;
    }
    return keep;
}

static double mass_of(const float *w, const int *idx, int n, float m) {
    double mass = 0.0;
    for (int k = 0; k < n; k++) mass += exp((double)w[idx[k]] - m);
    return mass;
}

/* The draw: the position in idx[0..n) (id order) where the running mass passes u * mass. */
static int draw_at(iris_sampler *s, const float *w, const int *idx, int n, float m, double mass) {
    double u = uniform01(s->rng) * mass, acc = 0.0;
    for (int k = 0; k < n; k++) {
        acc += exp((double)w[idx[k]] - m);
        if (u < acc) return k;
    }
    return n - 1;
}

/* Steps 3-6 of sampler.h: leaves the kept tokens in s->cand[0..*n_kept), most
 * likely first, and their unnormalized weights exp(x - max) in wts.  `top`
 * is the argmax of work. */
static void warp(iris_sampler *s, int top, int *n_kept, double *mass_kept) {
    float *w = s->work;
    int n = s->n_vocab, *cand = s->cand;
    const iris_sampling *p = &s->p;
    if (p->temperature != 1.0f)
        for (int i = 0; i < n; i++) w[i] = w[i] / p->temperature;
    float m = w[top];
    double minp_cut = p->min_p > 0.0f ? log((double)p->min_p) : -INFINITY; /* keep x - m >= cut */
    int nc = 0;
    double z_ref = 0.0; /* the normalizer top-p sees */
    if (p->top_k > 0 && p->top_k < n) {
        float thr = kth_largest(w, n, p->top_k, (float *)cand);
        for (int i = 0; i < n; i++)
            if (w[i] >= thr && w[i] > -INFINITY) z_ref += exp((double)w[i] - m);
        for (int i = 0; i < n; i++)
            if (w[i] >= thr && w[i] > -INFINITY && (double)w[i] - m >= minp_cut) cand[nc++] = i;
    } else {
        for (int i = 0; i < n; i++)
            if (w[i] > -INFINITY) z_ref += exp((double)w[i] - m);
        /* Lower the cut until the mass above it reaches top_p (see the file comment). */
        double cut = p->top_p < 1.0f ? -8.0 : -INFINITY;
        for (;;) {
            double c = cut > minp_cut ? cut : minp_cut, mass = 0.0;
            nc = 0;
            for (int i = 0; i < n; i++) {
                double d = (double)w[i] - m;
                if (w[i] > -INFINITY && d >= c) {
                    cand[nc++] = i;
                    mass += exp(d);
                }
            }
            if (c <= minp_cut || mass >= (double)p->top_p * z_ref) break;
            cut = cut < -100.0 ? -INFINITY : cut * 2.0;
        }
    }
    qsort_r(cand, (size_t)nc, sizeof *cand, cmp_desc, w);
    int keep = top_p_keep(w, cand, nc, m, z_ref, p->top_p);
    *n_kept = keep;
    *mass_kept = mass_of(w, cand, keep, m);
}

static void fill_logprobs(const iris_sampler *s, const float *logits, int token, iris_sample_out *out) {
    int n = s->n_vocab, nt = s->p.top_logprobs;
    float m = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] > m) m = logits[i];
    double z = 0.0;
    for (int i = 0; i < n; i++)
        if (logits[i] > -INFINITY) z += exp((double)logits[i] - m);
    double lse = (double)m + log(z);
    float x = logits[token];
    out->logprob = isnan(x) ? -INFINITY : (float)((double)x - lse);
    out->n_top = 0;
    /* Insertion into a short sorted list: nt <= 20. */
    for (int i = 0; i < n && nt > 0; i++) {
        float v = logits[i];
        if (!(v > -INFINITY)) continue;
        int c = out->n_top;
        if (c == nt && v <= logits[out->top_ids[c - 1]]) continue;
        if (c < nt) out->n_top++;
        else c--;
        while (c > 0 && logits[out->top_ids[c - 1]] < v) {
            out->top_ids[c] = out->top_ids[c - 1];
            c--;
        }
        out->top_ids[c] = i;
    }
    for (int k = 0; k < out->n_top; k++) out->top_logprobs[k] = (float)((double)logits[out->top_ids[k]] - lse);
}

int iris_sampler_sample(iris_sampler *s, const float *logits, iris_sample_out *out, iris_err *err) {
    int rc = armed(s) ? grammar_mask(s, err) : 0;
    if (rc) return rc;
    int top = penalize(s, logits);
    if (top < 0)
        return iris_err_set(err, IRIS_EINVAL, "sampling: all %d logits are NaN or -inf", s->n_vocab);
    int token = top;
    if (!greedy(s)) {
        int keep;
        double mass;
        warp(s, top, &keep, &mass);
        /* Walk the kept tokens in id order, not probability order: near-equal
         * probabilities then cannot swap places when the logits move by a
         * rounding error (a batch of another size, a prefix-cache hit), so the
         * same seed gives the same token unless u falls within that error of a
         * boundary. */
        qsort(s->cand, (size_t)keep, sizeof *s->cand, cmp_int);
        token = s->cand[draw_at(s, s->work, s->cand, keep, s->work[top], mass)];
    }
    if (out) {
        memset(out, 0, sizeof *out);
        out->token = token;
        fill_logprobs(s, logits, token, out);
    }
    return token;
}

/* ---- sampling from the most likely tokens ---- */

/* Penalties that can only lower a logit (repetition >= 1, presence and frequency >= 0): a token
 * outside the candidates then stays at or below the last candidate's logit. */
static int lowering_penalties(const iris_sampling *p) {
    return p->repetition_penalty >= 1.0f && p->presence_penalty >= 0.0f && p->frequency_penalty >= 0.0f;
}

int iris_sampler_top_need(const iris_sampler *s) {
    const iris_sampling *p = &s->p;
    if (p->top_logprobs > 0 || !lowering_penalties(p)) return 0;
    if (greedy(s)) return 1;
    return p->top_k > 0 && p->top_k < s->n_vocab ? p->top_k : 0;
}

int iris_sampler_has_penalties(const iris_sampler *s) {
    return s->p.repetition_penalty != 1.0f || s->gen_count != NULL;
}

int iris_sampler_penalizes(const iris_sampler *s, int token) {
    if (token < 0 || token >= s->n_vocab) return 0;
    if (s->seen && (s->seen[token >> 3] & (1u << (token & 7)))) return 1;
    return s->gen_count && s->gen_count[token] > 0;
}

/* penalize()'s arithmetic on one logit of `token` (already NaN -> -inf). */
static float penalized(const iris_sampler *s, int token, float x) {
    float rp = s->p.repetition_penalty;
    if (rp != 1.0f && s->seen && (s->seen[token >> 3] & (1u << (token & 7)))) x = x < 0.0f ? x * rp : x / rp;
    if (s->gen_count && s->gen_count[token] > 0)
        x -= s->p.frequency_penalty * (float)s->gen_count[token] + s->p.presence_penalty;
    return x;
}

/* Positions 0..n of (w, id) pairs in the order key: 0 = id ascending, 1 = w descending then id. */
static void order_top(const float *w, const int *id, int *pos, int n, int by_value) {
    for (int i = 0; i < n; i++) pos[i] = i;
    for (int i = 1; i < n; i++)         /* insertion sort: n is small */
        for (int j = i; j > 0; j--) {
            int a = pos[j - 1], c = pos[j];
            int after = by_value ? (w[a] < w[c] || (w[a] == w[c] && id[a] > id[c])) : id[a] > id[c];
            if (!after) break;
            pos[j - 1] = c, pos[j] = a;
        }
}

/* (w, id) pairs into order_top's value order, in place (n <= IRIS_SAMPLER_MAX_TOP). */
static void sort_top(float *w, int *id, int n) {
    int pos[IRIS_SAMPLER_MAX_TOP], tid[IRIS_SAMPLER_MAX_TOP];
    float tw[IRIS_SAMPLER_MAX_TOP];
    order_top(w, id, pos, n, 1);
    for (int i = 0; i < n; i++) tw[i] = w[pos[i]], tid[i] = id[pos[i]];
    memcpy(w, tw, sizeof(float) * (size_t)n), memcpy(id, tid, sizeof(int) * (size_t)n);
}

/* Steps 3-7 of sampler.h over the n most likely tokens, in the order and arithmetic of warp and
 * iris_sampler_sample (the sums that run in id order there run in id order here too). */
int iris_sampler_sample_top(iris_sampler *s, const int32_t *ids, const float *vals, int n, iris_sample_out *out,
                            iris_err *err) {
    const iris_sampling *p = &s->p;
    int need = iris_sampler_top_need(s);
    if (need <= 0 || n < need || n > IRIS_SAMPLER_MAX_TOP || n > s->n_vocab)
        return iris_err_set(err, IRIS_EINVAL, "sampling: %d candidates for a request that needs %d (0: the whole row)",
                            n, need);
    float w[IRIS_SAMPLER_MAX_TOP];
    int id[IRIS_SAMPLER_MAX_TOP], pos[IRIS_SAMPLER_MAX_TOP], nf = 0;
    for (int i = 0; i < n; i++) {
        float v = isnan(vals[i]) ? -INFINITY : vals[i];
        if (i > 0 && !(v <= (isnan(vals[i - 1]) ? -INFINITY : vals[i - 1])))
            return iris_err_set(err, IRIS_EINVAL, "sampling: candidate %d (id %d) out of order", i, ids[i]);
        if (!(v > -INFINITY)) break;                /* sorted: the rest is -inf too */
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return iris_err_set(err, IRIS_EINVAL, "sampling: candidate %d has id %d", i, ids[i]);
        w[i] = v, id[i] = ids[i], nf++;
    }
    if (nf == 0) return iris_err_set(err, IRIS_EINVAL, "sampling: all %d logits are NaN or -inf", s->n_vocab);
    if (armed(s)) {
        /* the candidates of the masked row: every finite one allowed (a check; the mask is cached) */
        int rc = grammar_mask(s, err);
        if (rc) return rc;
        for (int i = 0; i < nf; i++)
            if (!((s->gmask[id[i] >> 5] >> (id[i] & 31)) & 1))
                return iris_err_set(err, IRIS_EINVAL, "grammar: candidate %d (token %d) is not allowed: the row's "
                                    "candidates were not masked", i, id[i]);
    }
    /* Penalties (they only lower logits here): the candidates' own values change; any other token
     * stays at or below m, the last candidate's logit, so only what ends above m is known to be the
     * row's top, and it is complete when `need` tokens that no penalty touched are above m (the
     * need-th largest is then above m). */
    int complete = 0;
    if (iris_sampler_has_penalties(s) && nf == n) {
        float m = w[n - 1];
        int untouched = 0, k = 0;
        for (int i = 0; i < nf; i++) {
            int pen = iris_sampler_penalizes(s, id[i]);
            float x = pen ? penalized(s, id[i], w[i]) : w[i];
            if (!pen && w[i] > m) untouched++;
            if (x > m) w[k] = x, id[k] = id[i], k++;
        }
        if (untouched < need)
            return iris_err_set(err, IRIS_ELIMIT, "sampling: %d candidates fall short once penalized", n);
        sort_top(w, id, k);
        nf = k, complete = 1;
    } else if (iris_sampler_has_penalties(s)) {
        /* fewer finite logits than candidates: every finite token is here */
        for (int i = 0; i < nf; i++)
            if (iris_sampler_penalizes(s, id[i])) w[i] = penalized(s, id[i], w[i]);
        sort_top(w, id, nf);
        while (nf > 0 && !(w[nf - 1] > -INFINITY)) nf--;
        if (nf == 0) return iris_err_set(err, IRIS_EINVAL, "sampling: all %d logits are NaN or -inf", s->n_vocab);
        complete = 1;
    }
    int token = id[0];                              /* greedy: the maximum, lowest id on ties */
    if (!greedy(s)) {
        int k = p->top_k;
        if (p->temperature != 1.0f)
            for (int i = 0; i < nf; i++) w[i] = w[i] / p->temperature;
        float m = w[0];
        /* Fewer finite values than k in the row (the list ends in -inf): all of them are kept. */
        float thr = nf < k ? -INFINITY : w[k - 1];
        int kept = 0;
        while (kept < nf && w[kept] >= thr) kept++;
        if (kept == n && !complete)                 /* the tie at the k-th value may go on past the list */
            return iris_err_set(err, IRIS_ELIMIT, "sampling: the top-%d boundary is tied past %d candidates", k, n);
        /* warp: the normalizer over the top-k set (summed in id order), then min-p. */
        double z_ref = 0.0, minp_cut = p->min_p > 0.0f ? log((double)p->min_p) : -INFINITY;
        order_top(w, id, pos, kept, 0);
        for (int i = 0; i < kept; i++) z_ref += exp((double)w[pos[i]] - m);
        int nc = 0;
        for (int i = 0; i < kept; i++)
            if ((double)w[i] - m >= minp_cut) w[nc] = w[i], id[nc] = id[i], nc++;
        order_top(w, id, pos, nc, 1);              /* warp's qsort: w descending, then id */
        int keep = top_p_keep(w, pos, nc, m, z_ref, p->top_p);
        double mass = mass_of(w, pos, keep, m);
        float kw[IRIS_SAMPLER_MAX_TOP];
        int kid[IRIS_SAMPLER_MAX_TOP];
        for (int i = 0; i < keep; i++) kw[i] = w[pos[i]], kid[i] = id[pos[i]];
        /* The draw walks the kept tokens in id order, as iris_sampler_sample. */
        order_top(kw, kid, pos, keep, 0);
        token = kid[pos[draw_at(s, kw, pos, keep, m, mass)]];
    }
    if (out) {
        memset(out, 0, sizeof *out);
        out->token = token;
    }
    return token;
}

int iris_sampler_probs(iris_sampler *s, const float *logits, float *probs, iris_err *err) {
    int rc = armed(s) ? grammar_mask(s, err) : 0;
    if (rc) return rc;
    int top = penalize(s, logits);
    if (top < 0)
        return iris_err_set(err, IRIS_EINVAL, "sampling: all %d logits are NaN or -inf", s->n_vocab);
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (greedy(s)) {
        probs[top] = 1.0f;
        return 0;
    }
    int keep;
    double mass;
    warp(s, top, &keep, &mass);
    float m = s->work[top];
    for (int k = 0; k < keep; k++) probs[s->cand[k]] = (float)(exp((double)s->work[s->cand[k]] - m) / mass);
    return 0;
}

/* ---- stop strings ---- */

struct iris_stop_matcher {
    int n;
    char **stops;
    size_t *lens;
    size_t max_len;
    char *held;         /* text not yet emitted: a possible start of a stop string */
    size_t n_held, cap_held;
    char *out;          /* what the last call emitted */
    size_t cap_out;
    int which, done;
};

int iris_stop_init(iris_stop_matcher **out, const char *const *stops, int n, iris_err *err) {
    *out = NULL;
    if (n < 0) return iris_err_set(err, IRIS_EINVAL, "stop strings: negative count %d", n);
    iris_stop_matcher *m = calloc(1, sizeof *m);
    if (!m) return iris_err_set(err, IRIS_ENOMEM, "stop strings: out of memory");
    m->which = -1;
    if (n > 0) {
        m->stops = calloc((size_t)n, sizeof *m->stops);
        m->lens = calloc((size_t)n, sizeof *m->lens);
        if (!m->stops || !m->lens) {
            iris_stop_free(m);
            return iris_err_set(err, IRIS_ENOMEM, "stop strings: out of memory");
        }
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            iris_stop_free(m);
            return iris_err_set(err, IRIS_EINVAL, "stop string %d is empty: give at least one character", i);
        }
        m->stops[i] = strdup(stops[i]);
        m->n = i + 1;
        if (!m->stops[i]) {
            iris_stop_free(m);
            return iris_err_set(err, IRIS_ENOMEM, "stop strings: out of memory");
        }
        m->lens[i] = strlen(stops[i]);
        if (m->lens[i] > m->max_len) m->max_len = m->lens[i];
    }
    *out = m;
    return 0;
}

void iris_stop_free(iris_stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->held);
    free(m->out);
    free(m);
}

int iris_stop_which(const iris_stop_matcher *m) { return m->which; }

static int reserve(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    char *b = realloc(*buf, nc);
    if (!b) return IRIS_ENOMEM;
    *buf = b;
    *cap = nc;
    return 0;
}

/* Length of the longest proper suffix of buf[0..len) that begins some stop string. */
static size_t partial_tail(const iris_stop_matcher *m, const char *buf, size_t len) {
    size_t h = len < m->max_len ? len : m->max_len - 1;
    for (; h > 0; h--)
        for (int i = 0; i < m->n; i++)
            if (m->lens[i] > h && !memcmp(buf + len - h, m->stops[i], h)) return h;
    return 0;
}

int iris_stop_feed(iris_stop_matcher *m, const char *text, size_t len, const char **emit, size_t *n_emit,
                   iris_err *err) {
    *emit = "";
    *n_emit = 0;
    if (m->done) return 1;
    if (reserve(&m->held, &m->cap_held, m->n_held + len + 1) ||
        reserve(&m->out, &m->cap_out, m->n_held + len + 1))
        return iris_err_set(err, IRIS_ENOMEM, "stop strings: out of memory");
    memcpy(m->held + m->n_held, text, len);
    size_t n = m->n_held + len;
    /* The earliest completed stop string wins (the first listed on a tie). */
    size_t best = n;
    for (int i = 0; i < m->n; i++) {
        const char *hit = memmem(m->held, n, m->stops[i], m->lens[i]);
        if (hit && (size_t)(hit - m->held) < best) {
            best = (size_t)(hit - m->held);
            m->which = i;
        }
    }
    size_t out_len, keep;
    if (m->which >= 0) {
        m->done = 1;
        out_len = best;
        keep = 0;
    } else {
        keep = m->n ? partial_tail(m, m->held, n) : 0;
        out_len = n - keep;
    }
    memcpy(m->out, m->held, out_len);
    m->out[out_len] = '\0';
    memmove(m->held, m->held + n - keep, keep);
    m->n_held = keep;
    *emit = m->out;
    *n_emit = out_len;
    return m->done;
}

void iris_stop_flush(iris_stop_matcher *m, const char **emit, size_t *n_emit) {
    *emit = "";
    *n_emit = 0;
    if (m->done || m->n_held == 0) return;
    if (reserve(&m->out, &m->cap_out, m->n_held + 1)) {
        /* Out of memory: hand out the held buffer itself. */
        *emit = m->held;
        *n_emit = m->n_held;
        m->n_held = 0;
        return;
    }
    memcpy(m->out, m->held, m->n_held);
    m->out[m->n_held] = '\0';
    *emit = m->out;
    *n_emit = m->n_held;
    m->n_held = 0;
}
