/* direct_read.c -- the streamer's direct reads (h3k_streamer_read): for a
 * caller that computes on the CPU, a batch of reads (a block's tensors) is
 * one task on the worker pool, each piece read straight into the caller's
 * buffer and widened there from bf16/fp16 to fp32.
 *
 * Each 128 Ki-value unit of input is read into the top of its own stretch
 * of the destination and widened there front to back: the fp32 output
 * starts below the 16-bit input and never overtakes it, so there is no
 * second buffer and no second copy.
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Every read is checked before any byte moves; a failure after that
 *     (a file that ends early, a failed read) leaves the buffers partly
 *     written and the path in the handle's last-error text.
 *   - The units of every read in one call are dealt from one counter, so a
 *     block of many tensors is one wake-up and no thread sits idle while
 *     another finishes a big tensor.
 *
 * Left out on purpose
 * -------------------
 *   - Direct reads overlapped with the caller's compute: on a CPU the copy
 *     and the compute share the same cores and memory bus, and a thread
 *     converting beside PyTorch's own threads slowed a 2-core step by more
 *     than the conversion costs when done alone on every core
 *     (payload/README.md has the figures). Only the disk is overlapped:
 *     read-ahead advice (streamer.c) costs the caller no CPU.
 */

#include "h3k_internal.h"

static size_t value_size(int type) {
    return type == H3K_F32 ? 4 : type == H3K_F16 || type == H3K_BF16 ? 2 : 0;
}

/* The widening loops read value i before they write its fp32 bytes, front
 * to back, so they also work in place on the layout read_unit sets up
 * (the fp32 output begins below its 16-bit input and never overtakes it).
 * That is why loads and stores go through memcpy and intrinsics, which may
 * alias, and never through typed pointers. */
static void widen_bf16(const unsigned char *src, unsigned char *dst, size_t n) {
    size_t i = 0;
#if defined(H3K_AVX2)
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 4 * i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
#elif defined(H3K_NEON) && defined(__aarch64__)
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)(src + 2 * i));
        uint32x4_t lo = vshll_n_u16(vget_low_u16(h), 16), hi = vshll_high_n_u16(h, 16);
        vst1q_u32((uint32_t *)(void *)(dst + 4 * i), lo);
        vst1q_u32((uint32_t *)(void *)(dst + 4 * i + 16), hi);
    }
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t x = (uint32_t)h << 16;
        memcpy(dst + 4 * i, &x, 4);
    }
}

#if defined(H3K_AVX2) && (defined(__F16C__) || defined(_MSC_VER))
#define H3K_F16C_LOOP 1
#endif

static void widen_f16(const unsigned char *src, unsigned char *dst, size_t n) {
    size_t i = 0;
#if defined(H3K_F16C_LOOP)
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        _mm256_storeu_ps((float *)(void *)(dst + 4 * i), _mm256_cvtph_ps(h));
    }
#elif defined(H3K_NEON) && defined(__aarch64__)
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16((const uint16_t *)(const void *)(src + 2 * i));
        float32x4_t lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
        float32x4_t hi = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)));
        vst1q_f32((float *)(void *)(dst + 4 * i), lo);
        vst1q_f32((float *)(void *)(dst + 4 * i + 16), hi);
    }
#endif
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        float f = h3k_fp16_to_fp32(h);
        memcpy(dst + 4 * i, &f, 4);
    }
}

/* Values per unit of a direct read: 256 KiB of 16-bit input, which its
 * widened output still shares the L2 cache with. A unit is what one thread
 * reads and converts at a time, and what idle threads take next; the units
 * of every read in one call are dealt from one counter, so a block of many
 * tensors is one task for the pool (one wake-up, no thread left idle
 * while another finishes a big tensor). */
#define H3K_READ_UNIT ((size_t)128 << 10)

typedef struct {
    h3k_streamer *s;
    const h3k_read *reads;
    size_t count;
    size_t *first;          /* first[i]: the first unit of reads[i]; first[count]: all units */
    h3k_atomic next, failed;
    int status;             /* the first failure (s->lock) */
} read_job;

static size_t read_values(const h3k_read *r) { return (size_t)(r->length / value_size(r->file_type)); }

/* One unit: read its input into the top of its own stretch of the
 * destination, then widen it in place (or, same type, read it where it
 * belongs). */
static int read_unit(read_job *j, size_t u, char *err, size_t cap) {
    size_t lo = 0, hi = j->count; /* the read holding unit u: first[lo] <= u < first[lo + 1] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->first[mid] <= u) lo = mid;
        else hi = mid;
    }
    const h3k_read *r = &j->reads[lo];
    size_t in = value_size(r->file_type), out = value_size(r->dst_type), n = read_values(r);
    size_t v0 = (u - j->first[lo]) * H3K_READ_UNIT, m = n - v0 < H3K_READ_UNIT ? n - v0 : H3K_READ_UNIT;
    unsigned char *to = (unsigned char *)r->dst + v0 * out, *from = to + m * (out - in);
    int st = h3k_file_read_at(j->s->file, from, m * in, r->offset + (uint64_t)v0 * in, err, cap);
    if (st != H3K_OK || in == out) return st;
    if (r->file_type == H3K_BF16) widen_bf16(from, to, m);
    else widen_f16(from, to, m);
    return H3K_OK;
}

static void read_part(void *arg, int part, int parts) {
    (void)part, (void)parts;
    read_job *j = (read_job *)arg;
    char err[200];
    int u;
    while (!atomic_get(&j->failed) && (u = atomic_take(&j->next)) >= 0 && (size_t)u < j->first[j->count]) {
        int st = read_unit(j, (size_t)u, err, sizeof err);
        if (st == H3K_OK) continue;
        mutex_lock(&j->s->lock);
        if (j->status == H3K_OK) {
            j->status = st;
            h3k_set_err(j->s->err, sizeof j->s->err, "%s: %s", j->s->path, err);
        }
        mutex_unlock(&j->s->lock);
        atomic_put(&j->failed, 1);
    }
}

/* Every read checked before any byte moves (lock held): inside the file,
 * a conversion we have, a whole number of values, a buffer that holds them. */
static int reads_ok(h3k_streamer *s, const h3k_read *reads, size_t count) {
    for (size_t i = 0; i < count; i++) {
        const h3k_read *r = &reads[i];
        size_t in = value_size(r->file_type), out = value_size(r->dst_type);
        int widen = r->dst_type == H3K_F32 && (r->file_type == H3K_F16 || r->file_type == H3K_BF16);
        int st = h3k_range_in_file(s, r->offset, r->length);
        if (st != H3K_OK) return st;
        if (!in || !out || (r->file_type != r->dst_type && !widen)) {
            h3k_set_err(s->err, sizeof s->err,
                    "read %zu: cannot read type %d into type %d (same type, or F16/BF16 into F32)", i,
                    r->file_type, r->dst_type);
            return H3K_EINVAL;
        }
        if (r->length % in || r->length / in > SIZE_MAX / out ||
            (size_t)(r->length / in) * out > r->dst_size || (r->length && !r->dst)) {
            h3k_set_err(s->err, sizeof s->err,
                    "read %zu: %llu bytes of type %d do not fit a buffer of %zu bytes of type %d", i,
                    (unsigned long long)r->length, r->file_type, r->dst_size, r->dst_type);
            return H3K_EINVAL;
        }
    }
    return H3K_OK;
}

int h3k_streamer_read(h3k_streamer *s, const h3k_read *reads, size_t count, int threads) {
    if (!s || (count && !reads) || count > SIZE_MAX / sizeof(size_t) - 1) return H3K_EINVAL;
    mutex_lock(&s->lock);
    int st = reads_ok(s, reads, count);
    mutex_unlock(&s->lock);
    if (st != H3K_OK) return st;
    read_job j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.reads = reads;
    j.count = count;
    j.first = (size_t *)H3K_MALLOC((count + 1) * sizeof(size_t));
    if (!j.first) return H3K_ENOMEM;
    uint64_t bytes = 0;
    j.first[0] = 0;
    for (size_t i = 0; i < count; i++) {
        j.first[i + 1] = j.first[i] + (read_values(&reads[i]) + H3K_READ_UNIT - 1) / H3K_READ_UNIT;
        bytes += reads[i].length;
    }
    if (j.first[count] > (size_t)INT32_MAX) { /* 2^31 units of 128 Ki values: not a real file */
        H3K_FREE(j.first);
        return H3K_EINVAL;
    }
    double t0 = now_seconds();
    if (j.first[count]) h3k_pool_run(read_part, &j, h3k_pool_parts(threads, j.first[count]), 0);
    H3K_FREE(j.first);
    mutex_lock(&s->lock);
    s->read_s += now_seconds() - t0;
    if (j.status == H3K_OK) s->bytes_read += bytes;
    mutex_unlock(&s->lock);
    return j.status;
}
