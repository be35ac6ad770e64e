/* Per-row squared norms of x and of x - y for bfloat16 / float32 rows, in one pass over each row.
 *
 * numpy needs a pass per step (bf16 -> float32 into a buffer, |x|^2, x - y into another, |x - y|^2);
 * this reads each element once. Called through ctypes (hsdiff/fused.py), which releases the GIL, so
 * two threads run it on two cores. Built as an optional extension: without a C compiler hsdiff uses
 * the numpy path.
 *
 * Every result is deterministic and the same with or without AVX2: element i of a row goes to
 * float32 accumulator i % 16 with a fused multiply-add, in element order, and the 16 accumulators
 * are summed in double in lane order. The AVX2 loop keeps those 16 lanes in two registers; the
 * portable loop keeps them in an array and uses fmaf.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HS_X86 1
#endif

enum { HS_F32 = 0, HS_BF16 = 1 };
#define LANES 16

static inline float hs_value(const void *row, int dtype, long i) {
    if (dtype == HS_BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)row)[i];
}

static double hs_lanes(const float *acc) {
    double s = 0.0;
    for (int j = 0; j < LANES; j++)
        s += (double)acc[j];
    return s;
}

/* the portable loop: also the tail of the AVX2 one, from element i0 */
static void hs_row_portable(const void *x, int xdt, const void *y, int ydt, long i0, long w, float *sx, float *sd) {
    for (long i = i0; i < w; i++) {
        float a = hs_value(x, xdt, i);
        sx[i % LANES] = fmaf(a, a, sx[i % LANES]);
        if (y) {
            float e = a - hs_value(y, ydt, i);
            sd[i % LANES] = fmaf(e, e, sd[i % LANES]);
        }
    }
}

#ifdef HS_X86
__attribute__((target("avx2,fma"))) static inline __m256 hs_load8(const void *row, int dtype, long i) {
    if (dtype == HS_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)row + i);
}

__attribute__((target("avx2,fma"))) static void hs_row_avx2(const void *x, int xdt, const void *y, int ydt, long w,
                                                           float *sx, float *sd) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, t0 = s0, t1 = s0;
    long i = 0;
    for (; i + LANES <= w; i += LANES) {
        __m256 a0 = hs_load8(x, xdt, i), a1 = hs_load8(x, xdt, i + 8);
        s0 = _mm256_fmadd_ps(a0, a0, s0);
        s1 = _mm256_fmadd_ps(a1, a1, s1);
        if (y) {
            __m256 e0 = _mm256_sub_ps(a0, hs_load8(y, ydt, i)), e1 = _mm256_sub_ps(a1, hs_load8(y, ydt, i + 8));
            t0 = _mm256_fmadd_ps(e0, e0, t0);
            t1 = _mm256_fmadd_ps(e1, e1, t1);
        }
    }
    _mm256_storeu_ps(sx, s0);
    _mm256_storeu_ps(sx + 8, s1);
    _mm256_storeu_ps(sd, t0);
    _mm256_storeu_ps(sd + 8, t1);
    hs_row_portable(x, xdt, y, ydt, i, w, sx, sd);
}

/* x against m <= HS_GROUP rows y[j] at once: x is loaded and converted once for all of them. Each
 * accumulator gets what hs_row_avx2 gives it pair by pair, in the same order, so the same bits. M is a
 * constant where it is called (one copy of the loop per group size, its accumulators in registers). */
#define HS_GROUP 4
__attribute__((target("avx2,fma"), always_inline)) static inline void
hs_group_avx2(const void *x, int xdt, const void *const *y, const int *ydt, const int m, long w, float *sx,
              float (*sd)[LANES]) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, t0[HS_GROUP], t1[HS_GROUP];
    for (int j = 0; j < m; j++)
        t0[j] = t1[j] = s0;
    long i = 0;
    for (; i + LANES <= w; i += LANES) {
        __m256 a0 = hs_load8(x, xdt, i), a1 = hs_load8(x, xdt, i + 8);
        s0 = _mm256_fmadd_ps(a0, a0, s0);
        s1 = _mm256_fmadd_ps(a1, a1, s1);
        for (int j = 0; j < m; j++) {
            __m256 e0 = _mm256_sub_ps(a0, hs_load8(y[j], ydt[j], i)),
                   e1 = _mm256_sub_ps(a1, hs_load8(y[j], ydt[j], i + 8));
            t0[j] = _mm256_fmadd_ps(e0, e0, t0[j]);
            t1[j] = _mm256_fmadd_ps(e1, e1, t1[j]);
        }
    }
    _mm256_storeu_ps(sx, s0);
    _mm256_storeu_ps(sx + 8, s1);
    for (int j = 0; j < m; j++) {
        float ignored[LANES] = {0};
        _mm256_storeu_ps(sd[j], t0[j]);
        _mm256_storeu_ps(sd[j] + 8, t1[j]);
        hs_row_portable(x, xdt, y[j], ydt[j], i, w, j ? ignored : sx, sd[j]); /* the tail; |x|^2 once */
    }
}

__attribute__((target("avx2,fma"))) static void hs_group_avx2_m(const void *x, int xdt, const void *const *y,
                                                               const int *ydt, int m, long w, float *sx,
                                                               float (*sd)[LANES]) {
    switch (m) {
    case 1: hs_group_avx2(x, xdt, y, ydt, 1, w, sx, sd); break;
    case 2: hs_group_avx2(x, xdt, y, ydt, 2, w, sx, sd); break;
    case 3: hs_group_avx2(x, xdt, y, ydt, 3, w, sx, sd); break;
    default: hs_group_avx2(x, xdt, y, ydt, HS_GROUP, w, sx, sd); break;
    }
}

static int hs_has_avx2(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return known;
}
#endif

/* Rows [0, n) of x (row stride sx elements) and, when y is not NULL, of y (stride sy): the squared norm
 * of each x row into nx2[r] and of each x - y row into d2[r]. w elements per row. portable != 0 forces
 * the portable loop (tests compare both). */
void hs_rows(const void *x, int xdt, long sx, const void *y, int ydt, long sy, long n, long w, double *nx2,
             double *d2, int portable) {
    size_t xs = xdt == HS_BF16 ? 2 : 4, ys = ydt == HS_BF16 ? 2 : 4;
    for (long r = 0; r < n; r++) {
        const char *xr = (const char *)x + (size_t)r * (size_t)sx * xs;
        const char *yr = y ? (const char *)y + (size_t)r * (size_t)sy * ys : NULL;
        float acc_x[LANES] = {0}, acc_d[LANES] = {0};
#ifdef HS_X86
        if (!portable && hs_has_avx2())
            hs_row_avx2(xr, xdt, yr, ydt, w, acc_x, acc_d);
        else
#endif
            hs_row_portable(xr, xdt, yr, ydt, 0, w, acc_x, acc_d);
        nx2[r] = hs_lanes(acc_x);
        if (y)
            d2[r] = hs_lanes(acc_d);
    }
}

/* Rows [0, n) of x (row stride sx elements) against k tensors ys[j] of its shape (dtype ydts[j], stride
 * sys[j]): the squared norm of each x row into nx2[r] and of each x - ys[j] row into d2s[j][r], the same
 * bits as hs_rows pair by pair. Each x row is read once for up to HS_GROUP of them. */
void hs_rows_many(const void *x, int xdt, long sx, long n, long w, int k, const void *const *ys, const int *ydts,
                  const long *sys, double *nx2, double *const *d2s, int portable) {
    size_t xs = xdt == HS_BF16 ? 2 : 4;
    for (long r = 0; r < n; r++) {
        const char *xr = (const char *)x + (size_t)r * (size_t)sx * xs;
        for (int g = 0; g < k; g += HS_GROUP) {
            int m = k - g < HS_GROUP ? k - g : HS_GROUP;
            const void *yr[HS_GROUP];
            for (int j = 0; j < m; j++)
                yr[j] = (const char *)ys[g + j] + (size_t)r * (size_t)sys[g + j] * (ydts[g + j] == HS_BF16 ? 2 : 4);
            float acc_x[LANES] = {0}, acc_d[HS_GROUP][LANES] = {{0}};
#ifdef HS_X86
            if (!portable && hs_has_avx2())
                hs_group_avx2_m(xr, xdt, yr, ydts + g, m, w, acc_x, acc_d);
            else
#endif
                for (int j = 0; j < m; j++) {
                    float ignored[LANES] = {0};
                    hs_row_portable(xr, xdt, yr[j], ydts[g + j], 0, w, j ? ignored : acc_x, acc_d[j]);
                }
            if (g == 0)
                nx2[r] = hs_lanes(acc_x);
            for (int j = 0; j < m; j++)
                d2s[g + j][r] = hs_lanes(acc_d[j]);
        }
    }
}

/* Whether the loop is fast here (AVX2 with FMA, or a machine whose fmaf is an instruction): else the
 * numpy path is quicker. */
int hs_fast(void) {
#ifdef HS_X86
    return hs_has_avx2();
#elif defined(__aarch64__) || defined(__ARM_FEATURE_FMA)
    return 1;
#else
    return 0;
#endif
}

/* A module so that setuptools builds this file; its functions are reached through ctypes. */
static struct PyModuleDef hs_module = {PyModuleDef_HEAD_INIT, "_fused", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&hs_module); }
