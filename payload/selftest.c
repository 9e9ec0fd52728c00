/* selftest.c -- h3k-selftest, the program `h3kit build` runs against every
 * variant of the library before that build becomes current, and that the
 * deployed node pack's calibration runs on the user's machine: known bytes
 * of hand-computed blocks, round-trip bounds, the build's kernels against
 * the scalar one, threads against one thread, the fp32 product against
 * double math, the arena and the tiles.
 *
 * Usage: h3k-selftest-<variant>   (linked against libh3kit-<variant> beside it)
 * Prints one JSON line, {"passed", "checks", "variant", "message"}, and
 * exits 0 when every check passed, 1 when one failed, 2 when this CPU lacks
 * features the build needs (nothing else is checked then, so a tuned
 * build on an older CPU reads as skipped, not failed).
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - A client of the library: h3k.h only, never the internal header, and
 *     linked against the shared library itself (found beside the program:
 *     rpath $ORIGIN, @loader_path, or Windows' own folder-first search), so
 *     it checks exactly the file a caller loads.
 *   - A program, not a call of the library: the library exports only what
 *     its callers use, and a check that crashes takes down this process,
 *     not the caller's.
 *   - Compiled without the variant's SIMD flags, so on a CPU that lacks them
 *     it gets as far as saying so.
 *
 * Left out on purpose
 * -------------------
 *   - Anything slow or that touches files: the streamer, the pool's fork and
 *     race tests are in tests/test_h3k.c, run under the sanitizers.
 */

#include "h3k.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define H3K_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define H3K_PRINTF(f, a)
#endif

typedef struct {
    int checks;
    char *msg;
    size_t cap;
    int failed;
} selftest_state;

static void H3K_PRINTF(3, 4) check(selftest_state *t, int ok, const char *fmt, ...) {
    t->checks++;
    if (ok || t->failed) return;
    t->failed = 1;
    if (t->msg && t->cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->msg, t->cap, fmt, ap);
        va_end(ap);
    }
}

/* xorshift32 in [-1, 1): local state, so the test stays reentrant. */
static float next_rand(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

static void selftest_fp16(selftest_state *t) {
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65520.0f, 0x7c00},
        {0.1f, 0x2e66}, {5.9604644775390625e-08f, 0x0001}, {2.98023223876953125e-08f, 0x0000},
        {4.5e-08f, 0x0001}, {0.0f, 0x0000}, {6.103515625e-05f, 0x0400}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = h3k_fp32_to_fp16(cases[i].f);
        check(t, h == cases[i].h, "fp16 of %g is 0x%04x, expected 0x%04x", (double)cases[i].f,
              h, cases[i].h);
        if (cases[i].h != 0x7c00)
            check(t, h3k_fp16_to_fp32(h) == h3k_fp16_to_fp32(cases[i].h), "fp16 round trip of %g",
                  (double)cases[i].f);
    }
}

/* Known bytes of two hand-computed blocks, then round-trip error bounds. */
static void selftest_quant(selftest_state *t) {
    float x[64] = {0};
    uint8_t q[68];
    x[0] = 127.0f;
    h3k_quantize(H3K_Q8_0, x, 32, q, sizeof q);
    check(t, q[0] == 0x00 && q[1] == 0x3c && q[2] == 127 && q[3] == 0, "q8_0 known block");
    x[0] = -8.0f;
    h3k_quantize(H3K_Q4_0, x, 32, q, sizeof q);
    check(t, q[0] == 0x00 && q[1] == 0x3c && q[2] == 0x80 && q[3] == 0x88, "q4_0 known block");
    uint32_t seed = 12345;
    for (int i = 0; i < 64; i++) x[i] = next_rand(&seed) * 3.0f;
    float y[64];
    int kinds[2] = {H3K_Q8_0, H3K_Q4_0};
    for (int k = 0; k < 2; k++) {
        int st = h3k_quantize(kinds[k], x, 64, q, sizeof q);
        st |= h3k_dequantize(kinds[k], q, sizeof q, y, 64);
        float worst = 0.0f;
        for (int i = 0; i < 64; i++) worst = fabsf(y[i] - x[i]) > worst ? fabsf(y[i] - x[i]) : worst;
        /* amax is at most 3: q8 error <= d/2 = 3/254, q4 error <= d = 3/8 (plus fp16 slack) */
        float bound = kinds[k] == H3K_Q8_0 ? 0.0125f : 0.4f;
        check(t, st == H3K_OK && worst <= bound, "kind %d round trip error %g > %g", kinds[k],
              (double)worst, (double)bound);
    }
    check(t, h3k_quantize(H3K_Q8_0, x, 33, q, sizeof q) == H3K_EINVAL, "n %% 32 != 0 refused");
    check(t, h3k_quantize(H3K_Q8_0, x, 64, q, 67) == H3K_EINVAL, "short output refused");
}

/* The build's kernels against the scalar reference, threads against one. */
static void selftest_products(selftest_state *t) {
    enum { R = 37, C = 96, B = 3 };
    float w[R * C], x[B * C], y_ref[R], y[R], y_mt[R], y_mm[B * R];
    uint8_t q[R * C / 32 * 34];
    uint32_t seed = 777;
    for (int i = 0; i < R * C; i++) w[i] = next_rand(&seed);
    for (int i = 0; i < B * C; i++) x[i] = next_rand(&seed);
    int kinds[2] = {H3K_Q8_0, H3K_Q4_0};
    for (int k = 0; k < 2; k++) {
        size_t qb = h3k_quant_bytes(kinds[k], R * C);
        int st = h3k_quantize(kinds[k], w, R * C, q, sizeof q);
        st |= h3k_matvec_reference(kinds[k], q, qb, R, C, x, C, y_ref, R);
        st |= h3k_matvec(kinds[k], q, qb, R, C, x, C, y, R, 1);
        st |= h3k_matvec(kinds[k], q, qb, R, C, x, C, y_mt, R, 3);
        st |= h3k_matmul(kinds[k], q, qb, R, C, x, B * C, B, y_mm, B * R, 2);
        float worst = 0.0f;
        int same = 1;
        for (int r = 0; r < R; r++) {
            float e = fabsf(y[r] - y_ref[r]) / (1.0f + fabsf(y_ref[r]));
            worst = e > worst ? e : worst;
            same &= y[r] == y_mt[r] && y[r] == y_mm[r];
        }
        check(t, st == H3K_OK, "kind %d product status %d", kinds[k], st);
        check(t, worst < 1e-4f, "kind %d %s kernel differs from scalar by %g", kinds[k],
              h3k_variant(), (double)worst);
        check(t, same, "kind %d threaded or batched result differs from one thread", kinds[k]);
    }
    check(t, h3k_matvec(H3K_Q8_0, q, 10, R, C, x, C, y, R, 1) == H3K_EINVAL, "short weights refused");
    /* fp32 product against a double-precision loop, cols not a multiple of 8 */
    int st = h3k_matmul_f32(w, R * C, R, C - 3, x, B * (C - 3), B, y_mm, B * R, 3);
    float worst = 0.0f;
    for (int b = 0; b < B; b++)
        for (int r = 0; r < R; r++) {
            double ref = 0.0;
            for (int c = 0; c < C - 3; c++) ref += (double)w[r * (C - 3) + c] * x[b * (C - 3) + c];
            float e = fabsf(y_mm[b * R + r] - (float)ref) / (1.0f + fabsf((float)ref));
            worst = e > worst ? e : worst;
        }
    check(t, st == H3K_OK && worst < 1e-5f, "fp32 product differs from double math by %g (status %d)",
          (double)worst, st);
    check(t, h3k_matmul_f32(w, R * C - 1, R, C, x, C, 1, y, R, 1) == H3K_EINVAL,
          "fp32 product: short weights refused");
}

static void selftest_arena(selftest_state *t) {
    h3k_arena *a = NULL;
    int st = h3k_arena_open(&a, 1 << 20, 0);
    check(t, st == H3K_OK && a, "arena open: %s", h3k_strerror(st));
    if (!a) return;
    unsigned char *p1 = (unsigned char *)h3k_arena_alloc(a, 100, 64);
    unsigned char *p2 = (unsigned char *)h3k_arena_alloc(a, 100, 4096);
    check(t, p1 && p2 && ((uintptr_t)p1 % 64) == 0 && ((uintptr_t)p2 % 4096) == 0,
          "arena alignment");
    check(t, h3k_arena_alloc(a, 2 << 20, 64) == NULL && h3k_arena_last_error(a)[0],
          "arena overflow refused with a message");
    size_t peak = h3k_arena_peak(a);
    h3k_arena_reset(a);
    check(t, h3k_arena_used(a) == 0 && h3k_arena_peak(a) == peak && peak >= 4196, "arena stats");
    h3k_arena_close(a);
}

static void selftest_tiles(selftest_state *t) {
    enum { CH = 2, H = 19, W = 23, T = 8, O = 3 };
    float img[CH * H * W], acc[CH * H * W] = {0}, wgt[H * W] = {0}, tile[CH * T * T];
    uint32_t seed = 99;
    for (int i = 0; i < CH * H * W; i++) img[i] = next_rand(&seed);
    size_t ys[16], xs[16], ny = 0, nx = 0;
    int st = h3k_tile_starts(H, T, O, ys, 16, &ny) | h3k_tile_starts(W, T, O, xs, 16, &nx);
    for (size_t i = 0; i < ny; i++)
        for (size_t j = 0; j < nx; j++) {
            st |= h3k_tile_extract(img, CH, H, W, ys[i], xs[j], T, T, tile, sizeof tile / 4);
            st |= h3k_tile_accumulate(acc, CH * H * W, wgt, H * W, CH, H, W, tile, CH * T * T, ys[i],
                                      xs[j], T, T, O);
        }
    st |= h3k_tile_finish(acc, CH * H * W, wgt, H * W, CH, H, W);
    float worst = 0.0f;
    for (int i = 0; i < CH * H * W; i++) worst = fabsf(acc[i] - img[i]) > worst ? fabsf(acc[i] - img[i]) : worst;
    check(t, st == H3K_OK && worst < 1e-5f, "tile split and blend changed the image by %g",
          (double)worst);
}

/* The message as a JSON string body: the check texts are plain ASCII, but a quote or a backslash
 * (or a control byte) must not break the one line the callers parse. */
static void print_json_text(const char *text) {
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else putchar(*c);
    }
}

int main(void) {
    char msg[512] = "";
    selftest_state t = {0, msg, sizeof msg, 0};
    unsigned need = h3k_build_features(), have = h3k_cpu_features();
    int runs_here = (need & have) == need;
    check(&t, runs_here, "this CPU lacks features the %s build needs", h3k_variant());
    if (!t.failed) {
        selftest_fp16(&t);
        selftest_quant(&t);
        selftest_products(&t);
        selftest_arena(&t);
        selftest_tiles(&t);
        h3k_pool_shutdown(); /* join the workers before exit */
    }
    printf("{\"passed\": %s, \"checks\": %d, \"variant\": \"", t.failed ? "false" : "true", t.checks);
    print_json_text(h3k_variant());
    printf("\", \"message\": \"");
    print_json_text(msg);
    printf("\"}\n");
    return !runs_here ? 2 : t.failed ? 1 : 0;
}
