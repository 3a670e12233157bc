/* shared/loads.cuh — the load instruction the CACHE knob picks (0 plain,
 * 1 read-only without L1 allocation, 2 streaming: evict first), the
 * targets' type and how a 16-bit logit widens. Inlined where a template
 * says #include "shared/loads.cuh" (tools/embed.sh). */
#if XENT_CACHE == 0
#define LD "ld.global"
#elif XENT_CACHE == 1
#define LD "ld.global.nc.L1::no_allocate"
#else
#define LD "ld.global.cs"
#endif

#if XENT_TARGET == 0
typedef int target_t;
#else
typedef long long target_t;
#endif

#if XENT_LOGIT != 0
/* A 16-bit logit (fp16 or bf16 bits) as fp32. */
__device__ __forceinline__ float widen16(unsigned short h) {
#if XENT_LOGIT == 1
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return __uint_as_float(((unsigned)h) << 16);
#endif
}
#endif
