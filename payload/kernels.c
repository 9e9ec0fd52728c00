/* kernels.c -- the arithmetic: fp16 conversion, Q8_0 / Q4_0 quantization in
 * ggml's block layout, and the dot products of quantized weight rows with
 * int16 activations (scalar, AVX2, NEON). products.c runs them over rows on
 * the worker pool.
 *
 * Block layouts (ggml's, so GGUF readers agree byte for byte):
 *
 *   Q8_0, 34 bytes per 32 values: fp16 d = amax/127, then 32 int8 q with
 *         q = roundf(x * id), id = 1/d in fp32 (half away from zero).
 *   Q4_0, 18 bytes per 32 values: fp16 d = m / -8 where m is the value of
 *         largest magnitude (sign kept), then 16 bytes of nibbles
 *         n = min(15, (int)(x * id + 8.5)); byte j holds value j in its low
 *         nibble and value j+16 in its high nibble.
 *   (x * id, not x / d: the two round differently, and ggml multiplies.)
 *   fp32 -> fp16 rounds to nearest even with subnormals, like numpy.
 *
 * NaN and Inf (real inputs: a bf16 overflow upstream makes them) get a
 * defined result, where C leaves the float -> int conversion undefined:
 * only finite values set a block's scale (amax, m); then NaN becomes 0 and
 * +-Inf the extreme code of its sign: Q8_0 +-127, Q4_0 the nibble whose
 * value is largest (or smallest) for that scale, the int16 activations
 * +-32767, i.e. +-Inf counts as +-(the block's largest finite magnitude),
 * and as 0 in a block with no finite non-zero value. For finite inputs the
 * bytes are unchanged (still ggml's).
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Activations are fp32 at the API. Inside a product each 32-value block
 *     of x is held as int16 with its own scale (error <= 2^-16 of the block
 *     maximum), so the inner loops are integer multiply-adds and a product
 *     stays within 1e-4 of fp32 math; int8 activations (ggml's choice) would
 *     be faster still but add ~0.5% error to every output.
 *   - One build per SIMD level (baseline, x86-64-v3, arm64-dotprod). The
 *     loader picks one from h3k_cpu_features(); the code picks its kernels at
 *     compile time, so there is no dispatch in the inner loops.
 *   - Floating point contraction is off (pragma in h3k_internal.h, and the
 *     build flags): quantization must round exactly like the reference, and
 *     x*id + 8.5 fused into an FMA rounds differently.
 *
 * Left out on purpose
 * -------------------
 *   - K-quants and other GGUF types: Q8_0 and Q4_0 cover what the planner asks.
 *   - Faster inner loops (int8 activations, AVX-512/VNNI builds): q8_0 is
 *     bound by memory bandwidth, q4_0 by arithmetic (~1.5 ns per block per
 *     core on Zen 4), and with the pool both beat ggml's generic CPU
 *     kernels' ratios to numpy (payload/README.md), so the int16 scheme stays.
 *   - SDOT kernels: SDOT multiplies int8 by int8 and our activations are
 *     int16, so the arm64-dotprod build shares the NEON kernels and differs
 *     only in what the compiler may use.
 */

#include "h3k_internal.h"

/* ------------------------------------------------------------------ fp16 */

uint16_t h3k_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf stays inf, NaN stays a quiet NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    uint32_t exp = ax >> 23;
    if (exp < 113) { /* below 2^-14: a subnormal half, or zero */
        if (exp < 102) return (uint16_t)sign;
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - exp;
        uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((exp - 112) << 10) | ((ax >> 13) & 0x3ffu), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry moves into the exponent */
    return (uint16_t)(sign | h);
}

float h3k_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (exp) {
        x = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (!mant) {
        x = sign;
    } else { /* subnormal half: normalise it */
        exp = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        x = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static inline float block_scale(const uint8_t *blk) {
    uint16_t h = (uint16_t)(blk[0] | (blk[1] << 8));
#if defined(H3K_AVX2)
    return _cvtsh_ss(h);
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
    __fp16 v; /* every arm64 CPU converts half to single in hardware */
    memcpy(&v, &h, sizeof v);
    return (float)v;
#else
    return h3k_fp16_to_fp32(h);
#endif
}

static inline void put_scale(uint8_t *blk, float d) {
    uint16_t h = h3k_fp32_to_fp16(d);
    blk[0] = (uint8_t)(h & 0xff);
    blk[1] = (uint8_t)(h >> 8);
}

/* --------------------------------------------------------- quantization */

size_t h3k_quant_bytes(int kind, size_t n) {
    size_t bb = block_bytes(kind), out;
    if (!bb || n % H3K_BLOCK) return 0;
    return mul_ok(n / H3K_BLOCK, bb, &out) ? out : 0;
}

/* float -> int with what C leaves undefined made explicit: NaN gives 0, and
 * anything outside [lo, hi] (the infinities too) gives lo or hi. Finite
 * values inside the range truncate as a plain cast would. */
static inline int clamp_to_int(float v, int lo, int hi) {
    if (isnan(v)) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* One Q8_0 block; the arithmetic mirrors ggml's reference step by step.
 * Only finite values set the scale, so NaN and Inf cannot poison it; the
 * clamp then sends NaN to 0 and +-Inf to +-127 (no effect on finite x). */
static void quantize_q8_block(const float *x, uint8_t *out) {
    float amax = 0.0f;
    for (int i = 0; i < H3K_BLOCK; i++) {
        float a = fabsf(x[i]);
        if (a > amax && isfinite(a)) amax = a;
    }
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_scale(out, d);
    for (int i = 0; i < H3K_BLOCK; i++) {
        float v = x[i] * id;
        out[2 + i] = (uint8_t)(int8_t)clamp_to_int(roundf(v), -127, 127);
    }
}

/* Q4_0 nibble of x * id: NaN (x NaN, or Inf * 0) is the value 0, nibble 8. */
static inline int q4_nibble(float v) {
    if (isnan(v)) v = 0.0f;
    return clamp_to_int(v + 8.5f, 0, 15);
}

/* One Q4_0 block: the scale comes from the signed finite value of largest
 * magnitude (the first one on ties), so that value maps to nibble 0. */
static void quantize_q4_block(const float *x, uint8_t *out) {
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < H3K_BLOCK; i++) {
        if (fabsf(x[i]) > amax && isfinite(x[i])) {
            amax = fabsf(x[i]);
            m = x[i];
        }
    }
    float d = m / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_scale(out, d);
    for (int j = 0; j < H3K_BLOCK / 2; j++) {
        int lo = q4_nibble(x[j] * id), hi = q4_nibble(x[j + H3K_BLOCK / 2] * id);
        out[2 + j] = (uint8_t)(lo | (hi << 4));
    }
}

int h3k_quantize(int kind, const float *x, size_t n, void *out, size_t out_size) {
    size_t need = h3k_quant_bytes(kind, n), bb = block_bytes(kind);
    if (!x || !out || !need || out_size < need) return H3K_EINVAL;
    uint8_t *o = (uint8_t *)out;
    for (size_t b = 0; b < n / H3K_BLOCK; b++) {
        if (kind == H3K_Q8_0)
            quantize_q8_block(x + b * H3K_BLOCK, o + b * bb);
        else
            quantize_q4_block(x + b * H3K_BLOCK, o + b * bb);
    }
    return H3K_OK;
}

int h3k_dequantize(int kind, const void *q, size_t q_size, float *y, size_t n) {
    size_t need = h3k_quant_bytes(kind, n), bb = block_bytes(kind);
    if (!q || !y || !need || q_size < need) return H3K_EINVAL;
    const uint8_t *in = (const uint8_t *)q;
    for (size_t b = 0; b < n / H3K_BLOCK; b++) {
        const uint8_t *blk = in + b * bb;
        float d = block_scale(blk), *o = y + b * H3K_BLOCK;
        if (kind == H3K_Q8_0) {
            for (int i = 0; i < H3K_BLOCK; i++) o[i] = d * (float)(int8_t)blk[2 + i];
        } else {
            for (int j = 0; j < H3K_BLOCK / 2; j++) {
                o[j] = d * (float)((blk[2 + j] & 0x0f) - 8);
                o[j + H3K_BLOCK / 2] = d * (float)((blk[2 + j] >> 4) - 8);
            }
        }
    }
    return H3K_OK;
}

/* ------------------------------------------------------- dot products */

/* Activations are fp32 at the API. Once per call each 32-value block of x
 * becomes int16 with its own scale (error at most 2^-16 of the block's
 * largest value, a hundred times below the weights' quantization error), so
 * the inner loops multiply-add integers and convert to float once per block
 * instead of once per weight. Every path (scalar, AVX2, NEON) uses the same
 * representation, so they differ only in the order of float additions.
 * As in the quantizers, only finite values set a block's scale; NaN becomes
 * 0 and +-Inf the extreme code +-32767, i.e. +-(largest finite magnitude). */
void h3k_act16_quantize(const float *x, size_t n, int16_t *q, float *s) {
    for (size_t b = 0; b < n / H3K_BLOCK; b++, x += H3K_BLOCK, q += H3K_BLOCK) {
        float amax = 0.0f;
        for (int i = 0; i < H3K_BLOCK; i++) {
            float a = fabsf(x[i]);
            if (a > amax && isfinite(a)) amax = a;
        }
        float scale = amax / 32767.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        s[b] = scale;
        for (int i = 0; i < H3K_BLOCK; i++) q[i] = (int16_t)clamp_to_int(roundf(x[i] * inv), -32767, 32767);
    }
}

/* Scalar reference; also the kernel of the baseline build. */
float h3k_dot_scalar(int kind, const uint8_t *row, h3k_act16 x, size_t nb) {
    float acc = 0.0f;
    size_t bb = block_bytes(kind);
    for (size_t b = 0; b < nb; b++, row += bb) {
        const int16_t *xq = x.q + b * H3K_BLOCK;
        int32_t s = 0;
        if (kind == H3K_Q8_0) {
            for (int i = 0; i < H3K_BLOCK; i++) s += (int32_t)(int8_t)row[2 + i] * xq[i];
        } else {
            for (int j = 0; j < H3K_BLOCK / 2; j++) {
                s += (int32_t)((row[2 + j] & 0x0f) - 8) * xq[j];
                s += (int32_t)((row[2 + j] >> 4) - 8) * xq[j + H3K_BLOCK / 2];
            }
        }
        acc += block_scale(row) * x.s[b] * (float)s;
    }
    return acc;
}

#if defined(H3K_AVX2)
static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 int8 weights (as two 16-lane halves) times 32 int16 activations -> 8 int32 sums. */
static inline __m256i block_isum(__m128i w0, __m128i w1, const int16_t *xq) {
    __m256i p0 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(w0), _mm256_loadu_si256((const __m256i *)xq));
    __m256i p1 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(w1), _mm256_loadu_si256((const __m256i *)(xq + 16)));
    return _mm256_add_epi32(p0, p1);
}

static inline __m128i q4_low(__m128i raw) {
    return _mm_sub_epi8(_mm_and_si128(raw, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
}

static inline __m128i q4_high(__m128i raw) {
    return _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
}

static inline __m256i avx2_block(int kind, const uint8_t *blk, const int16_t *xq) {
    if (kind == H3K_Q8_0)
        return block_isum(_mm_loadu_si128((const __m128i *)(blk + 2)),
                          _mm_loadu_si128((const __m128i *)(blk + 18)), xq);
    __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
    return block_isum(q4_low(raw), q4_high(raw), xq);
}

/* Two accumulators (even and odd blocks) so consecutive FMAs do not wait
 * on each other's latency. */
static float dot_avx2(int kind, const uint8_t *row, h3k_act16 x, size_t nb) {
    size_t bb = block_bytes(kind), b = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; b + 1 < nb; b += 2, row += 2 * bb) {
        __m256i s0 = avx2_block(kind, row, x.q + b * H3K_BLOCK);
        __m256i s1 = avx2_block(kind, row + bb, x.q + (b + 1) * H3K_BLOCK);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(block_scale(row) * x.s[b]), _mm256_cvtepi32_ps(s0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(block_scale(row + bb) * x.s[b + 1]),
                               _mm256_cvtepi32_ps(s1), acc1);
    }
    if (b < nb) {
        __m256i s0 = avx2_block(kind, row, x.q + b * H3K_BLOCK);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(block_scale(row) * x.s[b]), _mm256_cvtepi32_ps(s0), acc0);
    }
    return hsum256(_mm256_add_ps(acc0, acc1));
}
#endif

#if defined(H3K_NEON)
/* 16 int8 weights times 16 int16 activations, added to acc (4 int32 lanes). */
static inline int32x4_t neon_mla16(int32x4_t acc, int8x16_t w, const int16_t *xq) {
    int16x8_t lo = vmovl_s8(vget_low_s8(w)), hi = vmovl_s8(vget_high_s8(w));
    int16x8_t x0 = vld1q_s16(xq), x1 = vld1q_s16(xq + 8);
    acc = vmlal_s16(acc, vget_low_s16(lo), vget_low_s16(x0));
    acc = vmlal_s16(acc, vget_high_s16(lo), vget_high_s16(x0));
    acc = vmlal_s16(acc, vget_low_s16(hi), vget_low_s16(x1));
    return vmlal_s16(acc, vget_high_s16(hi), vget_high_s16(x1));
}

static float dot_neon(int kind, const uint8_t *row, h3k_act16 x, size_t nb) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    size_t bb = block_bytes(kind);
    for (size_t b = 0; b < nb; b++, row += bb) {
        int8x16_t w0, w1;
        if (kind == H3K_Q8_0) {
            w0 = vld1q_s8((const int8_t *)(row + 2));
            w1 = vld1q_s8((const int8_t *)(row + 18));
        } else {
            uint8x16_t raw = vld1q_u8(row + 2);
            w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
            w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), vdupq_n_s8(8));
        }
        const int16_t *xq = x.q + b * H3K_BLOCK;
        int32x4_t s = neon_mla16(neon_mla16(vdupq_n_s32(0), w0, xq), w1, xq + 16);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), block_scale(row) * x.s[b]);
    }
    return vaddvq_f32(acc);
}
#endif

float h3k_dot_row(int kind, const uint8_t *row, h3k_act16 x, size_t nb) {
#if defined(H3K_AVX2)
    return dot_avx2(kind, row, x, nb);
#elif defined(H3K_NEON)
    return dot_neon(kind, row, x, nb);
#else
    return h3k_dot_scalar(kind, row, x, nb);
#endif
}
