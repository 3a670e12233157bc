/* shared/team.cuh — a row team's reduction, the same in both families.
 * Inlined where a template says #include "shared/team.cuh" (tools/embed.sh),
 * after it has defined XENT_TPR, WARPS and FULL_MASK. */

/* Reduces v over the team in place; every lane ends with the team's total.
 * SHFL(x, o) is x of the lane o apart, MERGE(into, from) merges two partials.
 * Teams wider than a warp meet in warp_part, the caller's shared array of
 * WARPS slots, which every thread of the block must reach the same number
 * of times. Keeping one reduction's writes to warp_part behind the previous
 * one's reads is the caller's: a barrier after (xent_fwd) or before
 * (xent_grad). A macro rather than a C++ template: instantiating a template
 * moves the caller's shared arrays in the layout, and so changes the compiled
 * kernels. */
#define TEAM_REDUCE(v, warp_part, SHFL, MERGE)                          \
    do {                                                                \
        const int width_ = XENT_TPR < 32 ? XENT_TPR : 32;               \
        _Pragma("unroll") for (int o_ = width_ / 2; o_ > 0; o_ >>= 1)   \
            MERGE(v, SHFL(v, o_));                                      \
        if (XENT_TPR > 32) {                                            \
            if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = v; \
            __syncthreads();                                            \
            v = warp_part[0];                                           \
            _Pragma("unroll") for (int i_ = 1; i_ < WARPS; i_++)        \
                MERGE(v, warp_part[i_]);                                \
        }                                                               \
    } while (0)
