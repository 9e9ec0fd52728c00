/* h3k.h -- public API of the h3kit native library (h3k.c has the design and the unit map).
 *
 * Every function that can fail returns an h3k status code (0 = H3K_OK);
 * h3k_strerror() turns a code into a sentence. Handles (arena, streamer)
 * also keep the text of their own last error, read with *_last_error(): it
 * returns a copy taken under the handle's lock into a buffer of the calling
 * thread, valid until that thread's next *_last_error call (safe while
 * other threads use the handle).
 * All sizes are in bytes unless a name says otherwise (n = element count). */
#ifndef H3K_H
#define H3K_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The units define H3K_BUILDING (h3k_internal.h) and export; a client such as
 * h3k-selftest declares plain functions, which the DLL's import library resolves. */
#if defined(_WIN32) && defined(H3K_BUILDING)
#define H3K_API __declspec(dllexport)
#elif defined(_WIN32)
#define H3K_API
#else
#define H3K_API __attribute__((visibility("default")))
#endif

#define H3K_VERSION "0.1.0"
#define H3K_ABI 6 /* bumped with every changed signature (2: tile lengths; 3: direct reads, advice;
                     4: the self-test became the program h3k-selftest; 5: reads past the page cache;
                     6: h3k_streamer_limits) */

/* Status codes. */
#define H3K_OK 0
#define H3K_EINVAL 1      /* bad argument: size, shape, kind, NULL pointer */
#define H3K_ENOMEM 2      /* allocation or reservation failed */
#define H3K_EIO 3         /* file could not be opened or read */
#define H3K_ERANGE 4      /* offset/length outside the file or buffer */
#define H3K_EUNSUPPORTED 5 /* not available on this platform / build */
#define H3K_END 6         /* streamer: every submitted range was delivered */
#define H3K_ESELFTEST 7   /* the self-test (h3k-selftest) found a wrong result */

/* Value types: the ggml type ids, so files and code agree. */
#define H3K_F32 0
#define H3K_F16 1
#define H3K_Q4_0 2 /* quantization kinds */
#define H3K_Q8_0 8
#define H3K_BF16 30
#define H3K_BLOCK 32 /* values per block for both kinds */

/* CPU features seen at run time (bit mask). */
#define H3K_CPU_SSE2 (1u << 0)
#define H3K_CPU_AVX (1u << 1)
#define H3K_CPU_AVX2 (1u << 2)
#define H3K_CPU_FMA (1u << 3)
#define H3K_CPU_F16C (1u << 4)
#define H3K_CPU_AVX512F (1u << 5)
#define H3K_CPU_NEON (1u << 6)
#define H3K_CPU_DOTPROD (1u << 7)
#define H3K_CPU_FP16 (1u << 8)

/* Arena flags. */
#define H3K_ARENA_LOCK 1 /* try to lock the region in RAM (mlock/VirtualLock) */

H3K_API const char *h3k_version(void);
H3K_API int h3k_abi(void);
H3K_API const char *h3k_variant(void);      /* "baseline", "x86-64-v3", "arm64-dotprod" */
H3K_API unsigned h3k_build_features(void);  /* features the build requires */
H3K_API unsigned h3k_cpu_features(void);    /* features this CPU has */
H3K_API int h3k_cpu_count(void);            /* CPUs in the affinity mask, else online */
H3K_API const char *h3k_strerror(int code);

/* fp16 helpers (IEEE binary16, round to nearest even, like numpy). */
H3K_API uint16_t h3k_fp32_to_fp16(float f);
H3K_API float h3k_fp16_to_fp32(uint16_t h);

/* Quant kernels. n and cols must be multiples of H3K_BLOCK. NaN inputs
 * count as 0 and +-Inf as the extreme code (see kernels.c): defined, never UB. */
H3K_API size_t h3k_quant_bytes(int kind, size_t n); /* 0 when kind/n invalid */
H3K_API int h3k_quantize(int kind, const float *x, size_t n, void *out, size_t out_size);
H3K_API int h3k_dequantize(int kind, const void *q, size_t q_size, float *y, size_t n);
/* y[rows] = W x; W is rows x cols, row-major, quantized by rows. threads: how
 * many equal row ranges to split into, 0 = one per CPU this process may use
 * (its affinity mask); the shared worker pool never runs more threads than
 * those CPUs. Results do not depend on threads. */
H3K_API int h3k_matvec(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
                       const float *x, size_t x_n, float *y, size_t y_n, int threads);
/* Y[batch][rows] = X[batch][cols] W^T (each row of X is one activation vector). */
H3K_API int h3k_matmul(int kind, const void *w, size_t w_size, size_t rows, size_t cols,
                       const float *x, size_t x_n, size_t batch, float *y, size_t y_n,
                       int threads);
/* Y[batch][rows] = X[batch][cols] W^T in plain fp32 (W rows x cols, row-major; any cols):
 * the reference the quantized products are checked against, where numpy is
 * absent. w_n, x_n, y_n are element counts; threads as for h3k_matvec. */
H3K_API int h3k_matmul_f32(const float *w, size_t w_n, size_t rows, size_t cols,
                           const float *x, size_t x_n, size_t batch, float *y, size_t y_n,
                           int threads);
/* The portable scalar kernel, so tests can compare the SIMD path with it. */
H3K_API int h3k_matvec_reference(int kind, const void *w, size_t w_size, size_t rows,
                                 size_t cols, const float *x, size_t x_n, float *y,
                                 size_t y_n);

/* The worker pool the products run on: process-wide, started on first use
 * and kept. h3k_pool_shutdown joins the workers (after a product in
 * flight); the next threaded call starts them again. Call it before the
 * library is unloaded. h3k_pool_threads: workers started (0 = none yet). */
H3K_API void h3k_pool_shutdown(void);
H3K_API int h3k_pool_threads(void);

/* Arena: one region reserved up front, bump allocation inside it. */
typedef struct h3k_arena h3k_arena;
H3K_API int h3k_arena_open(h3k_arena **out, size_t capacity, int flags);
H3K_API void h3k_arena_close(h3k_arena *a);
H3K_API void *h3k_arena_alloc(h3k_arena *a, size_t size, size_t align);
H3K_API void h3k_arena_reset(h3k_arena *a);
H3K_API size_t h3k_arena_capacity(h3k_arena *a);
H3K_API size_t h3k_arena_used(h3k_arena *a);
H3K_API size_t h3k_arena_peak(h3k_arena *a);
H3K_API int h3k_arena_locked(h3k_arena *a);  /* 1 when locked in RAM */
H3K_API const char *h3k_arena_last_error(h3k_arena *a);

/* Block streamer: ranges of a file read ahead into a ring of buffers. */
typedef struct h3k_streamer h3k_streamer;
H3K_API int h3k_streamer_plan(uint64_t shard_size_bytes, uint64_t preload_bytes,
                              size_t *read_size, int *depth);
H3K_API int h3k_streamer_open(h3k_streamer **out, const char *path, size_t read_size,
                              int depth);
/* The largest read_size and depth h3k_streamer_open accepts. */
H3K_API int h3k_streamer_limits(uint64_t *max_read_size, int *max_depth);
H3K_API void h3k_streamer_close(h3k_streamer *s);
H3K_API uint64_t h3k_streamer_file_size(h3k_streamer *s);
/* From now on the ring's reads (h3k_streamer_submit) bypass the OS's page
 * cache (O_DIRECT, F_NOCACHE, FILE_FLAG_NO_BUFFERING): for a file larger
 * than the cache can keep, whose every pass misses it anyway. H3K_OK when
 * they do; H3K_EUNSUPPORTED (and the reason in *_last_error) where the
 * system or file system has no such reads: the ring reads as before.
 * A read that then fails that way is done through the cache, and so are
 * all after it; h3k_streamer_bypassing says which holds now (1 or 0).
 * Direct reads and advice always go through the cache. */
H3K_API int h3k_streamer_bypass_cache(h3k_streamer *s);
H3K_API int h3k_streamer_bypassing(h3k_streamer *s);
H3K_API int h3k_streamer_submit(h3k_streamer *s, uint64_t offset, uint64_t length);
/* Wait for the next chunk in submission order. The chunk stays valid until
 * the next call to h3k_streamer_next or h3k_streamer_close. */
H3K_API int h3k_streamer_next(h3k_streamer *s, const void **data, size_t *length,
                              uint64_t *offset);
/* Ask for [offset, offset+length) ahead of a direct read: the background
 * thread passes it to the OS's read-ahead (posix_fadvise WILLNEED, macOS
 * F_RDADVISE) and the caller does not wait; where there is no such call the
 * thread reads it into a scratch buffer, which puts it in the page cache.
 * Only the range is checked (H3K_ERANGE); a hint that fails fails nothing. */
H3K_API int h3k_streamer_advise(h3k_streamer *s, uint64_t offset, uint64_t length);
/* One direct read: [offset, offset+length) of the file, values of
 * file_type, into dst (dst_size bytes) as dst_type: file_type itself or,
 * for H3K_F16 / H3K_BF16, H3K_F32. */
typedef struct {
    uint64_t offset, length;
    void *dst;
    size_t dst_size;
    int file_type, dst_type;
} h3k_read;
/* Do `count` reads now, on the calling thread and the worker pool (threads
 * as for h3k_matvec), without the ring: each piece of input is read into
 * the top of its stretch of dst and widened there in place. Every read is
 * checked first (H3K_ERANGE past the end, H3K_EINVAL for a conversion not
 * listed above, an odd length or a buffer too small), and then nothing is
 * written. A file that ends early gives H3K_ERANGE, a failed read H3K_EIO,
 * both with the path in *_last_error; the buffers are then partly written.
 * May run while the background thread reads ahead; callers on several
 * threads take turns. */
H3K_API int h3k_streamer_read(h3k_streamer *s, const h3k_read *reads, size_t count, int threads);
/* bytes_read and read_seconds count the ring's reads and the direct ones;
 * wait_seconds is the time h3k_streamer_next waited for the ring. */
H3K_API void h3k_streamer_stats(h3k_streamer *s, uint64_t *bytes_read, double *wait_seconds,
                                double *read_seconds, uint64_t *chunks);
H3K_API const char *h3k_streamer_last_error(h3k_streamer *s);

/* Tiles over a planar float image or latent laid out [channels][height][width]. */
H3K_API int h3k_tile_starts(size_t dim, size_t tile, size_t overlap, size_t *starts,
                            size_t max_starts, size_t *count);
H3K_API int h3k_tile_extract(const float *img, size_t c, size_t h, size_t w, size_t y0,
                             size_t x0, size_t th, size_t tw, float *tile, size_t tile_n);
/* Blend one tile into acc (c*h*w values) with its weights summed in weight
 * (h*w values, shared by the channels). acc_n, weight_n and tile_n are the
 * element counts of the buffers: each must hold at least what the shape
 * needs, else H3K_EINVAL and nothing is written. */
H3K_API int h3k_tile_accumulate(float *acc, size_t acc_n, float *weight, size_t weight_n,
                                size_t c, size_t h, size_t w, const float *tile, size_t tile_n,
                                size_t y0, size_t x0, size_t th, size_t tw, size_t overlap);
/* acc /= weight per pixel (0 where no tile landed); sizes checked as above. */
H3K_API int h3k_tile_finish(float *acc, size_t acc_n, const float *weight, size_t weight_n,
                            size_t c, size_t h, size_t w);

#ifdef __cplusplus
}
#endif
#endif
