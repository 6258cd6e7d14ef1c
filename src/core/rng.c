#include "core/rng.h"

/* MT19937 (Matsumoto & Nishimura 1998) seeded by init_genrand, as numpy's RandomState(seed) */
void ot_mt19937_seed(ot_mt19937 *m, uint32_t seed) {
    m->key[0] = seed;
    for (int i = 1; i < OT_MT19937_N; i++)
        m->key[i] = 1812433253u * (m->key[i - 1] ^ (m->key[i - 1] >> 30)) + (uint32_t)i;
    m->pos = OT_MT19937_N;
}

static void mt19937_refill(ot_mt19937 *m) {
    enum { N = OT_MT19937_N, M = 397 };
    for (int i = 0; i < N; i++) {
        uint32_t y = (m->key[i] & 0x80000000u) | (m->key[(i + 1) % N] & 0x7fffffffu);
        m->key[i] = m->key[(i + M) % N] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
    }
    m->pos = 0;
}

uint32_t ot_mt19937_next(ot_mt19937 *m) {
    if (m->pos >= OT_MT19937_N) mt19937_refill(m);
    uint32_t y = m->key[m->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

double ot_mt19937_uniform(ot_mt19937 *m) {
    uint32_t a = ot_mt19937_next(m) >> 5, b = ot_mt19937_next(m) >> 6;
    return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}
