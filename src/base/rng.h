/* rng.h: the project's one pseudo-random generator, xoshiro256** seeded through splitmix64
 * (Vigna), for the sampler's seeded draws and synth's random weights.  Streams are part of
 * what a seed means: a change here changes every seeded answer and every synth checkpoint. */
#ifndef IRIS_RNG_H
#define IRIS_RNG_H

#include <stdint.h>

#define IRIS_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

/* splitmix64's output for the state z before its step (the state then advances by the gamma). */
static inline uint64_t iris_mix64(uint64_t z) {
    z += IRIS_SPLITMIX_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t iris_rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The next 64 bits of the xoshiro256** state s. */
static inline uint64_t iris_xoshiro_next(uint64_t s[4]) {
    uint64_t result = iris_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = iris_rotl64(s[3], 45);
    return result;
}

#endif
