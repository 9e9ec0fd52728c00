/* test_h3k.c -- C unit tests for the library (every unit of payload/), built with them and
 * run by tests/test_native_c.py (under AddressSanitizer with
 * UndefinedBehaviorSanitizer, and under ThreadSanitizer), as is the self-test
 * program (selftest.c) built the same way.
 * Usage: test_h3k SCRATCH_DIR   runs every test (H3K_TEST_NO_FORK=1: all but fork)
 *        test_h3k --cpu-count   prints h3k_cpu_count() (checked under taskset)
 * Prints one line per failure and "ok N" at the end; exit 1 on failure. */
#if !defined(_WIN32)
#define _GNU_SOURCE /* sched_setaffinity, for the CPU count test */
#endif
#include "../h3k.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#include <windows.h>
#else
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define H3K_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define H3K_TEST_TSAN 1
#endif
#endif

static int failures, checks;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        checks++;                                          \
        if (!(cond)) {                                     \
            failures++;                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
        }                                                  \
    } while (0)

static void test_bad_shapes(void) {
    float x[64] = {0}, y[4];
    unsigned char q[68];
    CHECK(h3k_quant_bytes(H3K_Q8_0, 31) == 0, "31 values accepted");
    CHECK(h3k_quant_bytes(99, 32) == 0, "unknown kind accepted");
    CHECK(h3k_quantize(H3K_Q4_0, NULL, 32, q, sizeof q) == H3K_EINVAL, "NULL input accepted");
    CHECK(h3k_matvec(H3K_Q8_0, q, sizeof q, 2, 33, x, 64, y, 4, 1) == H3K_EINVAL, "cols 33 accepted");
    CHECK(h3k_matvec(H3K_Q8_0, q, sizeof q, 2, 32, x, 31, y, 4, 1) == H3K_EINVAL, "short x accepted");
    CHECK(h3k_matvec(H3K_Q8_0, q, sizeof q, 2, 32, x, 32, y, 1, 1) == H3K_EINVAL, "short y accepted");
    CHECK(h3k_matvec(H3K_Q8_0, q, sizeof q, (size_t)-1, 32, x, 32, y, 4, 1) == H3K_EINVAL,
          "overflowing rows accepted");
    CHECK(h3k_matvec(H3K_Q8_0, q, sizeof q, 2, 32, x, 32, y, 4, 0) == H3K_OK, "all-cores matvec");
    CHECK(h3k_matmul_f32(x, 6, 2, 3, x, 6, 2, y, 4, 1) == H3K_OK && y[0] == 0.0f, "fp32 2x3 product");
    CHECK(h3k_matmul_f32(x, 5, 2, 3, x, 6, 2, y, 4, 1) == H3K_EINVAL, "fp32: short w accepted");
    CHECK(h3k_matmul_f32(x, 6, 2, 3, x, 5, 2, y, 4, 1) == H3K_EINVAL, "fp32: short x accepted");
    CHECK(h3k_matmul_f32(x, 6, 2, 3, x, 6, 2, y, 3, 1) == H3K_EINVAL, "fp32: short y accepted");
    CHECK(h3k_matmul_f32(x, 6, 0, 3, x, 6, 2, y, 4, 1) == H3K_EINVAL, "fp32: 0 rows accepted");
    CHECK(h3k_matmul_f32(x, 64, (size_t)-1, 2, x, 64, 1, y, 4, 1) == H3K_EINVAL,
          "fp32: overflowing rows accepted");
    CHECK(h3k_matmul_f32(NULL, 6, 2, 3, x, 6, 2, y, 4, 1) == H3K_EINVAL, "fp32: NULL w accepted");
    size_t n = 0;
    CHECK(h3k_tile_starts(100, 32, 32, NULL, 0, &n) == H3K_EINVAL, "overlap == tile accepted");
    CHECK(h3k_tile_starts(100, 32, 8, NULL, 0, &n) == H3K_OK && n == 4, "tile count %zu", n);
}

/* NaN counts as 0 and +-Inf as the extreme code, in the quantizers and in
 * the int16 activations of the products: defined results, no UB (the
 * sanitizer build has -fsanitize=float-cast-overflow to prove it). */
static void test_nonfinite_quantize(void) {
    float x[64], y[64];
    unsigned char q[68];
    for (int i = 0; i < 64; i++) x[i] = 0.5f;
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -INFINITY;
    x[3] = 2.0f; /* the largest finite magnitude sets the scale */
    x[4] = -1.0f;
    for (int i = 32; i < 64; i++) x[i] = NAN; /* a block with no finite value at all */
    CHECK(h3k_quantize(H3K_Q8_0, x, 64, q, sizeof q) == H3K_OK, "q8_0 quantize with NaN/Inf");
    CHECK((signed char)q[2] == 0 && (signed char)q[3] == 127 && (signed char)q[4] == -127 &&
              (signed char)q[5] == 127,
          "q8_0 codes of NaN, +Inf, -Inf, max: %d %d %d %d", (signed char)q[2], (signed char)q[3],
          (signed char)q[4], (signed char)q[5]);
    CHECK(h3k_dequantize(H3K_Q8_0, q, sizeof q, y, 64) == H3K_OK, "q8_0 dequantize");
    CHECK(y[0] == 0.0f && y[1] == y[3] && y[2] == -y[3] && fabsf(y[3] - 2.0f) < 0.01f,
          "q8_0 NaN/Inf decode to %g %g %g (max %g)", y[0], y[1], y[2], y[3]);
    int zeros = 1;
    for (int i = 32; i < 64; i++) zeros &= y[i] == 0.0f;
    CHECK(zeros, "q8_0: an all-NaN block decodes to zeros");
    CHECK(h3k_quantize(H3K_Q4_0, x, 64, q, sizeof q) == H3K_OK, "q4_0 quantize with NaN/Inf");
    CHECK(h3k_dequantize(H3K_Q4_0, q, sizeof q, y, 64) == H3K_OK, "q4_0 dequantize");
    /* d = 2 / -8: nibble 0 is +2 (the largest value), nibble 15 is 7d = -1.75 */
    CHECK(y[0] == 0.0f && y[1] == 2.0f && y[2] == -1.75f && y[3] == 2.0f,
          "q4_0 NaN/Inf decode to %g %g %g (max %g)", y[0], y[1], y[2], y[3]);
    zeros = 1;
    for (int i = 32; i < 64; i++) zeros &= y[i] == 0.0f;
    CHECK(zeros, "q4_0: an all-NaN block decodes to zeros");
    /* A block so small that 1/d overflows to Inf: every code still defined. */
    for (int i = 0; i < 32; i++) x[i] = i % 2 ? 1e-38f : 0.0f;
    CHECK(h3k_quantize(H3K_Q8_0, x, 32, q, 34) == H3K_OK && h3k_dequantize(H3K_Q8_0, q, 34, y, 32) == H3K_OK &&
              isfinite(y[1]),
          "q8_0 of a tiny block");
    CHECK(h3k_quantize(H3K_Q4_0, x, 32, q, 18) == H3K_OK && h3k_dequantize(H3K_Q4_0, q, 18, y, 32) == H3K_OK &&
              isfinite(y[1]),
          "q4_0 of a tiny block");
}

/* Products see NaN activations as 0 and +-Inf as +-(the block's largest
 * finite magnitude): the same result, bit for bit, as those finite values. */
static void test_nonfinite_products(void) {
    enum { R = 19, C = 96, B = 2 };
    static float w[R * C], x[B * C], xf[B * C], y[B * R], yf[B * R], yr[R];
    static unsigned char q[R * C / 32 * 34];
    unsigned s = 1;
    for (int i = 0; i < R * C; i++) w[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 0xff) / 128.0f - 1.0f;
    for (int i = 0; i < B * C; i++) x[i] = xf[i] = (float)(i % 7) - 3.0f; /* block maximum 3 */
    x[1] = NAN, xf[1] = 0.0f;
    x[40] = INFINITY, xf[40] = 3.0f;
    x[70] = -INFINITY, xf[70] = -3.0f;
    for (int i = C; i < C + 32; i++) x[i] = NAN, xf[i] = 0.0f; /* a whole block of NaN */
    x[C + 33] = INFINITY, xf[C + 33] = 3.0f;
    int kinds[2] = {H3K_Q8_0, H3K_Q4_0};
    for (int k = 0; k < 2; k++) {
        size_t qb = h3k_quant_bytes(kinds[k], R * C);
        CHECK(h3k_quantize(kinds[k], w, R * C, q, sizeof q) == H3K_OK, "quantize weights");
        for (int t = 1; t <= 2; t++) {
            CHECK(h3k_matvec(kinds[k], q, qb, R, C, x, C, y, R, t) == H3K_OK, "matvec with NaN/Inf");
            CHECK(h3k_matvec(kinds[k], q, qb, R, C, xf, C, yf, R, t) == H3K_OK, "matvec");
            CHECK(memcmp(y, yf, R * sizeof *y) == 0, "kind %d, %d threads: NaN/Inf matvec differs", kinds[k], t);
            CHECK(h3k_matmul(kinds[k], q, qb, R, C, x, B * C, B, y, B * R, t) == H3K_OK, "matmul with NaN/Inf");
            CHECK(h3k_matmul(kinds[k], q, qb, R, C, xf, B * C, B, yf, B * R, t) == H3K_OK, "matmul");
            CHECK(memcmp(y, yf, sizeof y) == 0, "kind %d, %d threads: NaN/Inf matmul differs", kinds[k], t);
        }
        CHECK(h3k_matvec_reference(kinds[k], q, qb, R, C, x, C, yr, R) == H3K_OK, "reference with NaN/Inf");
        int finite = 1;
        for (int r = 0; r < R; r++) finite &= isfinite(yr[r]) && isfinite(y[r]);
        CHECK(finite, "kind %d: NaN/Inf activations gave a non-finite output", kinds[k]);
    }
}

/* Tile accumulate/finish check every buffer length like extract does: one
 * element short is refused and nothing is written. Buffers are exact-size
 * heap blocks, so an unchecked access would trip AddressSanitizer. */
static void test_tile_lengths(void) {
    enum { C = 2, H = 9, W = 11, T = 6, O = 2 };
    float *img = calloc(C * H * W, sizeof(float)), *acc = calloc(C * H * W, sizeof(float));
    float *wgt = calloc(H * W, sizeof(float)), *tile = calloc(C * T * T, sizeof(float));
    if (!img || !acc || !wgt || !tile) {
        CHECK(0, "out of memory");
        goto done;
    }
    for (int i = 0; i < C * H * W; i++) img[i] = (float)(i % 13) - 6.0f;
    size_t ys[4], xs[4], ny = 0, nx = 0;
    CHECK(h3k_tile_starts(H, T, O, ys, 4, &ny) == H3K_OK && h3k_tile_starts(W, T, O, xs, 4, &nx) == H3K_OK,
          "tile starts");
    CHECK(h3k_tile_extract(img, C, H, W, 0, 0, T, T, tile, C * T * T) == H3K_OK, "extract");
    CHECK(h3k_tile_accumulate(acc, C * H * W - 1, wgt, H * W, C, H, W, tile, C * T * T, 0, 0, T, T, O) ==
              H3K_EINVAL, "accumulate: short acc accepted");
    CHECK(h3k_tile_accumulate(acc, C * H * W, wgt, H * W - 1, C, H, W, tile, C * T * T, 0, 0, T, T, O) ==
              H3K_EINVAL, "accumulate: short weight accepted");
    CHECK(h3k_tile_accumulate(acc, C * H * W, wgt, H * W, C, H, W, tile, C * T * T - 1, 0, 0, T, T, O) ==
              H3K_EINVAL, "accumulate: short tile accepted");
    CHECK(h3k_tile_accumulate(acc, C * H * W, wgt, H * W, C, H, W, tile, C * T * T, H - T + 1, 0, T, T, O) ==
              H3K_EINVAL, "accumulate: tile past the bottom edge accepted");
    CHECK(h3k_tile_accumulate(NULL, C * H * W, wgt, H * W, C, H, W, tile, C * T * T, 0, 0, T, T, O) ==
              H3K_EINVAL, "accumulate: NULL acc accepted");
    int untouched = 1;
    for (int i = 0; i < H * W; i++) untouched &= wgt[i] == 0.0f && acc[i] == 0.0f;
    CHECK(untouched, "a refused accumulate wrote to the buffers");
    CHECK(h3k_tile_finish(acc, C * H * W - 1, wgt, H * W, C, H, W) == H3K_EINVAL, "finish: short acc accepted");
    CHECK(h3k_tile_finish(acc, C * H * W, wgt, H * W - 1, C, H, W) == H3K_EINVAL, "finish: short weight accepted");
    CHECK(h3k_tile_finish(acc, C * H * W, NULL, H * W, C, H, W) == H3K_EINVAL, "finish: NULL weight accepted");
    /* Exact sizes work, and the blend gives the image back. */
    int st = H3K_OK;
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nx; j++) {
            st |= h3k_tile_extract(img, C, H, W, ys[i], xs[j], T, T, tile, C * T * T);
            st |= h3k_tile_accumulate(acc, C * H * W, wgt, H * W, C, H, W, tile, C * T * T, ys[i], xs[j], T, T, O);
        }
    st |= h3k_tile_finish(acc, C * H * W, wgt, H * W, C, H, W);
    float worst = 0.0f;
    for (int i = 0; i < C * H * W; i++) worst = fabsf(acc[i] - img[i]) > worst ? fabsf(acc[i] - img[i]) : worst;
    CHECK(st == H3K_OK && worst < 1e-5f, "tile round trip: status %d, error %g", st, worst);
done:
    free(img);
    free(acc);
    free(wgt);
    free(tile);
}

/* The thread count follows the affinity mask: pinned to one CPU, one. */
static void test_cpu_count_affinity(void) {
#if defined(__linux__)
    cpu_set_t saved, one;
    if (sched_getaffinity(0, sizeof saved, &saved) != 0) return;
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &saved)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) return; /* not allowed here: nothing to test */
    int n = h3k_cpu_count();
    sched_setaffinity(0, sizeof saved, &saved);
    CHECK(n == 1, "pinned to CPU %d, h3k_cpu_count() is %d", first, n);
    CHECK(h3k_cpu_count() == CPU_COUNT(&saved), "after unpinning: %d, mask has %d", h3k_cpu_count(),
          CPU_COUNT(&saved));
#endif
}

/* ------------------------------------------------------------ thread pool */

enum { PR = 301, PC = 256 }; /* rows not a multiple of any thread count */
static float pool_w[PR * PC], pool_x[PC], pool_ref[PR];
static unsigned char pool_q[PR * PC / 32 * 34];

static void pool_setup(void) {
    unsigned s = 7;
    for (int i = 0; i < PR * PC; i++) pool_w[i] = (float)((s = s * 1103515245u + 12345u) >> 16 & 0x3ff) / 512.0f - 1.0f;
    for (int i = 0; i < PC; i++) pool_x[i] = (float)(i % 11) / 5.0f - 1.0f;
    CHECK(h3k_quantize(H3K_Q8_0, pool_w, PR * PC, pool_q, sizeof pool_q) == H3K_OK, "pool: quantize");
    CHECK(h3k_matvec(H3K_Q8_0, pool_q, sizeof pool_q, PR, PC, pool_x, PC, pool_ref, PR, 1) == H3K_OK,
          "pool: one-thread matvec");
}

/* A threaded product equals the one-thread result bit for bit. */
static int pool_product_ok(int threads) {
    float y[PR];
    if (h3k_matvec(H3K_Q8_0, pool_q, sizeof pool_q, PR, PC, pool_x, PC, y, PR, threads) != H3K_OK) return 0;
    return memcmp(y, pool_ref, sizeof y) == 0;
}

#if !defined(_WIN32)
static void *pool_caller(void *arg) {
    intptr_t bad = 0, id = (intptr_t)arg;
    for (int i = 0; i < 200; i++) bad += !pool_product_ok(1 + (int)((id + i) % 4));
    return (void *)bad;
}
#endif

static void test_pool(void) {
    pool_setup();
    int cpus = h3k_cpu_count(), most = cpus < 256 ? cpus - 1 : 255;
    h3k_pool_shutdown();
    CHECK(h3k_pool_threads() == 0, "shutdown left %d workers", h3k_pool_threads());
    CHECK(pool_product_ok(3), "3-thread matvec differs");
    CHECK(h3k_pool_threads() == (cpus < 3 ? cpus : 3) - 1, "a 3-thread product on %d CPUs started %d workers",
          cpus, h3k_pool_threads());
    for (int t = 1; t <= 9; t++) CHECK(pool_product_ok(t), "%d-thread matvec differs", t);
    /* Products of 2 rows (2 threads) between all-CPU ones: on a machine of
     * 3+ CPUs the workers taking part change from task to task. */
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        float y2[2];
        bad += !pool_product_ok(0);
        bad += h3k_matvec(H3K_Q8_0, pool_q, sizeof pool_q / PR * 2, 2, PC, pool_x, PC, y2, 2, 0) != H3K_OK ||
               memcmp(y2, pool_ref, sizeof y2) != 0;
    }
    CHECK(bad == 0, "%d wrong products when the thread count changes between tasks", bad);
    CHECK(pool_product_ok(0) && pool_product_ok(1000), "all-CPU matvec differs");
    CHECK(h3k_pool_threads() == most, "%d CPUs but %d workers (one per CPU but the caller's expected)", cpus,
          h3k_pool_threads());
#if !defined(_WIN32)
    /* Several callers at once share the one pool (their tasks queue). */
    pthread_t callers[4];
    int started = 0;
    for (int i = 0; i < 4; i++) started += pthread_create(&callers[i], NULL, pool_caller, (void *)(intptr_t)i) == 0;
    CHECK(started == 4, "started %d caller threads", started);
    for (int i = 0; i < started; i++) {
        void *bad = NULL;
        pthread_join(callers[i], &bad);
        CHECK(bad == NULL, "caller %d: %ld wrong products", i, (long)(intptr_t)bad);
    }
#endif
#if !defined(_WIN32) && !defined(H3K_TEST_TSAN) /* TSan does not follow threads across fork */
    /* A forked child has none of the parent's workers: its products must
     * still run (and not wait forever for workers that are not there).
     * H3K_TEST_NO_FORK skips this where fork itself is broken: qemu-user
     * 7.2 aborts a forked child that starts a thread. */
    if (getenv("H3K_TEST_NO_FORK")) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(30); /* a hang becomes a failure, not a stuck test run */
        _exit(pool_product_ok(2) && pool_product_ok(0) ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "threaded product in a forked child failed (status %d)", status);
    CHECK(pool_product_ok(2), "the parent's pool broke after fork");
#endif
}

static int write_file(const char *path, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    for (size_t i = 0; i < size; i++) fputc((int)(i * 7 % 251), f);
    return fclose(f) == 0;
}

static float unit_rand(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / 16777216.0f;
}

static int read1(h3k_streamer *s, uint64_t off, uint64_t len, int file_type, void *dst, size_t size,
                 int dst_type, int threads) {
    h3k_read r = {off, len, dst, size, file_type, dst_type};
    return h3k_streamer_read(s, &r, 1, threads);
}

/* Direct reads: bf16 and fp16 widened to fp32 in place across several units
 * and threads, a same-type read, advice, and each refusal. */
static void test_direct_read(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/direct.bin", dir);
    size_t n = 300000 + 5; /* more than two 128 Ki-value units, and an odd tail */
    uint16_t *bf = malloc(n * 2), *hf = malloc(n * 2);
    float *want_bf = malloc(n * 4), *want_hf = malloc(n * 4), *got = malloc(n * 4 + 64);
    CHECK(bf && hf && want_bf && want_hf && got, "allocation");
    if (!bf || !hf || !want_bf || !want_hf || !got) return;
    uint32_t seed = 7;
    for (size_t i = 0; i < n; i++) {
        float v = (unit_rand(&seed) - 0.5f) * (i % 97 == 0 ? 1e5f : 3.0f);
        uint32_t x;
        memcpy(&x, &v, 4);
        bf[i] = (uint16_t)(x >> 16);
        x = (uint32_t)bf[i] << 16;
        memcpy(&want_bf[i], &x, 4);
        hf[i] = h3k_fp32_to_fp16(v);
        want_hf[i] = h3k_fp16_to_fp32(hf[i]);
    }
    hf[3] = 0x7c00u; /* inf */
    want_hf[3] = h3k_fp16_to_fp32(hf[3]);
    hf[4] = 0x0001u; /* the smallest subnormal */
    want_hf[4] = h3k_fp16_to_fp32(hf[4]);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite("head", 1, 4, f) == 4 && fwrite(bf, 2, n, f) == n && fwrite(hf, 2, n, f) == n,
          "cannot write %s", path);
    if (f) fclose(f);
    h3k_streamer *s = NULL;
    CHECK(h3k_streamer_open(&s, path, 65536, 1) == H3K_OK && s, "open");
    if (!s) return;
    uint64_t bf_at = 4, hf_at = 4 + 2 * n;
    CHECK(h3k_streamer_advise(s, bf_at, 4 * n) == H3K_OK, "advise");
    CHECK(h3k_streamer_advise(s, 0, 4 * n + 5) == H3K_ERANGE, "advice past the end accepted");
    for (int threads = 1; threads <= 3; threads += 2) {
        memset(got, 0xff, n * 4);
        CHECK(read1(s, bf_at, 2 * n, H3K_BF16, got, n * 4, H3K_F32, threads) == H3K_OK,
              "bf16 read: %s", h3k_streamer_last_error(s));
        CHECK(memcmp(got, want_bf, n * 4) == 0, "bf16 widened wrongly (%d threads)", threads);
        CHECK(read1(s, hf_at, 2 * n, H3K_F16, got, n * 4 + 64, H3K_F32, threads) == H3K_OK,
              "fp16 read");
        CHECK(memcmp(got, want_hf, n * 4) == 0, "fp16 widened wrongly (%d threads)", threads);
    }
    /* Both halves in one call (one task for the pool); then a batch whose second read is wrong: refused
     * before the first one writes anything. */
    float *got2 = malloc(n * 4);
    CHECK(got2 != NULL, "allocation");
    if (got2) {
        h3k_read two[2] = {{hf_at, 2 * n, got2, n * 4, H3K_F16, H3K_F32}, {bf_at, 2 * n, got, n * 4, H3K_BF16, H3K_F32}};
        memset(got, 0, n * 4);
        memset(got2, 0, n * 4);
        CHECK(h3k_streamer_read(s, two, 2, 0) == H3K_OK && memcmp(got, want_bf, n * 4) == 0 &&
                  memcmp(got2, want_hf, n * 4) == 0, "two reads in one call");
        memset(got2, 0, n * 4);
        two[1].dst_size = 8;
        CHECK(h3k_streamer_read(s, two, 2, 0) == H3K_EINVAL && strstr(h3k_streamer_last_error(s), "read 1") != NULL,
              "a bad read in a batch: %s", h3k_streamer_last_error(s));
        size_t touched = 0;
        for (size_t i = 0; i < n; i++) touched += got2[i] != 0.0f;
        CHECK(touched == 0, "a refused batch wrote %zu values", touched);
        CHECK(h3k_streamer_read(s, NULL, 0, 0) == H3K_OK && h3k_streamer_read(s, NULL, 1, 0) == H3K_EINVAL,
              "empty batch / NULL reads");
        free(got2);
    }
    memset(got, 0, n * 2);
    CHECK(read1(s, bf_at, 2 * n, H3K_BF16, got, n * 2, H3K_BF16, 0) == H3K_OK &&
              memcmp(got, bf, n * 2) == 0, "same-type read");
    CHECK(read1(s, bf_at, 0, H3K_BF16, NULL, 0, H3K_F32, 0) == H3K_OK, "empty read");
    CHECK(read1(s, bf_at, 2 * n, H3K_BF16, got, n * 4 - 1, H3K_F32, 0) == H3K_EINVAL,
          "small buffer accepted");
    CHECK(read1(s, bf_at, 3, H3K_BF16, got, 64, H3K_F32, 0) == H3K_EINVAL, "odd length");
    CHECK(read1(s, 0, 8, H3K_F32, got, 64, H3K_BF16, 0) == H3K_EINVAL, "narrowing accepted");
    CHECK(read1(s, 0, 8, H3K_Q8_0, got, 64, H3K_F32, 0) == H3K_EINVAL, "q8_0 accepted");
    CHECK(read1(s, hf_at, 2 * n + 2, H3K_F16, got, n * 4 + 64, H3K_F32, 0) == H3K_ERANGE,
          "read past the end accepted");
    uint64_t bytes = 0;
    double rd = -1;
    h3k_streamer_stats(s, &bytes, NULL, &rd, NULL);
    CHECK(bytes == 4 * 2 * n + 2 * n + 4 * n && rd >= 0, "stats count direct reads: %llu", (unsigned long long)bytes);
    f = fopen(path, "wb"); /* the file shrinks under an open streamer */
    if (f) fclose(f);
    int st = read1(s, bf_at, 2 * n, H3K_BF16, got, n * 4, H3K_F32, 0);
    CHECK(st == H3K_ERANGE && strstr(h3k_streamer_last_error(s), "direct.bin") != NULL,
          "shrunk file gave %d: %s", st, h3k_streamer_last_error(s));
    h3k_streamer_close(s);
    free(bf), free(hf), free(want_bf), free(want_hf), free(got);
}

static void test_streamer(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/stream.bin", dir);
    size_t size = 3 * 65536 + 123;
    CHECK(write_file(path, size), "cannot write %s", path);
    h3k_streamer *s = NULL;
    CHECK(h3k_streamer_open(&s, path, 65536, 2) == H3K_OK && s, "open");
    if (!s) return;
    CHECK(h3k_streamer_file_size(s) == size, "file size");
    CHECK(h3k_streamer_submit(s, 100, size) == H3K_ERANGE, "range past EOF accepted");
    CHECK(strstr(h3k_streamer_last_error(s), "past the end") != NULL, "message: %s",
          h3k_streamer_last_error(s));
    CHECK(h3k_streamer_submit(s, 10, size - 10) == H3K_OK, "submit whole file");
    CHECK(h3k_streamer_submit(s, 5, 3) == H3K_OK, "submit a small range");
    const void *data;
    size_t len, total = 0;
    uint64_t off, expect = 10;
    int st, bad = 0, chunks = 0;
    while ((st = h3k_streamer_next(s, &data, &len, &off)) == H3K_OK) {
        chunks++;
        if (chunks == 5) expect = 5; /* the second range */
        if (off != expect) bad++;
        for (size_t i = 0; i < len; i++)
            if (((const unsigned char *)data)[i] != (unsigned char)((off + i) * 7 % 251)) bad++;
        expect = off + len;
        total += len;
    }
    CHECK(st == H3K_END, "stream ended with %d", st);
    CHECK(bad == 0 && chunks == 5 && total == size - 10 + 3, "content: bad %d chunks %d total %zu",
          bad, chunks, total);
    uint64_t bytes = 0, n = 0;
    double wait = -1, rd = -1;
    h3k_streamer_stats(s, &bytes, &wait, &rd, &n);
    CHECK(bytes == total && n == 5 && wait >= 0 && rd >= 0, "stats");
    h3k_streamer_close(s);

    /* Past the page cache: unaligned ranges, one to the file's odd end, the same bytes back. */
    CHECK(h3k_streamer_open(&s, path, 65536, 2) == H3K_OK, "reopen uncached");
    st = h3k_streamer_bypass_cache(s);
    CHECK(st == H3K_OK || st == H3K_EUNSUPPORTED, "bypass gave %d: %s", st, h3k_streamer_last_error(s));
    CHECK(h3k_streamer_bypassing(s) == (st == H3K_OK), "bypassing says %d", h3k_streamer_bypassing(s));
    CHECK(h3k_streamer_submit(s, 4097, size - 4097) == H3K_OK && h3k_streamer_submit(s, 1, 9) == H3K_OK,
          "submit uncached");
    bad = 0, total = 0;
    while ((st = h3k_streamer_next(s, &data, &len, &off)) == H3K_OK) {
        for (size_t i = 0; i < len; i++)
            if (((const unsigned char *)data)[i] != (unsigned char)((off + i) * 7 % 251)) bad++;
        total += len;
    }
    CHECK(st == H3K_END && bad == 0 && total == size - 4097 + 9, "uncached content: bad %d total %zu", bad, total);
    h3k_streamer_close(s);

    /* The file shrinks after the range was accepted: an error, not a crash. */
    CHECK(h3k_streamer_open(&s, path, 65536, 3) == H3K_OK, "reopen");
    CHECK(h3k_streamer_submit(s, 0, size) == H3K_OK, "submit");
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    st = H3K_OK;
    for (int i = 0; i < 10 && st == H3K_OK; i++) st = h3k_streamer_next(s, &data, &len, &off);
    CHECK(st == H3K_ERANGE || st == H3K_EIO, "truncated file gave %d", st);
    h3k_streamer_close(s);
    snprintf(path, sizeof path, "%s/does-not-exist.bin", dir);
    CHECK(h3k_streamer_open(&s, path, 65536, 2) == H3K_EIO && s == NULL, "missing file");
}

/* ------------------------------------------------ last-error text races */

#if !defined(_WIN32)
/* One thread keeps failing calls on a handle, each setting one of two
 * messages, while this one reads *_last_error: every text read must be one
 * of the two, whole (the ThreadSanitizer build also sees the accesses). */
typedef struct {
    h3k_arena *a;
    h3k_streamer *s;
    atomic_int stop;
} err_race;

static void *err_writer(void *arg) {
    err_race *r = (err_race *)arg;
    uint64_t size = r->s ? h3k_streamer_file_size(r->s) : 0;
    for (int i = 0; !atomic_load(&r->stop) && i < 200000; i++) {
        if (r->a) {
            (void)h3k_arena_alloc(r->a, i % 2 ? (size_t)8 << 20 : 8, i % 2 ? 64 : 3);
        } else {
            (void)h3k_streamer_submit(r->s, i % 2 ? size + 1 : 0, size + 1);
        }
    }
    return NULL;
}

static int read_errors(err_race *r, const char *m1, const char *m2, int rounds) {
    int torn = 0;
    char copy[300];
    for (int i = 0; i < rounds; i++) {
        const char *e = r->a ? h3k_arena_last_error(r->a) : h3k_streamer_last_error(r->s);
        snprintf(copy, sizeof copy, "%s", e);
        if (copy[0] && strcmp(copy, m1) != 0 && strcmp(copy, m2) != 0 && torn++ == 0)
            printf("torn last-error text: '%s'\n", copy);
    }
    return torn;
}

static void test_last_error_race(const char *dir) {
    err_race r = {NULL, NULL, 0};
    atomic_init(&r.stop, 0);
    pthread_t t;
    CHECK(h3k_arena_open(&r.a, 1 << 20, 0) == H3K_OK, "arena open");
    if (r.a && pthread_create(&t, NULL, err_writer, &r) == 0) {
        int torn = read_errors(&r, "alignment 3 is not a power of two",
                               "arena full: asked for 8388608 bytes aligned to 64 with 0 of 1048576 bytes used",
                               20000);
        atomic_store(&r.stop, 1);
        pthread_join(t, NULL);
        CHECK(torn == 0, "arena: %d torn last-error reads", torn);
    }
    h3k_arena_close(r.a);
    char path[1024], m1[1200], m2[1200];
    snprintf(path, sizeof path, "%s/errrace.bin", dir);
    CHECK(write_file(path, 100), "cannot write %s", path);
    r.a = NULL;
    atomic_store(&r.stop, 0);
    CHECK(h3k_streamer_open(&r.s, path, 65536, 2) == H3K_OK, "streamer open");
    snprintf(m1, sizeof m1, "range at offset 0 of 101 bytes ends past the end of %s (100 bytes)", path);
    snprintf(m2, sizeof m2, "range at offset 101 of 101 bytes ends past the end of %s (100 bytes)", path);
    m1[255] = m2[255] = '\0'; /* the handle keeps 255 characters */
    if (r.s && pthread_create(&t, NULL, err_writer, &r) == 0) {
        int torn = read_errors(&r, m1, m2, 20000);
        atomic_store(&r.stop, 1);
        pthread_join(t, NULL);
        CHECK(torn == 0, "streamer: %d torn last-error reads", torn);
    }
    h3k_streamer_close(r.s);
}
#endif

static void test_arena_lock(void) {
    h3k_arena *a = NULL;
    CHECK(h3k_arena_open(&a, 3 * 4096 + 1, H3K_ARENA_LOCK) == H3K_OK, "open");
    if (!a) return;
    CHECK(h3k_arena_capacity(a) == 4 * 4096, "capacity rounded to pages");
    CHECK(h3k_arena_locked(a) || h3k_arena_last_error(a)[0], "unlocked without a reason");
    CHECK(h3k_arena_alloc(a, 8, 3) == NULL, "alignment 3 accepted");
    h3k_arena_close(a);
    CHECK(h3k_arena_open(&a, 0, 0) == H3K_EINVAL && a == NULL, "zero capacity accepted");
}

static void test_plan(void) {
    size_t rs = 0;
    int depth = 0;
    CHECK(h3k_streamer_plan(4ull << 30, 8ull << 30, &rs, &depth) == H3K_OK, "plan");
    CHECK(rs == (64u << 20) && depth == 8, "big shard: %zu x %d", rs, depth);
    CHECK(h3k_streamer_plan(100u << 20, 0, &rs, &depth) == H3K_OK && depth == 2 && rs == (6u << 20),
          "no preload: %zu x %d", rs, depth);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--cpu-count") == 0) { /* for tests/test_native_c.py under taskset */
        printf("%d\n", h3k_cpu_count());
        return 0;
    }
    const char *dir = argc > 1 ? argv[1] : ".";
    test_bad_shapes();
    test_nonfinite_quantize();
    test_nonfinite_products();
    test_tile_lengths();
    test_cpu_count_affinity();
    test_pool();
    test_streamer(dir);
    test_direct_read(dir);
    test_arena_lock();
#if !defined(_WIN32)
    test_last_error_race(dir);
#endif
    test_plan();
    h3k_pool_shutdown(); /* join the workers, so the leak checker sees a clean exit */
    printf("%s %d checks, %d failures\n", failures ? "FAILED" : "ok", checks, failures);
    return failures ? 1 : 0;
}
