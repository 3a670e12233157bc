/* rand.h — the tests' random numbers: splitmix64, so that a seed gives the
 * same inputs on every machine and C library (rand() does not). */
#ifndef XENT_TESTS_RAND_H
#define XENT_TESTS_RAND_H

#include <stdint.h>

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double urand(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

#endif
