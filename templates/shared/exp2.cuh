/* shared/exp2.cuh — the exponentials of both families: 2^x by MUFU's ex2,
 * exp(x - m) subtracting first, a chunk's shift at one FFMA a term, and 2^x by
 * a polynomial on the FMA pipe (the POLY knob). Inlined where a template says
 * #include "shared/exp2.cuh" (tools/embed.sh), after LOG2E. */
/* 2^x in one MUFU instruction: flushing results below 2^-126 to zero costs
 * nothing measurable in a sum that holds at least 1 (the max's own term). */
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* exp(x - m) with m a shift from safe_max. The subtraction comes first so
 * that x == m gives exactly 1: an fma(x, log2e, -m*log2e) keeps the rounding
 * of m*log2e and drifts every rescale by up to 2^(|m| * 6e-8). */
__device__ __forceinline__ float exp_shifted(float x, float m) {
    return fast_exp2((x - m) * LOG2E);
}

/* The same shift for a chunk's many logits at one FFMA each, not a subtraction
 * and a product: terms 2^(x*log2e - ml2), with ml2 = m*log2e rounded, are off
 * by exactly 2^delta, delta = m*log2e - ml2 (an fma gives it), and their sum
 * is corrected once. So no drift from rescale to rescale. Past |m| = 2^22,
 * delta could near 1 and the terms overflow: those chunks subtract first. */
struct shift {
    float m;    /* from safe_max */
    float ml2;  /* m * log2e, rounded */
    float fix;  /* 2^-delta */
    bool ffma;  /* |m| < 2^22 */
};

__device__ __forceinline__ shift make_shift(float m) {
    shift h;
    h.m = m;
    h.ml2 = m * LOG2E;
    h.fix = fast_exp2(-fmaf(m, LOG2E, -h.ml2));
    h.ffma = fabsf(m) < 4194304.0f;
    return h;
}

/* 2^x without the MUFU unit, for x < 2^22: x = j + f, j an integer (the
 * 1.5 * 2^23 rounding trick) and |f| <= 1/2; 2^f from a degree-5 minimax
 * polynomial (relative error 1.8e-7 in fp32 Horner, about ex2.approx's), times
 * 2^j built in the exponent bits. The product, not an integer add to p's
 * exponent, keeps NaN a NaN. Below -125 it gives 2^-125 where ex2.ftz gives 0:
 * nothing in a sum that holds at least 1. About 11 FMA and ALU instructions. */
__device__ __forceinline__ float poly_exp2(float x) {
    const float y = x < -125.0f ? -125.0f : x; /* NaN compares false: kept */
    const float t = y + 12582912.0f;
    const float f = y - (t - 12582912.0f);
    float p = 1.3282305e-3f;
    p = fmaf(p, f, 9.6755894e-3f);
    p = fmaf(p, f, 5.5506952e-2f);
    p = fmaf(p, f, 2.4022119e-1f);
    p = fmaf(p, f, 6.9314700e-1f);
    p = fmaf(p, f, 1.0000001f);
    /* t's low bits hold j: (j + 127) << 23 is 2^j, the constant's bits shift out */
    return p * __int_as_float((__float_as_int(t) + 127) << 23);
}

/* One term of a shift; FFMA is h.ffma, a constant so that each path is straight
 * code; on_fma (a constant) takes the term off the MUFU pipe. */
template <bool FFMA>
__device__ __forceinline__ float shifted_term(float x, const shift &h, bool on_fma = false) {
    if (!FFMA) return exp_shifted(x, h.m);
    const float e = fmaf(x, LOG2E, -h.ml2);
    return on_fma ? poly_exp2(e) : fast_exp2(e);
}
