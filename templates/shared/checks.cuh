/* shared/checks.cuh — the knob constraints of both families, for a kernel
 * rendered by hand (gen/space.c refuses these configs before rendering).
 * Inlined where a template says #include "shared/checks.cuh"
 * (tools/embed.sh), after ESIZE. */
#if (XENT_VEC * ESIZE) != 4 && (XENT_VEC * ESIZE) != 8 && (XENT_VEC * ESIZE) != 16
#error "XENT_VEC * element size must be 4, 8 or 16 bytes"
#endif
#if XENT_BLOCK % XENT_TPR != 0 || (XENT_TPR > 32 && XENT_BLOCK != XENT_TPR)
#error "BLOCK must be a multiple of TPR, and equal to it when TPR > 32"
#endif
