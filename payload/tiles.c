/* tiles.c -- split a planar float image or latent, [channels][height][width],
 * into overlapping tiles and blend them back with linear feathering (the
 * tiled VAE decode).
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Every tile is full size: the last one along an axis sits flush with
 *     the end, so every pixel is covered.
 *   - Weights are a linear ramp over the overlap on each side that borders
 *     another tile, never zero, so dividing by their sum is exact for a
 *     tile that is copied back unchanged.
 *   - Every buffer length is checked against the shape before anything is
 *     written (the caller passes element counts).
 *
 * Left out on purpose
 * -------------------
 *   - Threads: blending is a small share of a decode next to the VAE itself.
 */

#include "h3k_internal.h"

/* Tile origins along one axis: step tile-overlap, the last tile flush with
 * the end, so every tile is full size and every pixel is covered. */
int h3k_tile_starts(size_t dim, size_t tile, size_t overlap, size_t *starts, size_t max_starts,
                    size_t *count) {
    if (!count || !dim || !tile || overlap >= tile) return H3K_EINVAL;
    size_t n = 1, stride = tile - overlap;
    if (dim > tile) n = (dim - tile + stride - 1) / stride + 1;
    *count = n;
    if (!starts) return H3K_OK; /* a query for the count only */
    if (max_starts < n) return H3K_EINVAL;
    for (size_t i = 0; i < n; i++) starts[i] = dim <= tile ? 0 : i + 1 == n ? dim - tile : i * stride;
    return H3K_OK;
}

/* Checks shared by extract and accumulate: the image and tile sizes, the
 * tile inside the image. *img_n gets c*h*w and *tile_n gets c*th*tw. */
static int tile_args_ok(size_t c, size_t h, size_t w, size_t y0, size_t x0, size_t th, size_t tw,
                        size_t *img_n, size_t *tile_n) {
    size_t plane, end_y, end_x;
    if (!c || !h || !w || !th || !tw || !mul_ok(h, w, &plane) || !mul_ok(plane, c, img_n))
        return 0;
    if (!add_ok(y0, th, &end_y) || !add_ok(x0, tw, &end_x) || end_y > h || end_x > w) return 0;
    return mul_ok(th, tw, tile_n) && mul_ok(*tile_n, c, tile_n);
}

int h3k_tile_extract(const float *img, size_t c, size_t h, size_t w, size_t y0, size_t x0,
                     size_t th, size_t tw, float *tile, size_t tile_n) {
    size_t img_n, need;
    if (!img || !tile || !tile_args_ok(c, h, w, y0, x0, th, tw, &img_n, &need) || tile_n < need)
        return H3K_EINVAL;
    for (size_t ch = 0; ch < c; ch++)
        for (size_t y = 0; y < th; y++)
            memcpy(tile + (ch * th + y) * tw, img + (ch * h + y0 + y) * w + x0, tw * sizeof(float));
    return H3K_OK;
}

/* Weight of position i in a tile of length len along one axis: a linear
 * ramp over `overlap` positions on each side that borders another tile,
 * never zero, 1 in the middle and at the image border. */
static float ramp(size_t i, size_t len, size_t overlap, int open_before, int open_after) {
    float wgt = 1.0f, step = 1.0f / (float)(overlap + 1);
    if (open_before && i < overlap) wgt = (float)(i + 1) * step;
    if (open_after && len - i <= overlap) {
        float v = (float)(len - i) * step;
        if (v < wgt) wgt = v;
    }
    return wgt;
}

/* Add one tile, weighted by the ramps, into acc and weight; every buffer
 * length is checked against the shape before anything is written. */
int h3k_tile_accumulate(float *acc, size_t acc_n, float *weight, size_t weight_n, size_t c,
                        size_t h, size_t w, const float *tile, size_t tile_n, size_t y0, size_t x0,
                        size_t th, size_t tw, size_t overlap) {
    size_t img_n, need;
    if (!acc || !weight || !tile || !tile_args_ok(c, h, w, y0, x0, th, tw, &img_n, &need))
        return H3K_EINVAL;
    if (acc_n < img_n || weight_n < img_n / c || tile_n < need) return H3K_EINVAL;
    for (size_t y = 0; y < th; y++) {
        float wy = ramp(y, th, overlap, y0 > 0, y0 + th < h);
        for (size_t x = 0; x < tw; x++) {
            float wgt = wy * ramp(x, tw, overlap, x0 > 0, x0 + tw < w);
            weight[(y0 + y) * w + x0 + x] += wgt;
            for (size_t ch = 0; ch < c; ch++)
                acc[(ch * h + y0 + y) * w + x0 + x] += wgt * tile[(ch * th + y) * tw + x];
        }
    }
    return H3K_OK;
}

/* Divide the accumulated sum by the accumulated weight (one plane of
 * weights shared by all channels). Pixels no tile covered stay 0. */
int h3k_tile_finish(float *acc, size_t acc_n, const float *weight, size_t weight_n, size_t c,
                    size_t h, size_t w) {
    size_t plane, total;
    if (!acc || !weight || !mul_ok(h, w, &plane) || !mul_ok(plane, c, &total)) return H3K_EINVAL;
    if (acc_n < total || weight_n < plane) return H3K_EINVAL;
    for (size_t i = 0; i < total; i++) {
        float wgt = weight[i % plane];
        acc[i] = wgt > 0.0f ? acc[i] / wgt : 0.0f;
    }
    return H3K_OK;
}
