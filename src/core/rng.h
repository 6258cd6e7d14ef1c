/* splitmix64: the library's seeded generator (layer initialization, dropout masks, shuffling).
 * Small, fast, and the same sequence on every platform for a given seed. MT19937 beside it (rng.c)
 * for what must draw as numpy's RandomState(seed): ONNX's reference Dropout with a seed. */
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

#define OT_MT19937_N 624
typedef struct ot_mt19937 {
    uint32_t key[OT_MT19937_N];
    int pos;
} ot_mt19937;
void ot_mt19937_seed(ot_mt19937 *m, uint32_t seed);
uint32_t ot_mt19937_next(ot_mt19937 *m);
/* Uniform in [0, 1) with 53 bits from two draws, as numpy's random_sample. */
double ot_mt19937_uniform(ot_mt19937 *m);

#endif
