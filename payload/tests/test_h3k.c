/* test_h3k.c -- C unit tests for h3k.c, built with the library's source and
 * run by tests/test_native_c.py (also under AddressSanitizer and
 * UndefinedBehaviorSanitizer). Usage: test_h3k SCRATCH_DIR
 * Prints one line per failure and "ok N" at the end; exit 1 on failure. */
#include "../h3k.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void test_selftest(void) {
    char msg[256];
    int n = 0, st = h3k_selftest(&n, msg, sizeof msg);
    CHECK(st == H3K_OK, "selftest: %s", msg);
    CHECK(n > 20, "selftest ran only %d checks", n);
}

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

static int write_file(const char *path, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    for (size_t i = 0; i < size; i++) fputc((int)(i * 7 % 251), f);
    return fclose(f) == 0;
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
    const char *dir = argc > 1 ? argv[1] : ".";
    test_selftest();
    test_bad_shapes();
    test_streamer(dir);
    test_arena_lock();
    test_plan();
    printf("%s %d checks, %d failures\n", failures ? "FAILED" : "ok", checks, failures);
    return failures ? 1 : 0;
}
