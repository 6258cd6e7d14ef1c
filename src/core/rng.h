/* splitmix64: the library's one seeded generator (layer initialization, dropout masks, shuffling).
 * Small, fast, and the same sequence on every platform for a given seed. */
#ifndef OTTER_CORE_RNG_H
#define OTTER_CORE_RNG_H

#include <stdint.h>

typedef struct ot_rng {
    uint64_t state;
} ot_rng;

static inline uint64_t ot_rng_next(ot_rng *r) {
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double ot_rng_uniform(ot_rng *r) { return (double)(ot_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* Uniform integer in [0, n) (n > 0), without modulo bias worth worrying about for n << 2^64. */
static inline uint64_t ot_rng_below(ot_rng *r, uint64_t n) { return (uint64_t)(ot_rng_uniform(r) * (double)n) % n; }

#endif
