/* h3k.c -- the h3kit native library: what it is, how its units fit, and
 * the calls that describe the build (version, ABI, variant, features,
 * status texts).
 *
 * What it does
 * ------------
 * The memory- and compute-side pieces that PyTorch does not give us on every
 * backend, for running very large diffusion transformers on ordinary machines.
 * One public header, h3k.h; one unit per subsystem, each opening with what it
 * does, what it assumes and what it leaves out:
 *
 *   kernels.c      fp16, Q8_0 / Q4_0 quantize and dequantize in ggml's (GGUF)
 *                  block layout, the dot kernels (scalar, AVX2, NEON)
 *   products.c     h3k_matvec / h3k_matmul with quantized weights and fp32
 *                  activations, and the plain fp32 product, over rows
 *   pool.c         the process-wide worker pool every threaded call runs on
 *   arena.c        one region reserved, touched and locked up front
 *   streamer.c     the block streamer: a background thread reads ranges of a
 *                  file into a ring of aligned buffers, or only advises the OS
 *   direct_read.c  the streamer's direct reads, straight into the caller's
 *                  tensors and widened there from bf16/fp16 to fp32
 *   tiles.c        split a planar image/latent into overlapping tiles and
 *                  blend them back (tiled VAE decode)
 *   platform.c     CPUs, CPU features, files, last-error texts
 *   selftest.c     not a unit: the program h3k-selftest, a client of h3k.h
 *   h3k_internal.h what the units share: the platform shims, the pool's and
 *                  the kernels' internal calls, the streamer's fields
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - One build per SIMD level (baseline, x86-64-v3, arm64-dotprod), picked
 *     by the loader from h3k_cpu_features(); every unit is compiled with the
 *     same flags, and the kernels are chosen at compile time.
 *   - One piece of process-wide state, the worker pool, behind its own
 *     locks. Otherwise stateless calls return a status code (h3k_strerror
 *     explains it) and handles keep their own last-error text and a lock, so
 *     one handle can be shared by threads; *_last_error copies the text
 *     under that lock into a buffer of the calling thread.
 *   - Every call that can fail checks every size (overflow included) before
 *     it touches memory.
 *
 * Left out on purpose
 * -------------------
 *   - Run-time dispatch between SIMD levels inside one library: two small
 *     libraries and a loader that picks one keep the inner loops plain.
 *   - A unity build: the units compile one by one (the command lines name
 *     them all), since the only calls between them are per row or per call,
 *     never per value.
 */

#include "h3k_internal.h"

const char *h3k_version(void) { return H3K_VERSION; }
int h3k_abi(void) { return H3K_ABI; }

const char *h3k_variant(void) {
#if defined(H3K_AVX2)
    return "x86-64-v3";
#elif defined(__ARM_FEATURE_DOTPROD)
    return "arm64-dotprod";
#else
    return "baseline";
#endif
}

/* Features the code of this build relies on; the loader checks them
 * against h3k_cpu_features() before choosing this variant. */
unsigned h3k_build_features(void) {
    unsigned f = 0;
#if defined(H3K_AVX2)
    f |= H3K_CPU_AVX | H3K_CPU_AVX2 | H3K_CPU_FMA | H3K_CPU_F16C;
#endif
#if defined(H3K_NEON)
    f |= H3K_CPU_NEON;
#endif
#if defined(__ARM_FEATURE_DOTPROD)
    f |= H3K_CPU_DOTPROD;
#endif
    return f;
}

const char *h3k_strerror(int code) {
    switch (code) {
    case H3K_OK: return "ok";
    case H3K_EINVAL: return "invalid argument (a size, shape, kind or pointer is wrong)";
    case H3K_ENOMEM: return "out of memory";
    case H3K_EIO: return "the file could not be opened or read";
    case H3K_ERANGE: return "offset or length lies outside the file or buffer";
    case H3K_EUNSUPPORTED: return "not supported by this build or platform";
    case H3K_END: return "no more data: every submitted range was delivered";
    case H3K_ESELFTEST: return "the self-test found a wrong result";
    default: return "unknown h3k status code";
    }
}
