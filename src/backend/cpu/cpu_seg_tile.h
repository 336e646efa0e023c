/* cpu_seg_tile.h: the vision-attention tile of cpu_attn.c, written once for both vector widths:
 * included there once per width (no include guard; it undefines them at its end), with these defined:
 *   SEG_TILE_FN  the function's name          SEG_TARGET  its target attribute
 *   SEG_W        lanes: rows of a head a tile  SEG_V, SEG_VD  the float and double vector types
 *   SEG_(op)     op's intrinsic at the width (SEG_(loadu_ps): _mm256_loadu_ps or _mm512_loadu_ps)
 *   SEG_EXP      e^x (cpu_avx2.h)              SEG_SUM(lo, hi, x)  x's lanes, widened to double,
 *   SEG_INV(lo, hi)  1 / the sums as floats                          added into the halves' sums
 *   SEG_PV(p, nt, len, v, ldv, hd, acc)  the nt rows' value sums into acc [t][e]
 * Rows i0..i0+nt (nt <= SEG_W) of head h over keys [a, e_), SEG_W rows a vector: every key and
 * value row is read once for the tile.  Each lane is one row's own arithmetic, whatever rows share
 * its tile (eight keys' FMA sums interleaved, each in order over e; the softmax's exp and its sum
 * in double, in key order), so a row's numbers depend neither on how a batch's rows fall into
 * tiles nor on the width: both widths run the same instructions lane for lane (the test
 * backend_cpu_segment_attention_avx512 holds them to the same bits).  Against the scalar rows
 * (seg_row: separate multiplies and adds, libm's expf): within float rounding.  buf:
 * hd * SEG_W + (e_ - a) * SEG_W + hd * SEG_W floats. */
__attribute__((target(SEG_TARGET))) static void SEG_TILE_FN(const seg_ctx *c, int h, int64_t i0, int nt, int a,
                                                           int e_, float *buf) {
    int hd = c->hd, nh = c->nh, len = e_ - a;
    int64_t ld = iris_tensor_ld(c->qkv);
    const float *base = c->qkv->data;
    float scale = 1.0f / sqrtf((float)hd);
    float *qt = buf, *sc = buf + (size_t)hd * SEG_W, *acc = sc + (size_t)len * SEG_W; /* [e][t], [j][t], [t][e] */
    for (int e = 0; e < hd; e++)
        for (int t = 0; t < SEG_W; t++) qt[e * SEG_W + t] = t < nt ? base[(i0 + t) * ld + h * hd + e] : 0.0f;
    SEG_V vs = SEG_(set1_ps)(scale);
    const float *k0 = base + (int64_t)a * ld + (int64_t)nh * hd + h * hd;
    int jk = 0;
    for (; jk + 8 <= len; jk += 8) { /* eight keys' sums interleaved: each still in order over e */
        const float *k = k0 + jk * ld;
        SEG_V d[8];
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) d[u] = SEG_(setzero_ps)();
        for (int e = 0; e < hd; e++) {
            SEG_V qe = SEG_(loadu_ps)(qt + e * SEG_W);
#pragma GCC unroll 8
            for (int u = 0; u < 8; u++) d[u] = SEG_(fmadd_ps)(qe, SEG_(set1_ps)(k[u * ld + e]), d[u]);
        }
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) SEG_(storeu_ps)(sc + (size_t)(jk + u) * SEG_W, SEG_(mul_ps)(d[u], vs));
    }
    for (; jk < len; jk++) {
        const float *k = k0 + jk * ld;
        SEG_V d = SEG_(setzero_ps)();
        for (int e = 0; e < hd; e++) d = SEG_(fmadd_ps)(SEG_(loadu_ps)(qt + e * SEG_W), SEG_(set1_ps)(k[e]), d);
        SEG_(storeu_ps)(sc + (size_t)jk * SEG_W, SEG_(mul_ps)(d, vs));
    }
    /* softmax down each lane: the max, e^(s - max), the sum in double in key order, then s / sum */
    SEG_V mx = SEG_(set1_ps)(-INFINITY);
    for (int j = 0; j < len; j++) mx = SEG_(max_ps)(mx, SEG_(loadu_ps)(sc + (size_t)j * SEG_W));
    SEG_VD s_lo = SEG_(setzero_pd)(), s_hi = s_lo;
    for (int j = 0; j < len; j++) {
        SEG_V x = SEG_EXP(SEG_(sub_ps)(SEG_(loadu_ps)(sc + (size_t)j * SEG_W), mx));
        SEG_(storeu_ps)(sc + (size_t)j * SEG_W, x);
        SEG_SUM(s_lo, s_hi, x);
    }
    SEG_V inv = SEG_INV(s_lo, s_hi);
    for (int j = 0; j < len; j++)
        SEG_(storeu_ps)(sc + (size_t)j * SEG_W, SEG_(mul_ps)(SEG_(loadu_ps)(sc + (size_t)j * SEG_W), inv));
    const float *v = base + (int64_t)a * ld + 2 * (int64_t)nh * hd + h * hd;
    SEG_PV(sc, nt, len, v, ld, hd, acc);
    for (int t = 0; t < nt; t++)
        memcpy((float *)c->o->data + (i0 + t) * iris_tensor_ld(c->o) + h * hd, acc + (size_t)t * hd,
               sizeof(float) * (size_t)hd);
}

/* the parameters end with the tile: the next width defines them afresh */
#undef SEG_TILE_FN
#undef SEG_TARGET
#undef SEG_W
#undef SEG_V
#undef SEG_VD
#undef SEG_
#undef SEG_EXP
#undef SEG_SUM
#undef SEG_INV
#undef SEG_PV
