/* products.c -- y = W x and Y = X W^T with quantized weights (h3k_matvec,
 * h3k_matmul, h3k_matvec_reference) and in plain fp32 (h3k_matmul_f32), the
 * rows split over the worker pool.
 *
 * Every size is checked (overflow included) before any memory is touched;
 * the activations are converted to int16 blocks once per call (kernels.c),
 * then each thread takes equal contiguous rows, and one done early takes
 * grains (1/32 of a piece) left in the others, so a thread that lost its
 * CPU for a while holds up a grain, not half the product.
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Each row is computed the same way whichever thread takes it, so
 *     results do not depend on the thread count.
 *   - The fp32 product follows IEEE in a fixed order of additions (eight
 *     interleaved partial sums): the reference the quantized products are
 *     checked against where the caller has no numpy (the installer's own
 *     Python), and the same on every build.
 *
 * Left out on purpose
 * -------------------
 *   - Blocking over batch and rows (a GEMM): the caller's batches are small
 *     and each weight row is already read once for the whole batch.
 */

#include "h3k_internal.h"

/* The next unclaimed grain of one piece's rows, alone on its cache line. */
typedef struct {
    h3k_atomic next;
    char pad[64 - sizeof(h3k_atomic)];
} grain_cursor;

typedef struct {
    int kind, reference;
    const uint8_t *w;
    const float *wf, *xf; /* set for the fp32 product (h3k_matmul_f32) instead of w/xq/xs */
    size_t row_bytes, cols, rows, batch, grain;
    const int16_t *xq;
    const float *xs;
    float *y;
    grain_cursor *cursor; /* one per piece */
} product_job;

/* fp32 dot product in eight interleaved partial sums: a fixed order of
 * additions (so the result does not depend on threads or build), and one
 * the compiler can keep in vector registers without -ffast-math. */
static float dot_f32(const float *a, const float *b, size_t n) {
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (int k = 0; i < n; i++, k++) acc[k] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Rows r0..r1 of Y = X W^T; each weight row is read once for the whole batch. */
static void product_rows(const product_job *j, size_t r0, size_t r1) {
    if (j->wf) {
        for (size_t r = r0; r < r1; r++)
            for (size_t b = 0; b < j->batch; b++)
                j->y[b * j->rows + r] = dot_f32(j->wf + r * j->cols, j->xf + b * j->cols, j->cols);
        return;
    }
    size_t nb = j->cols / H3K_BLOCK;
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *row = j->w + r * j->row_bytes;
        for (size_t b = 0; b < j->batch; b++) {
            h3k_act16 x = {j->xq + b * j->cols, j->xs + b * nb};
            j->y[b * j->rows + r] = j->reference ? h3k_dot_scalar(j->kind, row, x, nb)
                                                 : h3k_dot_row(j->kind, row, x, nb);
        }
    }
}

/* Rows [*r0, *r1) of piece p of n: equal contiguous ranges (sizes differ
 * by at most one row). */
static void piece_rows(size_t rows, int p, int n, size_t *r0, size_t *r1) {
    size_t i = (size_t)p, base = rows / (size_t)n, extra = rows % (size_t)n;
    *r0 = base * i + (i < extra ? i : extra);
    *r1 = *r0 + base + (i < extra ? 1 : 0);
}

/* Piece `part` of `parts`: its own rows first, taken a grain at a time,
 * then whatever grains the other pieces have left. A thread that lost its
 * CPU for a while (a busy machine) then holds up only its current grain,
 * not half the product. Each row is computed the same way whichever thread
 * takes it, so results do not depend on the thread count. */
static void product_part(void *arg, int part, int parts) {
    const product_job *j = (const product_job *)arg;
    for (int k = 0; k < parts; k++) {
        int p = (part + k) % parts;
        size_t r0, r1, g;
        piece_rows(j->rows, p, parts, &r0, &r1);
        size_t grains = (r1 - r0 + j->grain - 1) / j->grain;
        while ((g = (size_t)atomic_take(&j->cursor[p].next)) < grains) {
            size_t a = r0 + g * j->grain;
            product_rows(j, a, a + j->grain < r1 ? a + j->grain : r1);
        }
    }
}

/* Split the job into pieces of equal rows, about 32 grains each, and run
 * them on the pool. */
static int run_product(product_job *j, int threads) {
    int parts = h3k_pool_parts(threads, j->rows);
    size_t grain = j->rows / ((size_t)parts * 32);
    j->grain = grain < 1 ? 1 : grain > 1024 ? 1024 : grain;
    j->cursor = (grain_cursor *)H3K_ALIGNED_ALLOC(64, (size_t)parts * sizeof(grain_cursor));
    if (!j->cursor) return H3K_ENOMEM;
    for (int p = 0; p < parts; p++) atomic_put(&j->cursor[p].next, 0);
    h3k_pool_run(product_part, j, parts, 1);
    H3K_ALIGNED_FREE(j->cursor);
    return H3K_OK;
}

/* Check every size, convert the activations, then run the row ranges. */
static int product(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
                   const float *x, size_t x_n, size_t batch, float *y, size_t y_n,
                   int threads, int reference) {
    size_t row_bytes = h3k_quant_bytes(kind, cols), need_w, need_x, need_y, xq_bytes;
    if (!w || !x || !y || !row_bytes || !rows || !batch) return H3K_EINVAL;
    if (!mul_ok(row_bytes, rows, &need_w) || !mul_ok(cols, batch, &need_x) ||
        !mul_ok(rows, batch, &need_y) || !mul_ok(need_x, sizeof(int16_t) + sizeof(float), &xq_bytes))
        return H3K_EINVAL;
    if (w_size < need_w || x_n < need_x || y_n < need_y) return H3K_EINVAL;
    /* one block: need_x int16 values, then need_x / 32 float scales (aligned, 2 * 32 divides 4) */
    unsigned char *mem = (unsigned char *)H3K_ALIGNED_ALLOC(64, xq_bytes);
    if (!mem) return H3K_ENOMEM;
    int16_t *xq = (int16_t *)mem;
    float *xs = (float *)(mem + need_x * sizeof(int16_t));
    for (size_t b = 0; b < batch; b++)
        h3k_act16_quantize(x + b * cols, cols, xq + b * cols, xs + b * (cols / H3K_BLOCK));
    product_job job;
    memset(&job, 0, sizeof job);
    job.kind = kind;
    job.reference = reference;
    job.w = (const uint8_t *)w;
    job.row_bytes = row_bytes;
    job.cols = cols;
    job.rows = rows;
    job.batch = batch;
    job.xq = xq;
    job.xs = xs;
    job.y = y;
    int st = run_product(&job, threads);
    H3K_ALIGNED_FREE(mem);
    return st;
}

int h3k_matmul_f32(const float *w, size_t w_n, size_t rows, size_t cols, const float *x,
                   size_t x_n, size_t batch, float *y, size_t y_n, int threads) {
    size_t need_w, need_x, need_y;
    if (!w || !x || !y || !rows || !cols || !batch) return H3K_EINVAL;
    if (!mul_ok(rows, cols, &need_w) || !mul_ok(cols, batch, &need_x) || !mul_ok(rows, batch, &need_y))
        return H3K_EINVAL;
    if (w_n < need_w || x_n < need_x || y_n < need_y) return H3K_EINVAL;
    product_job job;
    memset(&job, 0, sizeof job);
    job.wf = w;
    job.xf = x;
    job.cols = cols;
    job.rows = rows;
    job.batch = batch;
    job.y = y;
    return run_product(&job, threads);
}

int h3k_matvec(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
               const float *x, size_t x_n, float *y, size_t y_n, int threads) {
    return product(kind, w, w_size, rows, cols, x, x_n, 1, y, y_n, threads, 0);
}

int h3k_matmul(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
               const float *x, size_t x_n, size_t batch, float *y, size_t y_n, int threads) {
    return product(kind, w, w_size, rows, cols, x, x_n, batch, y, y_n, threads, 0);
}

int h3k_matvec_reference(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
                         const float *x, size_t x_n, float *y, size_t y_n) {
    return product(kind, w, w_size, rows, cols, x, x_n, 1, y, y_n, 1, 1);
}
