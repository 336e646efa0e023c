/* cuda_decode.cu: every decoder layer of a decode-only step of 1..4 sequences in one persistent
 * kernel (backend.h decode_layers), for FP8 checkpoints on sm_90 and newer.  By default it takes the
 * steps where it measured faster than the ops one by one (iris_cuda_decode_layers: for 2B-sized
 * layers 1 sequence at any length, 2 within 8,448 tokens, 3 within 3,200, 4 within 2,176; for
 * 4B-sized layers 1-4 at any length); IRIS_CUDA_DECODE_STACK=1 every step it can, =0 none.
 *
 * Why: op by op, a batch-1 decode layer is ~9 kernels whose every boundary drains the GPU: each
 * GEMV fills the SMs' registers, so the next kernel's CTAs (and their early weight loads) start
 * only as it ends, and the latency-bound steps (norms, attention, the split merge) leave the
 * memory idle.  On an H100 that holds 2B-FP8 at ~630 tok/s, ~50 us a layer against ~17 us of
 * weight bytes at full bandwidth (cuda_gemv_mma.cu, cuda_attn.cu).  Here one grid of one CTA an
 * SM runs all the layers, and the weights never wait for the activations: each CTA's weight tiles
 * for the whole step follow a fixed order, and DS_PRODUCERS producer warps stream them into a
 * ring of shared-memory slots (bulk copies completing on mbarriers; chunk n is producer
 * n % DS_PRODUCERS's) as fast as slots free up, through the grid barriers and the attention; the
 * 8 consumer warps take the slots in the same order.
 *
 * Per layer, five phases with a grid barrier after each but the first (a counter in device memory,
 * zeroed before the launch; release add, acquire spin):
 *   1. x = rms_norm(h) · input_layernorm (each CTA for itself, into shared memory), then the q, k
 *      and v rows: the 16-row tiles of [q; k; v] go round the CTAs (tile b, b + grid, ...), their
 *      values out as tagged 64-bit words (value and tag in one word, so that a reader sees both or
 *      neither), which the attention takes as they come (no barrier) and the writers zero after the
 *      barrier behind it;
 *   2. attention: items (row, kv head, context split) round the CTAs; each does the q/k norms and
 *      the rotary of its GQA group (and, for the split holding the newest key, the k head and v
 *      into the cache), walks its keys with an online softmax (64 a round: for q·k a lane holds a
 *      key's quarter, for p·v 4 dimensions of every head), and the last split of a (row, kv head)
 *      to finish merges the partials (cuda_attn.cu's flash-decoding, same counters);
 *   3. o_proj over the attention rows; each tile's CTA adds its rows into h;
 *   4. x = rms_norm(h) · post_attention_layernorm, then gate and up (a tile holds both, 16 rows
 *      each) and silu(gate) · up into g;
 *   5. down_proj over g, added into h.
 * A GEMV phase whose whole tiles share out unevenly over the CTAs goes stream-K instead (ds_pieces:
 * even runs of chunks, a tile cut between two CTAs finished by one of them).
 * A tile's weights arrive as chunks of 16 rows x CW columns (CW 512, or 256/128 for narrow
 * models) with their block scales; warp w takes the 64-column super-steps w, w + 8, ... of the tile
 * and multiplies them on the tensor cores exactly as cuda_gemv_mma.cu does (bf16(q · scale),
 * mma.sync m16n8k16, fp32; rows of x past the step's are copies of the last), the 8 warps' sums
 * are added in warp order through shared memory.
 * Activations written in the kernel are read back with ld.global.cg (L2, not the SM's own L1,
 * which is not coherent) after the barrier or counter that publishes them.
 * Numerics: the ops' roundings (rms_norm, qk_norm_rope_kv, attn_paged, the residual adds,
 * silu_mul); the products' sums run in another order than the per-op kernels' (another split of
 * the columns), as between any two GEMV schedules.
 * What it declines (returns 1; text.c then runs the ops): BF16 or F16 weights, non-BF16 norm
 * weights, an E4M3 KV cache, head_dim other than 128, GQA groups over 4, hidden sizes over 4,096,
 * more than 4 rows, shapes not in whole 16-row tiles or 128-column chunks, cards before sm_90.
 *
 * Measured (H100, synth checkpoints, 1,024-token context, iris bench with graphs; per-phase times
 * from IRIS_CUDA_DS_TRACE and bench/ds_trace.py, the latest CTA's stamps, graphs off):
 *   - 2026-11-26 (fourth session): 2B-FP8 batch 1 771-782 tok/s against 629 op by op,
 *     4B-FP8 426-429 against 307-309; a 2B layer ~36.8 us (q/k/v 3.2, its barrier 2.9, attention
 *     6.8, o 1.7, gate/up 7.9, down 3.7, the other four barriers ~8.0, norms and copies 2.5); a 4B
 *     layer ~56.8 us (q/k/v 5.3, its barrier 3.7, attention 9.4, o 4.7, gate/up 15.5, down 8.0,
 *     the other four barriers ~7.1, norms and copies 3.0).
 *   - 2026-11-25 (the top-k candidates in one copy): 2B-FP8 batch 1 714-718 tok/s, 4B-FP8 379-381
 *     (the rule above for more rows); a 2B layer ~41.1 us: q/k/v 3.1, attention 11.3, o 1.7, gate/up 7.9, down 3.8, five
 *     barriers 0.9-3.3 each (~10 in all), norms 1.4 + 1.2, copies 0.9.  A step (CUPTI trace, before
 *     the metadata change): this kernel 1,178 us, the lm_head (BF16, 622 MB, 3.1 TB/s) 199 us,
 *     top-k 11 us, the rest ~30 us.
 *   - as first written (one producer warp, divisions in the chunk loop): 457 tok/s, ~69 us a layer.
 *     The weight stream alone (consumers only waiting and freeing slots) took 39 us a layer with one
 *     producer warp (1.27 TB/s; cp.async instead of bulk copies: 57), 23.6 with four (2.1 TB/s).
 *     Nsight Compute then: 0.34 instructions issued a scheduler a cycle, 3 warps a scheduler (12
 *     warps, 168 registers each, one CTA an SM), the producers waiting for free slots 2/3 of the time
 *     (the consumers behind), a consumer super-step (1 KB of weights) 241 instructions of which 96
 *     the dequantization and ~120 the divisions of the ring and owner arithmetic: taking those by
 *     increments made the GEMV phases 38 -> 18 us a layer.
 *   - tried and dropped: taking 4 chunks a warp at once (slots freed later: slower); L2 bulk
 *     prefetches of each attention item's keys before the layer (attention 12.4 -> 11.3 us, the rest
 *     slower: 677 -> 663 tok/s); the grid barrier over 8 counters instead of one (no change);
 *     the split merge in one round trip with an acquire-release atomic, with 4 key rounds in flight
 *     for groups of 2 (registers spilled: 2B 677 -> 655, 4B 363 -> 340); the same merge alone, and
 *     with the attention waiting on per-kv-head counters of its q/k/v tiles instead of the grid
 *     barrier before it (2B 676-680 -> 675-690 tok/s, batch 2 1,245-1,253 -> 1,234-1,280; 4B 363 ->
 *     346-358: the longer-lived prologue registers spilled more).
 *   - 2026-11-25 (second session), with probes beside the kernel: the stream alone is not the limit
 *     (bench/stream_probe.cu: 4 producer warps of 16 row copies of 512 bytes stream 2.97 TB/s when the
 *     slots are freed at once; one 8 KB copy a chunk 2.93-2.98), nor the consumers' arithmetic
 *     (bench/dq_probe.cu: a super-step, dequantization and 4 mmas, 329 cycles a warp with 8 warps, ~2x
 *     the stream's share of an SM; the e4m3 -> f16 step in integer operations, bit-exact, is slower:
 *     440).  Every consumer slot (20 of 20; 19 for 4B) was ready at the start of every GEMV phase
 *     of every layer (mbarrier test_wait at the phase start): the weights wait in shared memory, and
 *     the phases still take about the stream's time (gate/up ~560 cycles a chunk against the probe's
 *     329).  The attention of a 2B layer, per CTA: 3.3 us from the barrier to the end of the
 *     prologue (reading the q/k/v just written, the norms), 4.2 us of key walk (two rounds), 1.6 us
 *     for the partials and the counter, the last split's merge 0.4 (3.4 for the CTA that merges).
 *     Kept: a warp frees its slot once the super-step's values are in registers, before the
 *     products (2B-FP8 batch 1 +1-2%, 4B even); the step's metadata (rows' context, sequence,
 *     slot, rotary angles) and the CTA's attention item's block-table entries read once into
 *     shared memory at the start, not in every layer's chain of dependent loads (the attention
 *     11.9 -> 11.3 us; 2B-FP8 batch 1 705-708 -> 714-718 tok/s, 4B 376-378 -> 379-381).  Tried and dropped (H100, alternating runs): 2 or 4
 *     accumulators a row group (no change), loading a chunk ahead (GEMV phases slower, 7.7 -> 8.4
 *     us), the producers' wait with a suspend-time hint (no change), holding o_proj's tiles until the
 *     keys are loaded (attention 12 -> 17 us), the rotary angles made once a step in shared memory
 *     (prologue unchanged), the item's first keys and norm weights loaded before the barrier
 *     (prologue 3.3 -> 0.7 us, but the barrier +1.7 us and more spills: 2B 704 -> 700 tok/s); the
 *     slots freed 4-12 chunks late, so that the refills do not come in bursts during the attention
 *     and barriers (attention unchanged, 4B slower); the own split's value row read with its key;
 *     the next layer's q/k norm weights copied into shared memory a layer ahead (2B 714-719 ->
 *     706-715, 4B 380-382 -> 382-384: noise); at most 4, 6, 8 or 12 chunks on the way from each
 *     CTA's producers at once, in case the deep queues of the stream slowed the barriers and the
 *     attention's loads (2B 694-715 tok/s for every cap and none, barriers unchanged: they do not).
 *     So the attention's and the barriers' latencies are their own, not the stream's.
 *   - 2026-11-26 (H200: alternating runs of one build's variants, 2B-FP8 / 4B-FP8 batch 1 and 2): the
 *     registers moved from the producer warpgroup to the consumers' (setmaxnreg, sm_90a: 56 and 224
 *     a thread instead of 168 for all; no spills left, 64 bytes before): 2B 781-789 -> 790-804 tok/s,
 *     4B 405-406 -> 412-413; then the grid barrier before the attention split in two, the first
 *     keys and the q/k norm weights loaded between the arrival and the wait (before the arrival, as
 *     tried earlier, the release waited for them): 2B 827-830 (batch 2 1,413-1,426 -> 1,496-1,498),
 *     4B 418-422 (741-742 -> 768-774); a 2B layer 37.9 -> 36.5 us (the attention's path 10.3 -> 8.1,
 *     the barrier's 1.5 -> 2.4).  All keys of a split in one round (DS_DU 4, which the registers now
 *     allow): 1-2% slower than two.  Dropped: the producers prefetching their chunks into L2 16-64
 *     chunks past the ring (cp.async.bulk.prefetch.L2), so that the memory keeps streaming while the
 *     ring is full: 2B 780 -> 715-721, 4B 401 -> 315-318 (slower at every depth); the first 2, 3 or 4
 *     chunks of each GEMV phase taken from the ring and dequantized into registers while the barrier
 *     before it is waited for (2B 808-813 -> 773-782, 694-703, 633-642 tok/s: the held registers
 *     cost more than the dequantization saved); the barrier polled by 2, 4 or 8 staggered relaxed
 *     loads in flight (2B 822-827 -> 783-795, 771-775, 756-767: the polls crowd the counter), or by
 *     one with a 32-250 ns sleep between polls (no change).  On an H100 (the same day): a warp of its
 *     own prefetching the producers' next 12-48 chunks into L2 (2B 745-755 -> 609-731, 4B 397-401 ->
 *     300-327: slower again, so the stream is not helped by L2 prefetches of it); 16 or 32 bytes of
 *     row padding in a slot instead of 64 (as conflict-free: 2 more slots, 22 for 2B, 21 for 4B; no
 *     change: the ring's depth does not bound even 4B's GEMV phases).  Now 2B-FP8 745-756 tok/s at
 *     batch 1, 4B-FP8 396-401; a 2B step (CUPTI) 1,331 us: this kernel 1,086, the lm_head 199, the
 *     embedding gather with the host's time between steps 26, top-k 12.
 *     Why the GEMV phases run at about half the consumers' probe speed, looked at (H100): a chunk's
 *     stamps (layer 14's gate/up, one CTA) came every ~350 ns (~700 cycles) with every slot already
 *     full at its wait, so the consumers, not the stream, pace them; Nsight Compute's samples over
 *     that loop (135 instructions a unit, 96 of them the dequantization: 16 e4m3x2 -> f16x2, 32
 *     f16 -> f32, 32 multiplies, 16 packs) are 29% dependency waits, 27% issuing, 15% not selected
 *     (another warp issued), 7% each branch resolution and math-pipe throttle: two consumer warps a
 *     scheduler do not hide the chains.  Tried and dropped: a unit's weights as their exact bf16
 *     codes (e4m3 -> f16 -> bf16 bits, times 2^112) with the block scale applied to the mma sum
 *     (fewer conversions, other numbers: 2B 755-758 -> 746-750 tok/s, and past the 1% test bound
 *     against the ops); two units loaded, then both multiplied (gate and up, or even and odd
 *     chunks into two accumulators) for more independent work a warp (gate/up 7.8 -> 8.3 us; 2B
 *     754-757 -> 743-745); 12 consumer warps instead of 8 (the phase's super-steps round the warps,
 *     152 registers a consumer thread, some spilled; correct, 21/21): the GEMV phases no faster
 *     (gate/up 7.8 -> 8.2 us), the norms slower, 2B 761-763 -> 709-710 tok/s, 4B 400 -> 374-375.  So
 *     not the warps' latencies: the SM's own work on a chunk (the same instructions however many
 *     warps share them) paces it; which unit binds (issue, the conversions' pipe) is open, since
 *     the cheaper exact-code dequantization above was no faster either.
 *     Kept: the split counter's add made acquire-release by thread 0 alone (split_count_last), in
 *     place of every thread's sequentially consistent __threadfence before and after a plain add
 *     (Nsight Compute had the merge's fence among the attention's costliest instructions): the
 *     attention's path 8.5 -> 7.8 us, 2B-FP8 742-755 -> 766-770 tok/s (batch 2 1,364-1,396 ->
 *     1,407-1,419), 4B-FP8 396-401 -> 404-405 (741-750 -> 757-758); the same in cuda_attn.cu's
 *     op-by-op decode attention.
 *     Dropped: h handed from the o_proj and down_proj epilogues to the next norm as 64-bit words of
 *     two bf16 values and an epoch (each written and read whole, the reader waiting for its
 *     epoch), in place of the two barriers before the norms (correct, 21/21): the barriers' paths
 *     went to ~0.1 us, the norms' from 0.8 to 3.1-3.3 us, 2B-FP8 762-770 -> 760-764 tok/s, 4B-FP8
 *     400-406 -> 393-396 (batch 4 1,277 -> 974, the readers' polls in the way).  So a barrier's
 *     ~2-3 us after a GEMV phase is the time for the last epilogue's stores to reach the other SMs
 *     while the stream keeps the memory busy, not the counter: after the attention, with the ring
 *     full and the stream idle, the same barrier takes 0.9 us.  Confirmed and dropped: the producers
 *     holding back chunks of later phases from the start of a CTA's last tile of a GEMV phase until
 *     the barrier after it (and, in a second variant, through the attention): the barriers' paths
 *     2-3 -> ~1 us, but the held-back chunks then came late (the attention 7.7 -> 11.2 us when they
 *     came during it; the GEMV phases slower when held past it): 2B-FP8 762-769 -> 757-761 tok/s,
 *     4B-FP8 404-405 -> 368-387.  The stream's bytes cost the same wherever they go: a layer is the
 *     stream's ~16 us (2B) plus what of the latency chain it cannot hide, and the chain's latencies
 *     are those of a memory kept busy.  Also no change: every lane arriving on a slot's empty barrier
 *     (count 256) in place of the warp sync and lane 0's arrival (2B 769-770 either way).  Slower: the
 *     last split's merge in one round trip (each output's thread loading every split's max, sum and
 *     value at once, up to 16 splits): the attention 7.7 -> 8.0 us, 2B 770-771 -> 764-766, 4B 406 ->
 *     399-400.  Nsight Compute over a whole 2B step's kernel (for the next look at the GEMV phases):
 *     349 M warp instructions, IPC 1.31 an SM (issue slots 33% busy), ALU pipe 25.6% of its peak,
 *     FMA 12.6%, FMA-heavy 15.6%, shared memory 3.1%; the producers' empty-slot waits 13.8 M
 *     try-wait rounds (41 M instructions), and a chunk's 16 row copies issued one lane at a time (the
 *     bulk copy takes uniform registers: 8 instructions a row).
 *     The design's floor, measured (H100, trace, graphs off): the same kernel with the products
 *     left out (consumers only wait, load, free the slot and fold the values in with one add; wrong
 *     numbers, timing only) takes 35.6 us a 2B layer against 37.9: the GEMV phases drop from 16.7
 *     to 6.9 us, but the barriers after them grow from 2.6-2.9 to 4.3-5.8 us (the freed slots'
 *     refills all in flight at once) and the rest stays.  So faster consumers alone buy at most ~6%
 *     (~800 tok/s): a layer is bounded by its weights' ~16.5 us of stream plus the latency chain that
 *     the stream's traffic slows; the targets need fewer hand-offs on the chain (bench/sync_probe.cu:
 *     cluster shared memory is not much quicker than L2 under the stream).
 *   - 2026-11-26 (compile only: no sm_120 card here): for sm_120a/f ptxas ignored setmaxnreg
 *     ("to maintain compatibility into 'extern' call") because the bulk copy named its destination
 *     shared::cluster, which it lowers to a call there; named shared::cta (the same CTA-local
 *     address, PTX 8.6) it keeps setmaxnreg, and the kernel built for sm_120f has no spills (208-byte
 *     frame, 176 bytes of spill stores before).  The sm_90a cubin is byte for byte the same.
 *   - 2026-11-26 (H100, one build's variants alternating, 2B-FP8 / 4B-FP8 batch 1, 2, 4; the decode
 *     tests passed for each): (1) the grid barrier after the attention replaced by a counter a
 *     (row, kv head), released by the split that writes the head's output and acquired by every
 *     CTA before o_proj: 2B 764-766 -> 763-766, 4B 404-405 -> 402-403: the barrier is not what
 *     the chain waits on there; the last merge is.  (2) No merge in the attention at all: every
 *     split counts its partial in (release), and each CTA's o_proj prep merges all partials itself
 *     (16 heads x 16 splits x 132 floats, 135 KB a CTA for 2B, through L2, 4 or 8 splits a round
 *     of loads; 16 spilled): 2B 764-766 -> 716-718, 4B 404-405 -> 365-369.  Each SM pulling that
 *     much from L2 under the weight stream costs ~3 us a layer more than the merge's round trips
 *     it saves (~30 GB/s an SM, about its share of the stream's own bandwidth).
 *   - 2026-11-26 (H100, alternating, 3 rounds): the weight stream's bulk copies with an L2
 *     evict-first policy (createpolicy, .L2::cache_hint), so that what the chain hands between CTAs
 *     stays in L2: kept.  2B batch 1 767-770 -> 768-773, 2 1,416-1,417 -> 1,422-1,425, 4 2,346-2,350
 *     -> 2,349-2,366; 4B batch 1 403-405 -> 408-409, 2 751-755 -> 768-769, 4 1,272-1,275 ->
 *     1,309-1,311 (the decode tests passed).  Dropped: the attention's key/value loads evict-first
 *     too (2B 766-771, 4B 407-409 at batch 1: no gain), and the same hint on the ops' FP8 GEMV
 *     weights (cuda_gemv_mma.cu; 2B batch 8 3,669-3,702 -> 3,730-3,740, 4B 1,806 -> 1,834-1,838,
 *     batch 64 unchanged): a build with both met an illegal instruction in the GPU tests, and no
 *     device time was left to tell which of the two.  Retried alone the next session (plain loads
 *     ld.global.nc.L2::cache_hint, the shared-memory tiles' copies cp.async...L2::cache_hint): the
 *     GPU tests met the illegal instruction again (in gpu_ops_decode_stack's op-by-op step; which
 *     form is unresolved, the benchmark's batches of 4 and more, register loads only, ran), and
 *     batch 32 was slower (2B 7,366-7,436 -> 7,148-7,192 tok/s, 4B 3,524-3,533 ->
 *     3,431-3,443; batch 8 +1%): dropped.
 *   - 2026-11-26 (third session; H100, builds alternating in one run, 3 rounds, the decode tests
 *     passed for each): stream-K for the phases whose whole tiles share out unevenly (ds_pieces;
 *     4B's o_proj, 160 tiles of 8 chunks, and down_proj, 160 of 19, over 132 CTAs: before, 28 CTAs
 *     took two tiles and the rest idled; per-phase paths from the trace o 5.3 -> 4.7 us, down 10.5
 *     -> 8.1, the barrier after down 1.6 -> 2.7 as the stream's refills bunch up; a 4B layer 59.3 ->
 *     58.2 us): 4B-FP8 batch 1 405-409 -> 416-418 tok/s, batch 4 1,303-1,315 -> 1,320-1,330; 2B
 *     unchanged (its phases share out within 4%, none goes stream-K: 764-771 either way).  How the
 *     cut tiles are finished mattered: the last piece to finish adding them up after an
 *     acquire-release count (as the attention's merge) cost two L2 round trips a cut tile and
 *     made 4B slower (380-381 -> 368-372); the fixed finisher reading tagged words, one.  And the
 *     generic loops (every phase's run from the arguments) cost 3-4% by themselves, on both models,
 *     though the instructions they add are few (2B 771-773 -> 737-740 with no phase stream-K; the
 *     64-bit divisions of the first version alone ~2%): hence one instance of the kernel per
 *     common mask (none; o_proj + down_proj) and a generic one for the rest, and the tile's
 *     epilogue one branch per thread as before (a piece's store, or the finisher's sums and the
 *     output): 2B 759-768 -> 767-770 against 764-774 before stream-K.  Every phase
 *     stream-K (IRIS_CUDA_DS_SPLIT=15) is slower: 2B 732-736, 4B 404-408.  Dropped the same day:
 *     the attention's split merge by split 0 from tagged partials (no counter, one round trip
 *     less; attention path 7.8 -> 7.4 us, but 2B 767-772 -> 768-771 and 4B +0.8%, and 16 bytes
 *     spilled on sm_120f); an instance for GQA groups of 2 (2B 764-771 -> 764-768); a batch-1
 *     instance (DS_MAX_ROWS 1: 2B 769 against 766-771, 4B 400 against 405-410), though with both
 *     (groups of 2, one row) 2B measured 784 once, which looked like code placement rather than
 *     work saved (the kernel is ~140 KB of code).
 *   - 2026-11-26 (fourth session; H100, builds alternating in one run, 2-3 rounds, the decode tests
 *     passed for each): the attention walk's second round of keys and values (keys 32-63 of a
 *     split: every round past the first was loaded at the top of its turn, its latency in the
 *     path) copied by cp.async into the warp's own 2 KB of A.acc, which the walk does not use
 *     until its end: kept.  Issued once the barrier is passed (the prologue's warps after their
 *     q/k/v load): 2B batch 1 766-774 -> 771-782 tok/s, 4B 417-423 -> 426-429 (batch 2 +1%); the
 *     attention's path 7.7 -> 6.8 us (2B), 10.4 -> 9.4 (4B), the barrier before it +0.15.  Issued
 *     with the first round, before the barrier's wait: the attention as fast, but the wait 2.7 ->
 *     3.1 us, 2B 773 and 4B 420-425 (no gain).  Retried with the consumers' 224 registers: the GEMV
 *     loop loading the next slot (wait, values, slot freed) before the products of this one, so
 *     that the wait and the loads overlap them: slower again (2B 780-782 -> 761-773, 4B 427-429 ->
 *     410-417; q/k/v 3.2 -> 3.7 us, down 3.7 -> 4.3, the barriers after them 0.4-0.6 shorter: the
 *     freed slots' refills moved, not the consumers' pace).  The chunk loop unrolled by 2 or 4 (fewer
 *     back edges): 2B 778-780 -> 773-777 and 711-715 tok/s, 4B 426 -> 417-423 and 387-389.  Nsight
 *     Compute's samples over a 2B step (the kernel instance without stream-K): the four GEMV loops
 *     hold 24% of all warps' samples (q/k/v 4.3%, o 2.0%, gate/up 12.0%, down 5.8%), 137-138
 *     instructions a slot a warp (272 for gate/up's two), stalled on fixed-latency dependencies
 *     28%, issuing 27%, another warp issuing 14%, the branch back to the loop's top 7-11%, the
 *     full-slot test's result 5-7%, the math pipe 7%; the consumers' retry paths ran 0 times (every
 *     slot full when reached), the producers' empty-slot tests ~8.5 million times a step.
 *     The attention's path split by stamps inside it (a trace build): 2B prologue 0.7 us, key walk
 *     3.4, partials and split count 0.9, the last split's merge 2.0; 4B 0.7, 4.9, 1.1, 2.9.  The
 *     walk waits for its keys: loads issued behind the weight stream's queued copies come back
 *     after microseconds.  Tried and dropped (the decode tests passed for each): the first item's
 *     second round copied at the layer's start (after norm 1, into A.acc, which the GEMV epilogue
 *     does not touch): norm 1 0.8 -> 1.4 us (the copies' issue), the attention 6.8 -> 6.6, 2B
 *     781-782 -> 775-779 tok/s, 4B 426-429 -> 422-424; the first 64 keys and values as four ring
 *     slots in the producers' stream after the q/k/v chunks (a 256-byte bulk copy a key, the
 *     producers given 64 registers, the consumers 216, against spills): the barrier before the
 *     attention 2.9 -> 1.9 us but the attention 6.8 -> 8.5 (4B 9.5 -> 11.9), 2B 757-769, 4B
 *     418-419 against 780-783 and 425-427 (the register split alone, the ring off: 767-774 and
 *     412-415); the k head's warp loading v with k (lanes 16-31) instead of after its norm: no
 *     change (2B 776-781 either way, 4B 421-427).  The barrier's counter reset by the last CTA out
 *     of each launch instead of a memset node before it (GPU tests 21/21): the kernel then starts
 *     0.1 us after the embedding gather instead of ~5 us, but the graph's first kernel started ~7
 *     us later after the step's upload, and the step (CUPTI trace, 2B batch 1) stayed 1,292 us
 *     (2B 780-786 against 775-780 tok/s, 4B 426-428 against 419-428): dropped.  Both rounds of
 *     the next layer's first item copied (cp.async, into A.kv1 and A.acc, 16 KB more of shared
 *     memory) at the end of this layer's attention, where the ring is full and the producers idle:
 *     issuing them (16 copies a thread) took ~1.7 us on the path (the attention 6.8 -> 8.5 us, the
 *     barrier before it 2.9 -> 2.2): 2B 763-765 against 782, 4B 417-423 against 424-428.  So the
 *     consumers cannot fetch the keys early for free.  The producers then copied both rounds (16
 *     cp.async a producer thread after the layer's q/k/v chunks, an mbarrier each way; correct,
 *     21/21): the keys were in shared memory ~10 us before the attention, and the attention took as
 *     long (7.1 us; 2B 775-782 against 782, 4B 415-419 against 426-427 with 16 bytes spilled).  So
 *     the walk is not waiting for its keys any more (this session's kept change took the last
 *     exposed load): Nsight Compute puts ~736 instructions a warp a layer in it, stalled on the
 *     dependent chains of the 16-lane shuffle sums (fixed-latency and short-scoreboard waits) and,
 *     29% of its samples, on the warps that finish early waiting at the barrier after it.  The next
 *     step for the attention is the walk's own arithmetic: keys a lane for q·k (no shuffle sums),
 *     dimensions a lane for p·v, the keys in shared memory.
 *   - 2026-11-26 (fifth session; H100, builds alternating in one run, 2-3 rounds, the decode tests
 *     passed for each, 21/21): the attention walk in FlashDecoding's layout, kept: 64 keys a round, 8
 *     a warp; for q·k a lane holds a key's quarter of the dimensions (registers) and multiplies it by
 *     every head of the group (two shuffles add the quarters, where each key and head took four
 *     dependent 16-lane shuffle sums), for p·v a lane holds 4 dimensions of every head and reads the
 *     warp's 8 value rows from shared memory (cp.async into its own 2 KB of A.acc); the first
 *     round's keys and values both requested before the barrier's wait.  Batch 1 even (2B 774-788
 *     against 777-784 tok/s, 4B 424-430 against 425-428), batch 2 +1.5-2.5% (2B 1,430-1,435 ->
 *     1,443-1,473, 4B 790-799 -> 808-814), batch 4 +5-6% (2B 2,342-2,401 -> 2,492-2,537, 4B
 *     1,348-1,359 -> 1,418-1,428).  The attention's path at batch 1 (trace) 6.99 -> 6.36-6.52 us
 *     (2B), 9.30 -> 8.94-9.09 (4B): at batch 1 the walk's arithmetic was not much of the path (its
 *     round trips are: the q/k/v read, the split count, the merge's two reads); with more rows a
 *     CTA walks more items and the arithmetic shows.  The values' copies issued after the wait
 *     instead (as the old second round's were): the same.  The phases' tile counts now come in
 *     ds_args (a.tiles): with the new walk ptxas had spilled one such product in the producers' 56
 *     registers (4 bytes, found with nvdisasm on the device).
 *     Then the last split's merge in one round trip, kept: each thread loads every split's
 *     values for two outputs (a head's two adjacent dimensions) while its warp's lanes load the
 *     head's splits' max and sum (a lane a split), and shuffles hand the weights round (before:
 *     the max and sum into shared memory, a sync, the weights, a sync, then the values: two round
 *     trips; the same numbers, summed in the same order).  The attention's path 6.4-6.5 -> 5.7 us
 *     (2B), 8.9-9.1 -> 7.1 (4B); 2B batch 1 781-786 -> 802-804 tok/s, batch 2 1,461-1,468 ->
 *     1,492-1,494, batch 4 2,512-2,529 -> 2,565-2,574; 4B 425-428 -> 434-439, 808-814 -> 823-832,
 *     1,422-1,424 -> 1,442-1,448.  One output a thread (4B's groups of 4 then take two rounds, the
 *     second output's loads after the first's: held at once they spilled 80 bytes): 2B the same,
 *     4B 429-433.  (Tried in the third session with every thread loading every split's max and
 *     sum itself: slower.)
 *     Dropped the same day: the partials as tagged 64-bit words (value and tag, in a zeroed region
 *     of their own, zeroed again by the merger as it reads them) and the split count a relaxed add,
 *     so that no split waits on a release fence for its partials' stores (correct, 21/21): 2B
 *     788-792 against 795-801 tok/s, 4B 423-427 against 432-439 (one output a thread: two outputs'
 *     64-bit words at once spilled); the attention's path 5.7 -> 5.9 us (2B).  The fence is not
 *     what the split waits for.
 *   - A step's time outside this kernel (CUPTI, 2B batch 1, 1,272 us traced against 1,247 untraced):
 *     the lm_head 199 us, top-k 11, the gather and norm ~5, and ~20 us of the GPU idle (untraced:
 *     the step's time less its kernels' and copies'; traced, the host's time between the top-k's
 *     download and the next upload alone is 30 us, inflated by the tracing).  The traced gap from
 *     the barrier's memset to this kernel (7.5-10.5 us) is not the kernel's 11 KB of parameters nor
 *     its shared memory:
 *     bench/param_probe.cu starts such a node 2.5 us after the kernel two nodes before it, with 8
 *     bytes or 11 KB of parameters, 1 KB or 200 KB of shared memory alike (H100).  At batch 64 the
 *     op-by-op attention (cuda_attn.cu, the same 16-lane walk) reads the cache at ~3.2 TB/s (87 us
 *     a layer for ~276 MB): memory-bound, nothing for this walk's layout to win there.
 *     Kept: no grid barrier between the q/k/v GEMV and the attention.  The GEMV writes its values
 *     as tagged 64-bit words (c->ds_part, zeroed at open) and each attention prologue loads its
 *     heads' words until every tag is there; after the barrier behind the attention the writers
 *     zero theirs.  Correct (21/21); 2B batch 1 803-806 -> 805-809 tok/s, batch 4 2,543-2,594 ->
 *     2,554-2,588; 4B 436-440 -> 442-444, 1,440-1,449 -> 1,457-1,458.  The trace: 2B's barrier
 *     and attention 3.2 + 5.7 -> 0 + 8.3 us (a layer 36.1 -> 35.2), 4B's 3.9 + 7.1 -> 0 + 10.6 (55.0
 *     -> 54.8): the attention now waits for the last q/k/v tile's stores itself, which were most
 *     of that barrier (the stream's traffic in the way of them, not the barrier's own hand-off).
 *   - 2026-11-26 (sixth session; H100, bench/ds_ceiling.sh, 2 rounds): the design's ceilings, builds
 *     with parts of the work left out (IRIS_DS_CEILING, wrong numbers), batch-1 tok/s 2B-FP8 /
 *     4B-FP8: the product 801-808 / 437-440; no grid barrier after o_proj, gate/up or down_proj (their
 *     data hand-offs stay: the next loads read what is there) 886-893 / 470-474; no products
 *     865-871 / 457-460; neither 981-983 / 495-502; no attention either 1,240-1,246 / 610-613 (no
 *     attention, products kept: 1,075-1,087 / 549).  The traces (2B, a layer): product 35.3 us; no
 *     barriers 31.2 (the hand-offs moved into the norms and the copy of g: 0.8 -> 2.1, 0.7 -> 1.5,
 *     0.5 -> 1.5 us); no products 32.1 (the GEMV phases 16.4 -> 6.4 us, the barriers after them
 *     5.6 and 4.2 us, the refills in flight); neither 27.1 (the attention 8.0 us, norm 1 4.6, the
 *     copy of g 3.3); nothing but the stream, norms and copies 20.1.  So no change to the
 *     barriers alone (the gate/up -> down_proj barrier folded into a K-split down_proj, say: at
 *     most 843-845 / 455-459 with that barrier simply gone, before the cost of the reduction that
 *     would replace it) and no change to the arithmetic alone reaches the batch-1 targets
 *     (1,000 / 500 tok/s); a design that meets them needs a layer's chain (the attention and
 *     the hand-offs, ~15 us of 2B's 35 with the barriers gone) and its weight stream to overlap,
 *     which the stream's traffic has so far prevented (every latency on the chain doubles under it).
 * What is left (2B on an H100, ~36 us a layer against ~16.5 of weight bytes; 4B ~55 against ~33): the GEMV phases
 * (~16.8 us) run at the consumers' pace, ~700 cycles a chunk with its slot full, the same with 8 or
 * 12 consumer warps, with cheaper or paired dequantizations (what binds the SM there is open); but
 * with no products at all a layer still takes 35.6 us (above): the barriers and the attention are
 * the latencies of a memory the stream keeps busy, and a quieter stream only moves the time.
 * bench/sync_probe.cu puts numbers on it (H100, the memory streaming at 3.1 TB/s): a grid barrier
 * 0.96 -> 1.99 us, a release/acquire hand-off one way through L2 0.54 -> 0.87 us, through a cluster
 * peer's shared memory 0.47 -> 0.73 us; so moving hand-offs into clusters buys little, and the way
 * on is fewer dependent steps a layer (four grid barriers and the attention's own round trips). */
#include <stdio.h>

#include "cuda_internal.cuh"

#define DS_WARPS 8                       /* consumer warps */
#define DS_PRODUCERS 4                   /* producer warps: chunk n is producer n % DS_PRODUCERS's */
#define DS_THREADS ((DS_WARPS + DS_PRODUCERS) * 32)
#define DS_MAX_LAYERS 64
#define DS_MAX_ROWS 4
#define DS_HD 128
#define DS_GMAX 4
#define DS_PAD 64                        /* bytes after each weight row of a slot: rows g and g + 1 of a
                                            lane group land in different banks */
#define DS_MAX_RING 32
#define DS_MIN_RING 4
#define DS_MAX_SPLITS 64
/* A measuring aid, never defined in a product build: IRIS_DS_CEILING leaves work out of the kernel so
 * that what is left shows what bounds it (wrong numbers, timing only; bench/ds_ceiling.sh builds and
 * runs such binaries; the host warns at the first launch).  Bits: 1 the products (a
 * consumer folds one word of its slot into one sum), 2 the attention, 4 / 8 / 16 the grid barrier
 * after o_proj / gate-up / down_proj (the data hand-offs stay: the next phase's loads read what is
 * there). */
#ifndef IRIS_DS_CEILING
#define IRIS_DS_CEILING 0
#endif
/* arch- or family-specific targets (sm_90a, sm_120a, sm_120f, ...): the registers moved from the
 * producers to the consumers (k_decode_stack; plain sm_90 / sm_120 have no setmaxnreg) */
#if defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 900
#define DS_SETMAXNREG 1
#else
#define DS_SETMAXNREG 0
#endif
#define DS_EVENTS 13                     /* trace stamps a layer (k_decode_stack) */
#define DS_BT 64                         /* block-table entries of the CTA's attention item kept in shared memory */
#define DS_GP (2 * 16 * DS_MAX_ROWS)     /* a stream-K piece's partial sums: [row of x][16 rows][gate, up] */
#define DS_MAX_GRID 256                  /* CTAs (SMs) whose pieces' sums c->ds_part holds */
#define DS_SK_OP 0xa                     /* o_proj + down_proj: the stream-K mask of the default, with a kernel
                                            instance of its own */
static_assert((size_t)DS_MAX_GRID * DS_GP * 8 <= DS_SKPART_BYTES, "c->ds_part holds every CTA's piece sums");

enum { W_Q, W_K, W_V, W_O, W_G, W_U, W_D, W_N };

struct ds_layer {
    const uint8_t *w[W_N];
    const float *s[W_N];
    const void *ln1, *ln2, *qn, *kn;
    bf16 *kc, *vc;
};

struct ds_args {
    ds_layer L[DS_MAX_LAYERS];
    int n_layers, R, H, FF, nq, nkv, g, cw, ring, splits, max_blocks, pos_stride, xld;
    int ln_dt, qk_dt;
    int run[4];    /* GEMV phase ph stream-K in runs of run[ph] chunks (0: whole tiles; ds_pieces) */
    int tiles[4];  /* GEMV phase ph's 16-row tiles (ds_tiles), read as they are: no arithmetic to hold */
    unsigned long long *gpart; /* stream-K pieces' tagged partial sums: [grid][DS_GP], zero between launches */
    unsigned long long *qkvt;  /* the q/k/v GEMV's outputs as tagged words (qkv_at), zero between layers */
    unsigned x_off, ring_off, slot_bytes;
    float eps, scale;
    bf16 *h, *o, *gb;
    float *part;
    int *count;
    unsigned *bar;
    unsigned long long *trace; /* IRIS_CUDA_DS_TRACE: [grid][n_layers][DS_EVENTS] globaltimer stamps, or NULL */
    const int32_t *row_seq, *row_ctx, *block_tables, *slot, *pos;
    int64_t n_slots;
    float inv_freq[DS_HD / 2];
    int dim_of[DS_HD / 2];
};

/* Attention's shared memory (phase 2); the GEMV epilogue's sums (phases 1, 3-5) share it. */
struct ds_attn_smem {
    __align__(16) float q[DS_GMAX][4][36]; /* the group's query heads, normalized, rotated, scaled: quarters
                                            of 32 padded to 36 (the walk's 4 quarters in different banks) */
    float x[DS_WARPS][DS_HD];            /* qk_head's scratch, a warp each */
    bf16 in[DS_WARPS][DS_HD];            /* a head's values as loaded */
    __align__(16) bf16 k[DS_HD];         /* the newest key and value (the owning split) */
    __align__(16) bf16 v[DS_HD];
    float m[DS_WARPS][DS_GMAX], l[DS_WARPS][DS_GMAX];
    __align__(16) float acc[DS_WARPS][DS_GMAX][DS_HD]; /* also the walk's value rows, a warp's 2 KB */
    int last;
};
struct ds_head {
    uint64_t full[DS_MAX_RING], empty[DS_MAX_RING];
    float inv[DS_HD / 2];
    int dim[DS_HD / 2];
    /* the step's metadata, read once (not in every layer's attention chain): the rows' context,
     * sequence, cache slot and rotary angles; the block-table entries of this CTA's attention item
     * (item blockIdx.x: keys from bt0·16, nbt entries; nbt 0: read them from global memory) */
    int ctx[DS_MAX_ROWS], seq[DS_MAX_ROWS], slot[DS_MAX_ROWS];
    float sn[DS_MAX_ROWS][DS_HD / 2], cs[DS_MAX_ROWS][DS_HD / 2];
    int bt[DS_BT], bt0, nbt;
    float ss[DS_WARPS][DS_MAX_ROWS];
    union {
        ds_attn_smem at;
        float red[DS_WARPS][2][16][8];   /* [warp][gate, up][row][token] */
    } u;
};

/* Phase ph's (0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) 16-row tiles and input width, for the
 * kernel's walk and the host's stream-K rule alike. */
static __host__ __device__ __forceinline__ int ds_tiles(int ph, int H, int FF, int nq, int nkv) {
    return ph == 0 ? (nq + 2 * nkv) * DS_HD / 16 : ph == 2 ? FF / 16 : H / 16;
}
static __host__ __device__ __forceinline__ int ds_k(int ph, int H, int FF, int nq) {
    return ph == 1 ? nq * DS_HD : ph == 3 ? FF : H;
}

/* The device code is sm_90's (bulk copies, mbarrier waits): older targets compile the kernel empty
 * (never launched there: the host declines before sm_90). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define DS_DEVICE 1

/* ---- mbarriers, bulk copies, barriers ---- */

static __device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    asm volatile("{\n .reg .pred p;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W_%=;\n}\n" ::"r"(
                     smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
static __device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(b)) : "memory");
}
static __device__ __forceinline__ void mbar_arrive_tx(uint64_t *b, unsigned tx) {
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_u32(b)),
                 "r"(tx)
                 : "memory");
}
/* bytes (a multiple of 16, both ends 16-byte aligned) global → shared, completing on bar; pol: an L2
 * cache policy (the weight stream's: evict first, producer) */
static __device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *bar, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
                 : "memory");
#endif
}
/* 4 bytes global → shared, arriving on bar once there (an arrival bar's count includes) */
static __device__ __forceinline__ void cp4_arrive(void *dst, const void *src, uint64_t *bar) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%2];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(smem_u32(bar))
                 : "memory");
}
/* A stream-K partial sum as one 64-bit word, the value's bits and a tag: a reader on another SM
 * sees both or neither (ds_pieces). */
#define DS_TAG 0xa5a5a5a500000000ull
static __device__ __forceinline__ void st_tagged(unsigned long long *p, float v) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(DS_TAG | __float_as_uint(v)) : "memory");
}
static __device__ __forceinline__ void st_tagged_clear(unsigned long long *p) {
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(0ull) : "memory");
}
static __device__ __forceinline__ unsigned long long ld_tagged(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
/* the consumer warps only (the producer runs on its own) */
static __device__ __forceinline__ void cons_sync() { asm volatile("bar.sync 1, %0;" ::"n"(DS_WARPS * 32) : "memory"); }

/* Every CTA's consumers reach the barrier; what each wrote before is visible to all after it. */
static __device__ __forceinline__ void grid_sync(unsigned *bar, unsigned &target) {
    cons_sync();
    target += gridDim.x;
    if (threadIdx.x == 0) { /* release: the CTA's writes (ordered before by the bar.sync) go first */
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        unsigned v;
        do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
        while (v < target);
    }
    cons_sync();
}

/* ---- the weight tiles: the same order for the producer and the consumers ---- */

static __device__ __forceinline__ int ph_tiles(const ds_args &a, int ph) { return a.tiles[ph]; }
static __device__ __forceinline__ int ph_k(const ds_args &a, int ph) { return ds_k(ph, a.H, a.FF, a.nq); }
/* The tagged word of row r of [q; k; v] for the step's row tok. */
static __device__ __forceinline__ unsigned long long *qkv_at(const ds_args &a, int tok, int r) {
    return a.qkvt + ((int64_t)tok * ph_tiles(a, 0) * 16 + r);
}
/* Matrix m (0, or 1 = up in phase 2) of tile `tile` of phase ph: its weight, scales, first row. */
static __device__ __forceinline__ int ph_mat(const ds_args &a, int ph, int tile, int m, int *r0) {
    int r = tile * 16;
    *r0 = r;
    if (ph == 0) {
        int nq = a.nq * DS_HD, nk = a.nkv * DS_HD;
        if (r < nq) return W_Q;
        *r0 = r - nq >= nk ? r - nq - nk : r - nq;
        return r - nq >= nk ? W_V : W_K;
    }
    return ph == 1 ? W_O : ph == 3 ? W_D : m ? W_U : W_G;
}

/* Which chunks of phase ph's tiles this CTA takes.  By default whole tiles, b, b + grid, ...; where
 * that shares out unevenly (4B's o_proj and down_proj: 160 tiles of 8 and 19 chunks over 132 CTAs,
 * so some CTAs take two tiles and the phase waits for them), stream-K: the phase's chunks in
 * tile-major order are cut into runs of a.run[ph] (the even share, rounded up), CTA b's from
 * b · run.  A tile cut between runs is finished by the CTA of its first piece, at the end of that
 * CTA's run: the later pieces, each at the start of its CTA's run, are done by then and left their
 * sums in a.gpart, each value in one 64-bit word with a tag (no fence, no counter: the finisher's
 * load sees both or neither); the finisher adds them in piece order and clears the tags
 * (gemv_phase).  The producer and the consumers walk the same pieces. */
/* phase ph's run (0: whole tiles) in the kernel for stream-K mask SKM (-1: any, from a.run) */
template <int SKM>
static __device__ __forceinline__ int ph_run(const ds_args &a, int ph) {
    return SKM < 0 || ((SKM >> ph) & 1) ? a.run[ph] : 0;
}
struct ds_pieces {
    int run, nch, tiles, lo, hi, tile;
    __device__ ds_pieces(const ds_args &a, int ph, int run_) {
        run = run_, nch = ph_k(a, ph) / a.cw, tiles = ph_tiles(a, ph);
        lo = blockIdx.x * run, hi = min(lo + run, tiles * nch);
        tile = run ? lo / nch : blockIdx.x;
    }
    __device__ bool more() const { return run ? tile * nch < hi : tile < tiles; }
    __device__ int c0() const { return run ? max(lo - tile * nch, 0) : 0; }
    __device__ int c1() const { return run ? min(hi - tile * nch, nch) : nch; }
    __device__ void next() { tile += run ? 1 : gridDim.x; }
};

template <int SKM>
static __device__ void producer(const ds_args &a, ds_head &S, uint8_t *ring, int lane, int p) {
    const int cw = a.cw, nsc = cw / 128;
    unsigned n = 0;
    /* the stream's lines leave L2 first: each is read once, and what the latency chain passes
     * between CTAs (h, the attention's partials, the barrier) stays */
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    for (int il = 0; il < a.n_layers; il++)
        for (int ph = 0; ph < 4; ph++) {
            const int K = ph_k(a, ph), mats = ph == 2 ? 2 : 1, scols = (K + 127) / 128;
            for (ds_pieces pc(a, ph, ph_run<SKM>(a, ph)); pc.more(); pc.next())
                for (int c = pc.c0(), tile = pc.tile; c < pc.c1(); c++)
                    for (int m = 0; m < mats; m++, n++) {
                        if (n % DS_PRODUCERS != (unsigned)p) continue;
                        int slot = n % a.ring, r0;
                        if (n >= (unsigned)a.ring) mbar_wait(&S.empty[slot], ((n / a.ring) - 1) & 1);
                        int wi = ph_mat(a, ph, tile, m, &r0);
                        const uint8_t *W = a.L[il].w[wi] + (int64_t)r0 * K + (int64_t)c * cw;
                        const float *sc = a.L[il].s[wi] + (int64_t)(r0 / 128) * scols + c * nsc;
                        uint8_t *dst = ring + (size_t)slot * a.slot_bytes;
                        if (lane == 0) mbar_arrive_tx(&S.full[slot], 16u * cw);
                        __syncwarp();
                        if (lane < 16)
                            bulk_g2s(dst + lane * (cw + DS_PAD), W + (int64_t)lane * K, (unsigned)cw, &S.full[slot], pol);
                        else if (lane < 16 + nsc)
                            cp4_arrive(dst + 16 * (cw + DS_PAD) + (lane - 16) * 4, sc + (lane - 16), &S.full[slot]);
                    }
        }
}

/* ---- the consumers' phases ---- */

/* The norm weight's 8-value pieces a consumer thread normalizes (i = 8·tid + 2048·k, H <= 4096),
 * fetched before the barrier that precedes the norm (they depend on nothing). */
struct ds_normw {
    uint4 w[2];
};
static __device__ __forceinline__ ds_normw norm_weights(const ds_args &a, const void *w) {
    ds_normw r;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        int i = threadIdx.x * 8 + k * DS_WARPS * 256;
        if (i < a.H) r.w[k] = __ldg((const uint4 *)((const bf16 *)w + i));
    }
    return r;
}

/* x_s[t] = rms_norm(h[t]) · w for the step's rows (rms_norm's roundings), h read once. */
static __device__ void prep_norm(const ds_args &a, const ds_normw &w, bf16 *x_s, ds_head &S) {
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31;
    uint4 hv[DS_MAX_ROWS][2];
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++)
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            if (t < a.R && i < a.H) hv[t][k] = __ldcg((const uint4 *)(a.h + (int64_t)t * a.H + i));
        }
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++) {
        if (t >= a.R) break;
        float ss = 0;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            const bf16 *e = (const bf16 *)&hv[t][k];
            if (i < a.H)
#pragma unroll
                for (int j = 0; j < 8; j++) ss += bf2f(e[j]) * bf2f(e[j]);
        }
        ss = warp_sum(ss);
        if (lane == 0) S.ss[warp][t] = ss;
    }
    cons_sync();
#pragma unroll
    for (int t = 0; t < DS_MAX_ROWS; t++) {
        if (t >= a.R) break;
        float tot = 0;
        for (int i = 0; i < DS_WARPS; i++) tot += S.ss[i][t];
        float inv = rsqrtf(tot / (float)a.H + a.eps);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int i = tid * 8 + k * DS_WARPS * 256;
            if (i >= a.H) continue;
            const bf16 *e = (const bf16 *)&hv[t][k], *we = (const bf16 *)&w.w[k];
            uint4 o;
            bf16 *oe = (bf16 *)&o;
#pragma unroll
            for (int j = 0; j < 8; j++) oe[j] = f2bf(bf2f(we[j]) * round_bf16(bf2f(e[j]) * inv));
            *(uint4 *)(x_s + t * a.xld + i) = o;
        }
    }
    cons_sync();
}

/* x_s[t] = src[t] (K values a row, written by other CTAs in this kernel). */
static __device__ void prep_copy(const ds_args &a, const bf16 *src, int K, bf16 *x_s) {
    for (int t = 0; t < a.R; t++)
        for (int i = threadIdx.x * 8; i < K; i += DS_WARPS * 256)
            *(uint4 *)(x_s + t * a.xld + i) = __ldcg((const uint4 *)(src + (int64_t)t * K + i));
    cons_sync();
}

/* Where the consumers are in the ring: the next chunk's slot and the parity of its fill. */
struct ds_cursor {
    int slot;
    unsigned parity;
};

/* The tiles of phase PH (0 q/k/v, 1 o_proj, 2 gate/up, 3 down_proj) this CTA owns.  A chunk holds
 * ss = cw / 64 super-steps of its tile; of chunk ch, warp w takes super-step w % ss when ch ≡ w / ss
 * (mod DS_WARPS / ss), so each super-step of the tile is one warp's.  Chunk q of a tile belongs to
 * matrix q % mats (gate, up alternate).  The loop keeps its indices by increments: at decode sizes a
 * division per chunk was as much work as the products (Nsight Compute: 241 instructions a
 * super-step, 96 of them the dequantization). */
template <int PH, int SKM>
static __device__ void gemv_phase(const ds_args &a, ds_head &S, const uint8_t *ring, const bf16 *x_s, ds_cursor &cur) {
    constexpr int mats = PH == 2 ? 2 : 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int cw = a.cw, ss = cw / 64, per = DS_WARPS / ss;
    const int my_j = warp % ss, my_grp = warp / ss, rs = cw + DS_PAD;
    const int wcol = my_j * 64 + t * 16, sc_i = my_j / 2;
    const uint8_t *w_off = ring + g * rs + wcol;                       /* + the slot's offset */
    const bf16 *xb = x_s + min(g, a.R - 1) * a.xld + wcol;             /* + the chunk's columns */
    const unsigned slot_bytes = a.slot_bytes;
    for (ds_pieces pc(a, PH, ph_run<SKM>(a, PH)); pc.more(); pc.next()) {
        const int tile = pc.tile, c0 = pc.c0(), c1 = pc.c1();
        float c[2][1][4] = {};
        int chm = 0;
        /* o_proj, down_proj: the residual values the epilogue adds to, loaded now, not after the
         * products (what wrote them last, a phase or more ago, is behind a grid barrier) */
        bf16 h_old = f2bf(0.0f);
        if ((PH == 1 || PH == 3) && (int)(threadIdx.x >> 4) < a.R)
            h_old = __ldcg(a.h + (int64_t)(threadIdx.x >> 4) * a.H + tile * 16 + (threadIdx.x & 15));
        for (int ch = c0; ch < c1; ch++) {
            const bf16 *xp = xb + ch * cw;
#pragma unroll
            for (int m = 0; m < mats; m++) {
                /* the super-step's values into registers (every warp loads, only the owner multiplies:
                 * the loads stay unconditional, a conditional set spilled), then the slot is free
                 * for the producers before the products */
                mbar_wait(&S.full[cur.slot], cur.parity);
                const unsigned so = (unsigned)cur.slot * slot_bytes;
                const float sc = ((const float *)(ring + so + 16 * rs))[sc_i];
                const uint4 wa = *(const uint4 *)(w_off + so), wb = *(const uint4 *)(w_off + so + 8 * rs);
                const uint4 x0 = *(const uint4 *)xp, x1 = *(const uint4 *)(xp + 8);
                __syncwarp();
                if (lane == 0) mbar_arrive(&S.empty[cur.slot]);
                if (++cur.slot == a.ring) cur.slot = 0, cur.parity ^= 1;
                if (chm == my_grp) {
                    const uint32_t X[1][8] = {{x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w}};
#if IRIS_DS_CEILING & 1
                    c[m][0][0] += __uint_as_float((wa.x ^ wb.y) & 0x3fffffffu) * sc + __uint_as_float(X[0][0] & 0x3fffffffu);
#else
                    step_mma<1>(c[m], wa, wb, sc, X);
#endif
                }
            }
            if (++chm == per) chm = 0;
        }
        /* c[m][0][0], [1]: row g, tokens 2t, 2t + 1; [2], [3]: row g + 8 */
#pragma unroll
        for (int m = 0; m < 2; m++) {
            if (m >= mats) break;
            float *rw = &S.u.red[warp][m][0][0];
            rw[g * 8 + 2 * t] = c[m][0][0];
            rw[g * 8 + 2 * t + 1] = c[m][0][1];
            rw[(g + 8) * 8 + 2 * t] = c[m][0][2];
            rw[(g + 8) * 8 + 2 * t + 1] = c[m][0][3];
        }
        cons_sync();
        int e = threadIdx.x, row = e & 15, tok = e >> 4;
        if (tok < a.R) {
            float s0 = 0, s1 = 0;
            for (int w = 0; w < DS_WARPS; w++) {
                s0 += S.u.red[w][0][row][tok];
                if (mats == 2) s1 += S.u.red[w][1][row][tok];
            }
            unsigned long long *gp = a.gpart + (tok * 16 + row) * mats;
            if (c0 > 0) { /* a stream-K piece that starts inside the tile: its sums for the tile's finisher */
                gp += (int64_t)blockIdx.x * DS_GP;
                st_tagged(gp, s0);
                if (mats == 2) st_tagged(gp + 1, s1);
            } else {
                if (c1 < pc.nch) /* the tile's first piece (the end of this CTA's run) finishes it */
                    for (int o = blockIdx.x + 1; o * pc.run < (tile + 1) * pc.nch; o++) { /* in piece order */
                        unsigned long long *w = gp + (int64_t)o * DS_GP, v0, v1 = DS_TAG;
                        do {
                            v0 = ld_tagged(w);
                            if (mats == 2) v1 = ld_tagged(w + 1);
                        } while ((v0 & DS_TAG) != DS_TAG || (v1 & DS_TAG) != DS_TAG);
                        st_tagged_clear(w);
                        if (mats == 2) st_tagged_clear(w + 1);
                        s0 += __uint_as_float((unsigned)v0);
                        if (mats == 2) s1 += __uint_as_float((unsigned)v1);
                    }
                const int r = tile * 16 + row; /* (q/k/v: the row of [q; k; v]) */
                if (PH == 0) { /* tagged, for the attention to take each value when its word has come */
                    st_tagged(qkv_at(a, tok, r), round_bf16(s0));
                } else if (PH == 2) { /* linear, linear, silu_mul */
                    float gg = round_bf16(s0), uu = round_bf16(s1);
                    a.gb[(int64_t)tok * a.FF + r] = f2bf(round_bf16(gg / (1.0f + expf(-gg))) * uu);
                } else { /* the linear's bf16 output added into the residual stream */
                    a.h[(int64_t)tok * a.H + r] = f2bf(bf2f(h_old) + round_bf16(s0));
                }
            }
        }
        cons_sync();
    }
}

/* The keys [*jb, *je) of context split `split` of a row of ctx keys (a.splits even pieces of at
 * least 16 keys); returns how many splits hold keys (the last holds the newest key).  The attention
 * and the block-table copy at the kernel's start both place their items by it. */
static __device__ __forceinline__ int ds_split_keys(const ds_args &a, int ctx, int split, int *jb, int *je) {
    const int chunk = max(16, (ctx + a.splits - 1) / a.splits);
    *jb = split * chunk, *je = min(ctx, *jb + chunk);
    return (ctx + chunk - 1) / chunk;
}

/* A head's 128 values from the q/k/v GEMV's tagged words (lane: 4 of them) into dst as bf16, each
 * word loaded again until its tag is there. */
static __device__ __forceinline__ void qkv_take(const unsigned long long *src, bf16 *dst, int lane) {
    unsigned long long w[4];
    bool miss;
    do {
#pragma unroll
        for (int j = 0; j < 4; j += 2)
            asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(w[j]), "=l"(w[j + 1]) : "l"(src + lane * 4 + j) : "memory");
        miss = false;
#pragma unroll
        for (int j = 0; j < 4; j++) miss |= (w[j] & DS_TAG) != DS_TAG;
    } while (__any_sync(0xffffffffu, miss));
#pragma unroll
    for (int j = 0; j < 4; j++) dst[lane * 4 + j] = __float2bfloat16_rn(__uint_as_float((unsigned)w[j]));
}

/* After the grid barrier behind the attention: the CTA zeroes the tagged q/k/v words its tiles
 * wrote (the same threads write them in the next layer, after more barriers). */
template <int SKM>
static __device__ void qkv_clear(const ds_args &a) {
    for (ds_pieces pc(a, 0, ph_run<SKM>(a, 0)); pc.more(); pc.next()) {
        if (pc.c0() > 0) continue; /* a piece whose tile another CTA finished */
        const int e = threadIdx.x, row = e & 15, tok = e >> 4;
        if (tok < a.R) st_tagged_clear(qkv_at(a, tok, pc.tile * 16 + row));
    }
}

/* Phase 2: the attention items this CTA owns (the numbers of cuda_attn.cu's k_attn_decode, 64 keys
 * a round over 8 warps).  Entered straight from the q/k/v GEMV: each item's prologue takes its
 * heads' q/k/v as their tagged words come (qkv_take); its first keys and values are requested
 * before that. */
static __device__ void attn_phase(const ds_args &a, const ds_layer &L, ds_head &S) {
    ds_attn_smem &A = S.u.at;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int kvw = a.nkv * DS_HD, G = a.g, items = a.R * a.nkv * a.splits;
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const int row = item / (a.nkv * a.splits), kvh = item / a.splits % a.nkv, split = item % a.splits;
        const int ctx = S.ctx[row];
        int jb, je;
        const int active = ds_split_keys(a, ctx, split, &jb, &je);
        if (split >= active) continue;
        const bool own = split == active - 1; /* holds the newest key, ctx - 1 */
        /* its block-table entries: S.bt's copy (from entry S.bt0) for the CTA's first item */
        const bool cached = item == (int)blockIdx.x && S.nbt > 0;
        const int32_t *bt = cached ? S.bt : a.block_tables + (int64_t)S.seq[row] * a.max_blocks;
        const int bt0 = cached ? S.bt0 : 0;
        const int64_t col = (int64_t)kvh * DS_HD;
        /* The walk, in rounds of 64 keys a CTA: warp w takes keys base + 8w .. 8w + 7.  For q·k a lane
         * holds one key's quarter of the dimensions (key kk = lane / 4, dimensions 32·pt ..), loaded into
         * registers, and multiplies it by every query head's quarter (2 shuffles add the quarters: no
         * 16-lane sums); for p·v a lane holds 4 dimensions of every query head (lane·4 ..) and takes the
         * warp's 8 value rows from its own 2 KB of A.acc (cp.async; the walk leaves A.acc untouched until
         * its end).  The first round's keys and values are requested before the prologue, which
         * waits for the q/k/v GEMV's words. */
        const int kk = lane >> 2, pt = lane & 3;
        const int nr = (je - jb + 63) / 64;
        bf16 *const vs = (bf16 *)&A.acc[warp][0][0];
        auto slot_of = [&](int j) { return (int64_t)bt[j / IRIS_KV_BLOCK - bt0] * IRIS_KV_BLOCK + j % IRIS_KV_BLOCK; };
        auto newest = [&](int j) { return own && j == ctx - 1; }; /* this step's key: A.k / A.v after the prologue */
        uint4 kr[4];
        auto k_load = [&](int r) {
            const int j = min(jb + r * 64 + warp * 8 + kk, je - 1);
            if (newest(j)) return;
            const bf16 *src = L.kc + slot_of(j) * kvw + col + pt * 32;
#pragma unroll
            for (int c = 0; c < 4; c++) kr[c] = *(const uint4 *)(src + c * 8);
        };
        auto v_issue = [&](int r) { /* the warp's 8 value rows, 16 bytes a copy, 4 copies a lane */
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const int k = lane / 16 + 2 * t, j = jb + r * 64 + warp * 8 + k;
                if (j >= je || newest(j)) continue;
                cp_async16(vs + k * DS_HD + (lane % 16) * 8, L.vc + slot_of(j) * kvw + col + (lane % 16) * 8);
            }
        };
        const bool walks = jb + warp * 8 < je; /* the warp has keys in the first round (and so in none later if not) */
        if (walks) k_load(0), v_issue(0);
        const bool isk = warp == G;
        float wv[4];
        if (warp < G + own) qk_weights<64>(wv, isk ? L.kn : L.qn, a.qk_dt, DS_HD, lane);
        /* prologue: warp i < G the query head kvh·G + i (times the softmax scale, into A.q's quarters);
         * warp G (own split) the k head and v */
        if (warp < G + own) {
            const float sn[2] = {S.sn[row][lane], S.sn[row][lane + 32]}, cs[2] = {S.cs[row][lane], S.cs[row][lane + 32]};
            /* the head's values from the q/k/v GEMV's tagged words (no grid barrier before the
             * attention: a word not yet come is loaded again), as bf16 into A.in (and v into A.v) */
            const unsigned long long *src = qkv_at(a, row, isk ? (a.nq + kvh) * DS_HD : (kvh * G + warp) * DS_HD);
            qkv_take(src, A.in[warp], lane);
            if (isk) qkv_take(src + a.nkv * DS_HD, A.v, lane);
            __syncwarp();
            if (!isk) {
                qk_head<64>(A.in[warp], wv, sn, cs, A.x[warp], a.eps, DS_HD, lane, [&](int j, bf16 o0, bf16 o1) {
                    const int j1 = j + DS_HD / 2;
                    A.q[warp][j / 32][j % 32] = bf2f(o0) * a.scale;
                    A.q[warp][j1 / 32][j1 % 32] = bf2f(o1) * a.scale;
                });
            } else {
                qk_head<64>(A.in[warp], wv, sn, cs, A.x[warp], a.eps, DS_HD, lane, [&](int j, bf16 o0, bf16 o1) {
                    A.k[j] = o0;
                    A.k[j + DS_HD / 2] = o1;
                });
                int64_t sl = S.slot[row];
                if (sl >= 0 && sl < a.n_slots && lane < 16) {
                    *(uint4 *)(L.kc + sl * kvw + kvh * DS_HD + lane * 8) = *(const uint4 *)&A.k[lane * 8];
                    *(uint4 *)(L.vc + sl * kvw + kvh * DS_HD + lane * 8) = *(const uint4 *)&A.v[lane * 8];
                }
            }
        }
        cons_sync();
        float acc[DS_GMAX][4], m[DS_GMAX], l[DS_GMAX];
#pragma unroll
        for (int i = 0; i < DS_GMAX; i++) {
            m[i] = -INFINITY, l[i] = 0;
#pragma unroll
            for (int d = 0; d < 4; d++) acc[i][d] = 0;
        }
        for (int r = 0; r < nr && walks; r++) {
            const int kb = jb + r * 64 + warp * 8; /* the warp's first key this round */
            if (kb >= je) break;
            const int j = kb + kk;
            const bool valid = j < je;
            if (newest(j))
#pragma unroll
                for (int c = 0; c < 4; c++) kr[c] = *(const uint4 *)(A.k + pt * 32 + c * 8);
            /* q·k: each 8 dimensions of the lane's quarter converted once, then every head's products
             * (two sums a head, for shorter chains) */
            float s0[DS_GMAX] = {0, 0, 0, 0}, s1[DS_GMAX] = {0, 0, 0, 0};
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const unsigned w[4] = {kr[c].x, kr[c].y, kr[c].z, kr[c].w};
                float kf[8];
#pragma unroll
                for (int e = 0; e < 4; e++) kf[e * 2] = __uint_as_float(w[e] << 16), kf[e * 2 + 1] = __uint_as_float(w[e] & 0xffff0000u);
#pragma unroll
                for (int i = 0; i < DS_GMAX; i++) {
                    if (i >= G) break;
                    const float4 qa = *(const float4 *)&A.q[i][pt][c * 8], qb = *(const float4 *)&A.q[i][pt][c * 8 + 4];
                    s0[i] = fmaf(qa.x, kf[0], s0[i]), s0[i] = fmaf(qa.y, kf[1], s0[i]);
                    s0[i] = fmaf(qa.z, kf[2], s0[i]), s0[i] = fmaf(qa.w, kf[3], s0[i]);
                    s1[i] = fmaf(qb.x, kf[4], s1[i]), s1[i] = fmaf(qb.y, kf[5], s1[i]);
                    s1[i] = fmaf(qb.z, kf[6], s1[i]), s1[i] = fmaf(qb.w, kf[7], s1[i]);
                }
            }
            float p[DS_GMAX] = {0, 0, 0, 0};
#pragma unroll
            for (int i = 0; i < DS_GMAX; i++) {
                if (i >= G) break;
                float s = s0[i] + s1[i];
                s += __shfl_xor_sync(0xffffffffu, s, 1);
                s += __shfl_xor_sync(0xffffffffu, s, 2);
                s = valid ? s : -INFINITY;
                float mr = s;
#pragma unroll
                for (int off = 4; off < 32; off <<= 1) mr = fmaxf(mr, __shfl_xor_sync(0xffffffffu, mr, off));
                const float mn = fmaxf(m[i], mr), corr = __expf(m[i] - mn); /* mr finite: key kb is valid */
                p[i] = __expf(s - mn);
                l[i] = l[i] * corr + p[i]; /* this lane's keys' share; the lanes' added at the end */
#pragma unroll
                for (int d = 0; d < 4; d++) acc[i][d] *= corr;
                m[i] = mn;
            }
            if (r + 1 < nr && kb + 64 < je) k_load(r + 1); /* the next round's keys while this one's run */
            cp_async_wait_all();
            __syncwarp(); /* every lane's value copies landed */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (kb + k >= je) break;
                const bf16 *vrow = newest(kb + k) ? A.v : vs + k * DS_HD;
                const uint2 vw = *(const uint2 *)(vrow + lane * 4);
                const float vf[4] = {__uint_as_float(vw.x << 16), __uint_as_float(vw.x & 0xffff0000u), __uint_as_float(vw.y << 16),
                                     __uint_as_float(vw.y & 0xffff0000u)};
#pragma unroll
                for (int i = 0; i < DS_GMAX; i++) {
                    if (i >= G) break;
                    const float pk = __shfl_sync(0xffffffffu, p[i], k * 4);
#pragma unroll
                    for (int d = 0; d < 4; d++) acc[i][d] = fmaf(pk, vf[d], acc[i][d]);
                }
            }
            __syncwarp(); /* the value rows read before the next round's copies */
            if (r + 1 < nr && kb + 64 < je) v_issue(r + 1);
        }
        /* the warp's state into shared memory (its values' 2 KB of A.acc, read by now) */
#pragma unroll
        for (int i = 0; i < DS_GMAX; i++) {
#pragma unroll
            for (int off = 4; off < 32; off <<= 1) l[i] += __shfl_xor_sync(0xffffffffu, l[i], off);
            if (i < G) {
                if (lane == 0) A.m[warp][i] = m[i], A.l[warp][i] = l[i];
                *(float4 *)&A.acc[warp][i][lane * 4] = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            }
        }
        cons_sync();
        const float *ph = a.part + ((int64_t)row * a.nq + kvh * G) * a.splits * (DS_HD + 2); /* head i, split s */
        for (int e = threadIdx.x; e < G * DS_HD; e += DS_WARPS * 32) {
            int i = e / DS_HD, d = e % DS_HD;
            float M = -INFINITY;
            for (int w = 0; w < DS_WARPS; w++) M = fmaxf(M, A.m[w][i]);
            float Ls = 0, As = 0;
            if (M != -INFINITY)
                for (int w = 0; w < DS_WARPS; w++) {
                    float wt = __expf(A.m[w][i] - M);
                    Ls += A.l[w][i] * wt;
                    As += A.acc[w][i][d] * wt;
                }
            if (active > 1) {
                float *p = (float *)ph + ((int64_t)i * a.splits + split) * (DS_HD + 2);
                p[2 + d] = As;
                if (d == 0) p[0] = M, p[1] = Ls;
            } else {
                a.o[(int64_t)row * a.nq * DS_HD + (int64_t)(kvh * G + i) * DS_HD + d] = f2bf(Ls > 0 ? As / Ls : 0.0f);
            }
        }
        if (active > 1) { /* the last split of (row, kv head) to finish merges, in split order */
            cons_sync();
            if (threadIdx.x == 0) A.last = split_count_last(a.count + (int64_t)row * a.nkv + kvh, active);
            cons_sync();
            if (A.last) {
                /* in one round trip: a thread's two outputs (head i, dimensions d and d + 1: the group's
                 * heads over 64 threads each, a warp's of one head) load every split's values while
                 * the warp's lanes load the head's splits' max and sum (lane s split s, and s + 32),
                 * which shuffles then hand round */
                constexpr int NS = DS_MAX_SPLITS / 4;
                const int i = threadIdx.x / (DS_HD / 2), d = threadIdx.x % (DS_HD / 2) * 2;
                if (i < G) {
                    const float *p = ph + (int64_t)i * a.splits * (DS_HD + 2);
                    float2 v[NS];
                    float mx[2], sm[2];
#pragma unroll
                    for (int s = 0; s < NS; s++)
                        v[s] = s < active ? __ldcg((const float2 *)(p + (int64_t)s * (DS_HD + 2) + 2 + d)) : make_float2(0, 0);
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const int s = lane + 32 * u;
                        mx[u] = s < active ? __ldcg(p + (int64_t)s * (DS_HD + 2)) : -INFINITY;
                        sm[u] = s < active ? __ldcg(p + (int64_t)s * (DS_HD + 2) + 1) : 0.0f;
                    }
                    const float M = warp_max(fmaxf(mx[0], mx[1]));
                    float w[2];
#pragma unroll
                    for (int u = 0; u < 2; u++) w[u] = M == -INFINITY || mx[u] == -INFINITY ? 0.0f : __expf(mx[u] - M);
                    const float Ls = warp_sum(sm[0] * w[0] + sm[1] * w[1]);
                    float A0 = 0, A1 = 0;
                    for (int s0 = 0; s0 < active; s0 += NS) {
                        if (s0 > 0) /* past NS splits: another round trip */
#pragma unroll
                            for (int s = 0; s < NS; s++)
                                v[s] = s0 + s < active ? __ldcg((const float2 *)(p + (int64_t)(s0 + s) * (DS_HD + 2) + 2 + d))
                                                       : make_float2(0, 0);
#pragma unroll
                        for (int s = 0; s < NS; s++) {
                            const int sp = s0 + s;
                            const float ws = __shfl_sync(0xffffffffu, sp < 32 ? w[0] : w[1], sp % 32);
                            if (sp < active) A0 += v[s].x * ws, A1 += v[s].y * ws;
                        }
                    }
                    bf16 *out = a.o + (int64_t)row * a.nq * DS_HD + (int64_t)(kvh * G + i) * DS_HD + d;
                    out[0] = f2bf(Ls > 0 ? A0 / Ls : 0.0f);
                    out[1] = f2bf(Ls > 0 ? A1 / Ls : 0.0f);
                }
            }
        }
        cons_sync();
    }
}

#endif /* sm_90 */

/* SKM: the GEMV phases that go stream-K, fixed for the common cases so that the others' loops are
 * the plain ones (0: none; DS_SK_OP: o_proj and down_proj, 4B on 132 SMs), -1 any (a.run) */
template <int SKM>
__global__ void __launch_bounds__(DS_THREADS, 1) k_decode_stack(const __grid_constant__ ds_args a) {
#ifdef DS_DEVICE
    extern __shared__ __align__(1024) uint8_t smem[];
    ds_head &S = *(ds_head *)smem;
    bf16 *x_s = (bf16 *)(smem + a.x_off);
    uint8_t *ring = smem + a.ring_off;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x < a.ring) {
        mbar_init(&S.full[threadIdx.x], 1 + a.cw / 128);
        mbar_init(&S.empty[threadIdx.x], DS_WARPS);
    }
    for (int j = threadIdx.x; j < DS_HD / 2; j += DS_THREADS) S.inv[j] = a.inv_freq[j], S.dim[j] = a.dim_of[j];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the barriers, as the copy engine sees them */
    __syncthreads();
    if (warp >= DS_WARPS) {
#if DS_SETMAXNREG
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;" ::: "memory");
#endif
        producer<SKM>(a, S, ring, lane, warp - DS_WARPS);
        return;
    }
#if DS_SETMAXNREG /* the producers' registers to the consumers: 128 x 56 + 256 x 224 <= 65,536 */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;" ::: "memory");
#endif
    /* the step's metadata and this CTA's attention item's block-table entries, once (qk_angles' angles) */
    if (threadIdx.x < a.R)
        S.ctx[threadIdx.x] = a.row_ctx[threadIdx.x], S.seq[threadIdx.x] = a.row_seq[threadIdx.x],
        S.slot[threadIdx.x] = a.slot[threadIdx.x];
    if (warp < a.R) { /* warp r row r's, as qk_angles makes them for the ops */
        float sn[2], cs[2];
        qk_angles<64>(sn, cs, a.pos, a.pos_stride, DS_HD, warp, S.inv, S.dim, lane);
        for (int i = 0; i < 2; i++) S.sn[warp][lane + 32 * i] = sn[i], S.cs[warp][lane + 32 * i] = cs[i];
    }
    cons_sync();
    {
        const int item = blockIdx.x, row = item / (a.nkv * a.splits), split = item % a.splits;
        int nbt = 0, b0 = 0;
        if (item < a.R * a.nkv * a.splits) {
            int jb, je;
            ds_split_keys(a, S.ctx[row], split, &jb, &je);
            if (jb < je) b0 = jb / IRIS_KV_BLOCK, nbt = (je - 1) / IRIS_KV_BLOCK - b0 + 1;
            if (nbt > DS_BT) nbt = 0;
            for (int k = threadIdx.x; k < nbt; k += DS_WARPS * 32)
                S.bt[k] = a.block_tables[(int64_t)S.seq[row] * a.max_blocks + b0 + k];
        }
        if (threadIdx.x == 0) S.bt0 = b0, S.nbt = nbt;
    }
    cons_sync();
    unsigned target = 0;
    ds_cursor cur = {0, 0};
    unsigned long long *tr = a.trace ? a.trace + (size_t)blockIdx.x * a.n_layers * DS_EVENTS : NULL;
    auto stamp = [&]() { /* the next of the CTA's DS_EVENTS a layer (thread 0 keeps the place) */
        if (tr && threadIdx.x == 0) {
            unsigned long long t;
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            *tr++ = t;
        }
    };
    ds_normw nw = norm_weights(a, a.L[0].ln1);
    for (int il = 0; il < a.n_layers; il++) {
        const ds_layer &L = a.L[il];
        prep_norm(a, nw, x_s, S);
        stamp();
        gemv_phase<0, SKM>(a, S, ring, x_s, cur);
        stamp();
        if (!(IRIS_DS_CEILING & 2)) attn_phase(a, L, S); /* (no grid barrier before it: its q/k/v come as tagged words) */
        stamp();
        grid_sync(a.bar, target);
        qkv_clear<SKM>(a);
        stamp();
        prep_copy(a, a.o, a.nq * DS_HD, x_s);
        stamp();
        gemv_phase<1, SKM>(a, S, ring, x_s, cur);
        stamp();
        nw = norm_weights(a, L.ln2);
        if (!(IRIS_DS_CEILING & 4)) grid_sync(a.bar, target);
        stamp();
        prep_norm(a, nw, x_s, S);
        stamp();
        gemv_phase<2, SKM>(a, S, ring, x_s, cur);
        stamp();
        if (!(IRIS_DS_CEILING & 8)) grid_sync(a.bar, target);
        stamp();
        prep_copy(a, a.gb, a.FF, x_s);
        stamp();
        gemv_phase<3, SKM>(a, S, ring, x_s, cur);
        stamp();
        if (il + 1 < a.n_layers) {
            nw = norm_weights(a, a.L[il + 1].ln1);
            if (!(IRIS_DS_CEILING & 16)) grid_sync(a.bar, target);
        }
        stamp();
    }
#endif
}

/* ---- host ---- */

static int fp8_ok(const iris_tensor *w, int64_t rows, int64_t cols) {
    return w && w->dtype == IRIS_DT_F8_E4M3 && w->rows == rows && w->cols == cols && tld(w) == cols && w->scale &&
           w->block[0] == 128 && w->block[1] == 128 && is_aligned16(w->data) && is_aligned16(w->scale) && rows % 16 == 0;
}
static int act_ok(const iris_tensor *t, int64_t rows, int64_t cols) {
    return t && t->dtype == IRIS_DT_BF16 && t->rows == rows && t->cols == cols && tld(t) == cols && is_aligned16(t->data);
}
static int vec_ok(const iris_tensor *t, int64_t n, int dt) {
    return t && t->rows * t->cols == n && (int)t->dtype == dt &&
           (dt == IRIS_DT_BF16 || dt == IRIS_DT_F16 || dt == IRIS_DT_F32);
}

/* The chunk width for these shapes: 512 columns, or 256 / 128 where a matrix's width needs it; 0 if
 * none fits. */
static int ds_chunk_width(int64_t H, int64_t FF, int64_t qw) {
    int cw = 512;
    while (cw >= 128 && (H % cw || FF % cw || qw % cw)) cw /= 2;
    return cw >= 128 ? cw : 0;
}

/* The GEMV phases that go stream-K on `grid` CTAs, and their runs (chunks a CTA).  A phase may where
 * the CTA with the most chunks of whole tiles would have 15% more than an even share.  By default
 * (force < 0) only o_proj and down_proj, and only both together (4B on 132 SMs: o_proj 16 against
 * 10 chunks, down_proj 38 against 24; 2B none, every phase within 4%): the one mask with a kernel
 * instance of its own that measured faster; any other would take the generic instance, whose
 * loops alone cost 3-4%.  force >= 0: the phases of that mask that have enough chunks. */
static int ds_split_rule(int grid, int H, int FF, int nq, int nkv, int cw, int force, int run[4]) {
    int sk = 0;
    for (int ph = 0; ph < 4; ph++) {
        const int64_t tiles = ds_tiles(ph, H, FF, nq, nkv), nch = ds_k(ph, H, FF, nq) / cw;
        const int64_t whole = (tiles + grid - 1) / grid * nch, even = (tiles * nch + grid - 1) / grid;
        const int want = force >= 0 ? (force >> ph) & 1 : (ph & 1) && whole * 100 >= even * 115;
        run[ph] = want && tiles * nch >= 2 * grid && grid <= DS_MAX_GRID ? (int)even : 0;
        if (run[ph]) sk |= 1 << ph;
    }
    if (force < 0 && sk != DS_SK_OP) sk = 0, memset(run, 0, 4 * sizeof *run);
    return sk;
}

extern "C" int iris_cuda_decode_split_default(int sms, int H, int FF, int nq, int nkv) {
    const int cw = ds_chunk_width(H, FF, (int64_t)nq * DS_HD);
    int run[4];
    return cw && sms > 0 ? ds_split_rule(sms, H, FF, nq, nkv, cw, -1, run) : 0;
}
extern "C" void iris_cuda_set_decode_stack(iris_backend *b, int mode) { cuda_of(b)->decode_stack = mode; }
extern "C" int iris_cuda_decode_stack_runs(iris_backend *b) { return cuda_of(b)->ds_runs; }
extern "C" void iris_cuda_set_decode_split(iris_backend *b, int mask) { cuda_of(b)->ds_split = mask < 0 ? -1 : mask & 15; }
extern "C" int iris_cuda_decode_split_last(iris_backend *b) { return cuda_of(b)->ds_split_last; }

int iris_cuda_decode_layers(iris_backend *b, const iris_decode_stack *d) {
    cuda_ctx *c = cuda_of(b);
    const iris_attn_meta *mt = d->meta;
    const int R = mt->n_rows, NL = d->n_layers;
    if (!c->decode_stack || c->prop.major < 9 || !c->ds_bar || mt->n_seqs != R || R < 1 || R > DS_MAX_ROWS || NL < 1 ||
        NL > DS_MAX_LAYERS)
        return 1;
    const int nq = d->n_q_heads, nkv = d->kv[0].n_kv_heads, hd = d->kv[0].head_dim;
    const int64_t H = d->h->cols, FF = d->g->cols;
    if (hd != DS_HD || nkv <= 0 || nq % nkv || nq / nkv > DS_GMAX || (int64_t)R * nkv > (int64_t)c->attn_count_n ||
        (int64_t)R * (nq + 2 * nkv) * hd * 8 > DS_QKV_BYTES)
        return 1;
    if (!act_ok(d->h, R, H) || !act_ok(d->q, R, (int64_t)nq * hd) || !act_ok(d->k, R, (int64_t)nkv * hd) ||
        !act_ok(d->v, R, (int64_t)nkv * hd) || !act_ok(d->o, R, (int64_t)nq * hd) || !act_ok(d->g, R, FF))
        return 1;
    const int cw = ds_chunk_width(H, FF, (int64_t)nq * hd);
    if (!cw || H > 2 * DS_WARPS * 256) return 1;
    /* By default (mode -1) only where it measured faster than the ops (H100, iris bench, alternating
     * runs, 2026-11-26 with the walk of 64 keys a round), while the block tables' width (the context
     * rounded up to 128 tokens) is within a limit that falls with the rows, the attention's share
     * growing with both.  Layers of 64 MiB or more (4B-FP8, 101 MB a layer): 1-4 rows at any length
     * (ops -> kernel, batch 1/2/4: ~2,100 tokens 294-297/531-532/941-942 -> 389-394/727-738/1,234-1,235
     * tok/s, ~8,300 233/385-388/572-574 -> 304-311/493/681-682, ~16,400 189-190/285-286/386 ->
     * 243/346/427-431, ~32,800 137/184/229 -> 168/216/245).  Smaller layers (2B-FP8, 50 MB): 1 row at
     * any length (~2,100 604-605 -> 720-732, ~8,300 461-467 -> 539-562, ~16,400 361 -> 424-429,
     * ~32,800 253 -> 295); 2 rows to 8,448 (~3,200 1,084-1,097 -> 1,224-1,234, ~6,300 969-971 ->
     * 984-1,004, ~8,300 823-905 -> 861-878, ~12,300 799-804 -> 722-723); 3 to 3,200 (~2,100
     * 1,601-1,618 -> 1,778-1,798, ~3,200 1,546-1,550 -> 1,565-1,571, ~4,200 1,433-1,459 ->
     * 1,422-1,440); 4 to 2,176 (~2,100 1,908-1,915 -> 2,162, ~3,200 1,943-1,977 -> 1,895-1,902). */
    const int64_t layer_bytes = ((int64_t)(nq + 2 * nkv) * hd + 3 * FF) * H + H * (int64_t)nq * hd;
    const int big = layer_bytes >= ((int64_t)64 << 20);
    const int64_t ctx_limit = big || R == 1 ? INT64_MAX : R == 2 ? 8448 : R == 3 ? 3200 : 2176;
    if (c->decode_stack < 0 && (int64_t)mt->max_blocks * IRIS_KV_BLOCK > ctx_limit) return 1;
    const int ln_dt = d->w[0][IRIS_DL_INPUT_NORM]->dtype, qk_dt = d->w[0][IRIS_DL_Q_NORM]->dtype;
    static ds_args a; /* ~11 KB of kernel parameters (one engine thread owns the backend) */
    memset(&a, 0, sizeof a);
    for (int il = 0; il < NL; il++) {
        const iris_tensor *const *w = d->w[il];
        const iris_kv_layer *kv = &d->kv[il];
        const int64_t shape[W_N][2] = {{(int64_t)nq * hd, H}, {(int64_t)nkv * hd, H}, {(int64_t)nkv * hd, H},
                                       {H, (int64_t)nq * hd}, {FF, H}, {FF, H}, {H, FF}};
        for (int i = 0; i < W_N; i++) {
            const iris_tensor *t = w[IRIS_DL_Q + i];
            if (!fp8_ok(t, shape[i][0], shape[i][1])) return 1;
            a.L[il].w[i] = (const uint8_t *)t->data;
            a.L[il].s[i] = t->scale;
        }
        if (ln_dt != IRIS_DT_BF16 || !is_aligned16(w[IRIS_DL_INPUT_NORM]->data) ||
            !is_aligned16(w[IRIS_DL_POST_NORM]->data) || !vec_ok(w[IRIS_DL_INPUT_NORM], H, ln_dt) ||
            !vec_ok(w[IRIS_DL_POST_NORM], H, ln_dt) ||
            !vec_ok(w[IRIS_DL_Q_NORM], hd, qk_dt) || !vec_ok(w[IRIS_DL_K_NORM], hd, qk_dt))
            return 1;
        if (kv->dtype != IRIS_DT_BF16 || kv->n_kv_heads != nkv || kv->head_dim != hd || !kv->k || !kv->v) return 1;
        a.L[il].ln1 = w[IRIS_DL_INPUT_NORM]->data, a.L[il].ln2 = w[IRIS_DL_POST_NORM]->data;
        a.L[il].qn = w[IRIS_DL_Q_NORM]->data, a.L[il].kn = w[IRIS_DL_K_NORM]->data;
        a.L[il].kc = (bf16 *)kv->k, a.L[il].vc = (bf16 *)kv->v;
    }
    /* shared memory: the head, x (the step's rows of the widest input), the ring of weight slots */
    const int64_t kmax = H > FF ? (H > (int64_t)nq * hd ? H : (int64_t)nq * hd) : (FF > (int64_t)nq * hd ? FF : (int64_t)nq * hd);
    const size_t x_off = (sizeof(ds_head) + 127) & ~(size_t)127, xld = (size_t)kmax + 8;
    const size_t ring_off = (x_off + (size_t)R * xld * 2 + 127) & ~(size_t)127;
    const size_t slot_bytes = 16 * (size_t)(cw + DS_PAD) + 16, smax = c->prop.sharedMemPerBlockOptin;
    if (ring_off + DS_MIN_RING * slot_bytes > smax) return 1;
    int ring = (int)((smax - ring_off) / slot_bytes);
    if (ring > DS_MAX_RING) ring = DS_MAX_RING;
    const size_t smem = ring_off + (size_t)ring * slot_bytes;
    const int grid = c->prop.multiProcessorCount; /* one CTA an SM: every CTA resident (the grid barriers) */
    int run[4] = {0, 0, 0, 0};
    const int sk = c->ds_part ? ds_split_rule(grid, (int)H, (int)FF, nq, nkv, cw, c->ds_split, run) : 0;
    /* the kernel built for these stream-K phases, or the one for any */
    const int ki = sk == 0 ? 0 : sk == DS_SK_OP ? 1 : 2;
    void (*const kern)(ds_args) = ki == 0 ? k_decode_stack<0> : ki == 1 ? k_decode_stack<DS_SK_OP> : k_decode_stack<-1>;
    static size_t allowed[3];
    if (smem > allowed[ki]) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
        allowed[ki] = smem;
    }
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, DS_THREADS, smem) != cudaSuccess ||
        per_sm < 1) {
        cudaGetLastError();
        return 1;
    }
    int splits = grid / (R * nkv);
    splits = splits < 1 ? 1 : splits > DS_MAX_SPLITS ? DS_MAX_SPLITS : splits;
    while (splits > 1 && (size_t)R * nq * splits * (hd + 2) > c->attn_part_elems) splits--;
    if (splits > 1 && c->attn_count_n == 0) splits = 1;

    a.n_layers = NL, a.R = R, a.H = (int)H, a.FF = (int)FF, a.nq = nq, a.nkv = nkv, a.g = nq / nkv, a.cw = cw;
    a.ring = ring, a.splits = splits, a.max_blocks = mt->max_blocks, a.pos_stride = d->pos_stride, a.xld = (int)xld;
    a.ln_dt = ln_dt, a.qk_dt = qk_dt;
    for (int ph = 0; ph < 4; ph++) a.run[ph] = run[ph], a.tiles[ph] = ds_tiles(ph, (int)H, (int)FF, nq, nkv);
    a.gpart = (unsigned long long *)c->ds_part;
    a.qkvt = (unsigned long long *)((char *)c->ds_part + DS_SKPART_BYTES);
    a.x_off = (unsigned)x_off, a.ring_off = (unsigned)ring_off, a.slot_bytes = (unsigned)slot_bytes;
    a.eps = d->eps, a.scale = 1.0f / sqrtf((float)hd);
    a.h = (bf16 *)d->h->data;
    a.o = (bf16 *)d->o->data, a.gb = (bf16 *)d->g->data;
    a.part = c->attn_part, a.count = c->attn_count, a.bar = c->ds_bar;
    a.row_seq = mt->row_seq, a.row_ctx = mt->row_ctx, a.block_tables = mt->block_tables, a.slot = mt->slot;
    a.pos = d->pos, a.n_slots = (int64_t)d->kv[0].n_blocks * IRIS_KV_BLOCK;
    for (int j = 0; j < hd / 2; j++) a.inv_freq[j] = d->inv_freq[j], a.dim_of[j] = d->dim_of[j];

    /* A measuring aid (IRIS_CUDA_DS_TRACE=FILE, read at open): every CTA's stamps at the phase ends
     * of every layer, written to FILE (raw u64, [grid][layers][DS_EVENTS]) after the step, for
     * bench/ds_trace.py.  Not while a graph is recorded (a replay does not come back here; use
     * IRIS_CUDA_GRAPHS=0); its buffer is a cudaMalloc of its own, freed at close. */
    const size_t trace_n = (size_t)grid * NL * DS_EVENTS;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (c->ds_trace && cudaStreamIsCapturing(c->stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusNone) {
        if (c->ds_trace_n < trace_n) {
            cudaFree(c->ds_trace_buf);
            c->ds_trace_n = cudaMalloc((void **)&c->ds_trace_buf, trace_n * 8) == cudaSuccess ? trace_n : 0;
            if (!c->ds_trace_n) c->ds_trace_buf = NULL;
        }
        a.trace = c->ds_trace_buf;
    }
    if (cudaMemsetAsync(c->ds_bar, 0, sizeof(unsigned), c->stream) != cudaSuccess)
        return iris_cuda_status(b, cudaGetLastError(), "decode_layers: barrier reset");
    static int ceiling_told;
    if (IRIS_DS_CEILING && !ceiling_told++)
        fprintf(stderr, "iris: decode_layers built with IRIS_DS_CEILING=%d: timing only, wrong numbers\n", IRIS_DS_CEILING);
    kern<<<grid, DS_THREADS, smem, c->stream>>>(a);
    c->ds_runs++;
    c->ds_split_last = sk;
    int rc = iris_cuda_check(b, "decode_layers");
    if (!rc && a.trace) {
        unsigned long long *h = (unsigned long long *)malloc(trace_n * 8);
        FILE *f = h && cudaStreamSynchronize(c->stream) == cudaSuccess &&
                          cudaMemcpy(h, a.trace, trace_n * 8, cudaMemcpyDeviceToHost) == cudaSuccess
                      ? fopen(c->ds_trace, "wb")
                      : NULL;
        if (f) {
            int hdr[3] = {grid, NL, DS_EVENTS};
            fwrite(hdr, sizeof hdr, 1, f);
            fwrite(h, 8, trace_n, f);
            fclose(f);
        }
        free(h);
    }
    return rc;
}
