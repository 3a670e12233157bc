/* rand.h — the tests' random numbers: splitmix64, so that a seed gives the
 * same inputs on every machine and C library (rand() does not). */
#ifndef XENT_TESTS_RAND_H
#define XENT_TESTS_RAND_H

#include <math.h>
#include <stdint.h>

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), 53 bits. */
static inline double urand(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1.0p-53; }

/* A seed made of two numbers (a stream per row, per config). */
static inline uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull);
    splitmix(&s);
    return splitmix(&s);
}

/* Standard normal (Box-Muller). */
static inline double nrand(uint64_t *s) {
    double u1 = 1.0 - urand(s), u2 = urand(s);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static inline uint64_t rand_below(uint64_t *s, uint64_t n) { return n ? splitmix(s) % n : 0; }

#endif
