/* shared/loads.cuh — the load instruction the CACHE knob picks (0 plain,
 * 1 read-only without L1 allocation, 2 streaming: evict first) and the
 * targets' type. Inlined where a template says #include "shared/loads.cuh"
 * (tools/embed.sh). */
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
