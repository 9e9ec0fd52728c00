/* h3k.c -- the h3kit native library.
 *
 * What it does
 * ------------
 * The memory- and compute-side pieces that PyTorch does not give us on every
 * backend, for running very large diffusion transformers on ordinary machines:
 *
 *   - quant kernels: Q8_0 / Q4_0 quantize and dequantize in the exact ggml
 *     (GGUF) block layout, and matrix-vector / matrix-matrix products with
 *     quantized weights and fp32 activations, split over rows on a
 *     persistent worker pool; and a plain fp32 product, the reference those
 *     are checked against where the caller has no numpy (the installer's
 *     own Python);
 *   - an arena: one region reserved, touched and (where allowed) locked up
 *     front, so the preload budget is paid once and cannot be paged out;
 *   - a block streamer: byte ranges of a big file (a safetensors shard) read
 *     by a background thread into a ring of aligned buffers, so block i+1
 *     loads while block i is in use; or, for a caller that computes on the
 *     CPU, read straight into the caller's tensors and widened there from
 *     bf16/fp16 to fp32 on the worker pool, while the background thread
 *     only asks the OS to read the next blocks ahead (see "direct reads");
 *   - tiles: split a planar image/latent into overlapping tiles and blend
 *     them back with linear feathering (tiled VAE decode).
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
 * bytes are unchanged (still ggml's). The fp32 product just follows IEEE.
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
 *   - One piece of process-wide state, the worker pool, behind its own
 *     locks (see "thread pool"). Otherwise stateless calls return a status
 *     code (h3k_strerror explains it) and handles keep their own
 *     last-error text and a lock, so one handle can be shared by threads;
 *     *_last_error copies the text under that lock into a buffer of the
 *     calling thread.
 *   - Threads: at most one per CPU in this process's affinity mask
 *     (taskset, cpusets, a container's CPU set), whatever is asked. The
 *     rows are split into equal contiguous pieces, one per thread, the
 *     caller taking one; a thread done early takes grains (1/32 of a piece)
 *     left in the others, so one that lost its CPU for a while holds up a
 *     grain, not half the product. Idle workers poll (yielding the CPU)
 *     for 2 ms after a task before they sleep: products come back to back,
 *     and a sleeping virtual CPU can take longer to wake than a product.
 *     The pool runs any task split in pieces, so the streamer could share
 *     it; it is not reentrant (a task must not start another).
 *   - Floating point contraction is off (pragma and build flags): quantization
 *     must round exactly like the reference, and x*id + 8.5 fused into an FMA
 *     rounds differently.
 *
 * Left out on purpose
 * -------------------
 *   - K-quants and other GGUF types: Q8_0 and Q4_0 cover what the planner asks.
 *   - O_DIRECT / unbuffered reads: the page cache is what the user's later
 *     runs hit, and direct I/O needs alignment the callers cannot promise.
 *   - Direct reads overlapped with the caller's compute: on a CPU the
 *     copy and the compute share the same cores and memory bus, and a
 *     thread converting beside PyTorch's own threads slowed a 2-core step
 *     by more than the conversion costs when done alone on every core
 *     (payload/README.md has the figures). Only the disk is overlapped:
 *     read-ahead advice costs the caller no CPU.
 *   - A pool that shrinks, or per-caller pools: callers share the one pool
 *     and take turns (one product at a time uses every CPU anyway). The
 *     workers are never stopped at exit; h3k_pool_shutdown joins them for
 *     leak checkers and before the library is unloaded.
 *   - CPU quotas (cgroup cpu.max, docker --cpus): only the affinity mask is
 *     read; a quota leaves the thread count at the CPUs one may run on.
 *   - Faster inner loops (int8 activations, AVX-512/VNNI builds): q8_0 is
 *     bound by memory bandwidth, q4_0 by arithmetic (~1.5 ns per block per
 *     core on Zen 4), and with the pool both beat ggml's generic CPU
 *     kernels' ratios to numpy (payload/README.md), so the int16 scheme stays.
 *   - SDOT kernels: SDOT multiplies int8 by int8 and our activations are
 *     int16, so the arm64-dotprod build shares the NEON kernels and differs
 *     only in what the compiler may use.
 */

#if !defined(_WIN32)
#define _GNU_SOURCE
#define _DARWIN_C_SOURCE
#endif

#include "h3k.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <malloc.h>
#else
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#endif

#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#if !defined(_WIN32)
#include <sched.h>
#endif
#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define H3K_X86 1
#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#endif
#if defined(__AVX2__) && (defined(__FMA__) || defined(_MSC_VER))
#define H3K_AVX2 1
#include <immintrin.h>
#endif
#if defined(__ARM_NEON) || defined(__ARM_NEON__)
#define H3K_NEON 1
#include <arm_neon.h>
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

/* ---------------------------------------------------------------- memory */

/* Every allocation goes through these, so the allocator can be swapped. */
#define H3K_MALLOC(n) malloc(n)
#define H3K_CALLOC(n, s) calloc((n), (s))
#define H3K_FREE(p) free(p)
#if defined(_WIN32)
#define H3K_ALIGNED_ALLOC(al, n) _aligned_malloc((n), (al))
#define H3K_ALIGNED_FREE(p) _aligned_free(p)
#else
static void *h3k_posix_aligned(size_t align, size_t n) {
    void *p = NULL;
    return posix_memalign(&p, align, n) == 0 ? p : NULL;
}
#define H3K_ALIGNED_ALLOC(al, n) h3k_posix_aligned((al), (n))
#define H3K_ALIGNED_FREE(p) free(p)
#endif

#define H3K_PAGE 4096u
#define H3K_MAX_THREADS 256

/* a * b without overflow; returns 0 and leaves *out alone when it would. */
static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static int add_ok(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

#if defined(__GNUC__) || defined(__clang__)
#define H3K_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define H3K_PRINTF(f, a)
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#define H3K_TLS __declspec(thread)
#else
#define H3K_TLS _Thread_local
#endif

/* Write a handle's last-error text (always NUL-terminated, truncated).
 * Callers hold the handle's lock, or own the handle alone (while opening). */
static void H3K_PRINTF(3, 4) set_err(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* --------------------------------------------------- threads, time, cpus */

#if defined(_WIN32)
typedef CRITICAL_SECTION h3k_mutex;
typedef CONDITION_VARIABLE h3k_cond;
typedef HANDLE h3k_thread;
typedef DWORD(WINAPI *h3k_thread_fn)(LPVOID);
#define H3K_THREAD_FUNC(name) static DWORD WINAPI name(LPVOID arg)
#define H3K_THREAD_END return 0
static void mutex_init(h3k_mutex *m) { InitializeCriticalSection(m); }
static void mutex_destroy(h3k_mutex *m) { DeleteCriticalSection(m); }
static void mutex_lock(h3k_mutex *m) { EnterCriticalSection(m); }
static void mutex_unlock(h3k_mutex *m) { LeaveCriticalSection(m); }
static void cond_init(h3k_cond *c) { InitializeConditionVariable(c); }
static void cond_destroy(h3k_cond *c) { (void)c; }
static void cond_wait(h3k_cond *c, h3k_mutex *m) { SleepConditionVariableCS(c, m, INFINITE); }
static void cond_broadcast(h3k_cond *c) { WakeAllConditionVariable(c); }
static int thread_start(h3k_thread *t, h3k_thread_fn fn, void *arg) {
    *t = CreateThread(NULL, 0, fn, arg, 0, NULL);
    return *t != NULL;
}
static void thread_join(h3k_thread t) {
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}
static void thread_yield(void) { SwitchToThread(); }
static double now_seconds(void) {
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
}
#else
typedef pthread_mutex_t h3k_mutex;
typedef pthread_cond_t h3k_cond;
typedef pthread_t h3k_thread;
typedef void *(*h3k_thread_fn)(void *);
#define H3K_THREAD_FUNC(name) static void *name(void *arg)
#define H3K_THREAD_END return NULL
static void mutex_init(h3k_mutex *m) { pthread_mutex_init(m, NULL); }
static void mutex_destroy(h3k_mutex *m) { pthread_mutex_destroy(m); }
static void mutex_lock(h3k_mutex *m) { pthread_mutex_lock(m); }
static void mutex_unlock(h3k_mutex *m) { pthread_mutex_unlock(m); }
static void cond_init(h3k_cond *c) { pthread_cond_init(c, NULL); }
static void cond_destroy(h3k_cond *c) { pthread_cond_destroy(c); }
static void cond_wait(h3k_cond *c, h3k_mutex *m) { pthread_cond_wait(c, m); }
static void cond_broadcast(h3k_cond *c) { pthread_cond_broadcast(c); }
static int thread_start(h3k_thread *t, h3k_thread_fn fn, void *arg) {
    return pthread_create(t, NULL, fn, arg) == 0;
}
static void thread_join(h3k_thread t) { pthread_join(t, NULL); }
static void thread_yield(void) { sched_yield(); }
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* What *_last_error returns: the handle's text copied under its lock into
 * a buffer of the calling thread, so no thread writes that buffer while its
 * owner reads it. Valid until the same thread's next *_last_error call. */
static H3K_TLS char err_copy[256];

static const char *copy_err(h3k_mutex *lock, const char *err) {
    mutex_lock(lock);
    snprintf(err_copy, sizeof err_copy, "%s", err);
    mutex_unlock(lock);
    return err_copy;
}

#if defined(__linux__)
/* CPUs in this thread's affinity mask (what taskset, cgroup cpusets and
 * container CPU limits by set leave us), or 0 when it cannot be read. The
 * mask grows past CPU_SETSIZE (1024) for machines that have more. */
static int affinity_count(void) {
    for (size_t ncpu = CPU_SETSIZE; ncpu <= ((size_t)1 << 20); ncpu *= 2) {
        size_t bytes = CPU_ALLOC_SIZE(ncpu);
        cpu_set_t *set = (cpu_set_t *)H3K_CALLOC(1, bytes);
        if (!set) return 0;
        int ok = sched_getaffinity(0, bytes, set) == 0, again = !ok && errno == EINVAL;
        int n = ok ? CPU_COUNT_S(bytes, set) : 0;
        H3K_FREE(set);
        if (!again) return n;
    }
    return 0;
}
#elif defined(_WIN32)
/* CPUs in the process affinity mask; 0 when the process spans several
 * processor groups (then Windows reports no mask) or the call fails. */
static int affinity_count(void) {
    DWORD_PTR proc = 0, sys = 0;
    int n = 0;
    if (!GetProcessAffinityMask(GetCurrentProcess(), &proc, &sys)) return 0;
    for (; proc; proc &= proc - 1) n++;
    return n;
}
#else
static int affinity_count(void) { return 0; } /* macOS and the BSDs: no affinity masks */
#endif

/* Logical CPUs this process may use (at least 1): the affinity mask where
 * the OS has one, so a container limited to some CPUs is not
 * oversubscribed; else every online CPU. */
int h3k_cpu_count(void) {
    int n = affinity_count();
    if (n > 0) return n;
#if defined(_WIN32)
    DWORD all = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return all > 0 ? (int)all : 1;
#else
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
#endif
}

/* ------------------------------------------------- version and features */

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

#if defined(H3K_X86)
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4]) {
#if defined(_MSC_VER) && !defined(__clang__)
    int v[4];
    __cpuidex(v, (int)leaf, (int)sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)v[i];
#else
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

/* XCR0: which register states the OS saves (AVX needs bits 1 and 2). */
static unsigned long long xgetbv0(void) {
#if defined(_MSC_VER) && !defined(__clang__)
    return _xgetbv(0);
#else
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
#endif
}
#endif

unsigned h3k_cpu_features(void) {
    unsigned f = 0;
#if defined(H3K_X86)
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    cpuid(1, 0, r);
    if (r[3] & (1u << 26)) f |= H3K_CPU_SSE2;
    int osxsave = (r[2] >> 27) & 1;
    int os_avx = osxsave && (xgetbv0() & 6) == 6;
    int os_avx512 = osxsave && (xgetbv0() & 0xe6) == 0xe6;
    if (os_avx && (r[2] & (1u << 28))) f |= H3K_CPU_AVX;
    if (os_avx && (r[2] & (1u << 12))) f |= H3K_CPU_FMA;
    if (os_avx && (r[2] & (1u << 29))) f |= H3K_CPU_F16C;
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        if (os_avx && (r[1] & (1u << 5))) f |= H3K_CPU_AVX2;
        if (os_avx512 && (r[1] & (1u << 16))) f |= H3K_CPU_AVX512F;
    }
#elif defined(__aarch64__) || defined(_M_ARM64)
    f |= H3K_CPU_NEON; /* part of every arm64 CPU */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP);
    if (hw & (1ul << 20)) f |= H3K_CPU_DOTPROD; /* HWCAP_ASIMDDP */
    if (hw & (1ul << 10)) f |= H3K_CPU_FP16;    /* HWCAP_ASIMDHP */
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v)
        f |= H3K_CPU_DOTPROD;
    v = 0;
    len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_FP16", &v, &len, NULL, 0) == 0 && v)
        f |= H3K_CPU_FP16;
#elif defined(_WIN32)
    if (IsProcessorFeaturePresent(43)) f |= H3K_CPU_DOTPROD; /* PF_ARM_V82_DP_... */
#endif
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

static size_t block_bytes(int kind) {
    return kind == H3K_Q8_0 ? 2 + H3K_BLOCK : kind == H3K_Q4_0 ? 2 + H3K_BLOCK / 2 : 0;
}

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
 * representation, so they differ only in the order of float additions. */
typedef struct {
    const int16_t *q; /* cols values */
    const float *s;   /* cols / 32 scales */
} act16;

/* As in the quantizers, only finite values set a block's scale; NaN becomes
 * 0 and +-Inf the extreme code +-32767, i.e. +-(largest finite magnitude). */
static void quantize_act16(const float *x, size_t n, int16_t *q, float *s) {
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
static float dot_scalar(int kind, const uint8_t *row, act16 x, size_t nb) {
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
static float dot_avx2(int kind, const uint8_t *row, act16 x, size_t nb) {
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

static float dot_neon(int kind, const uint8_t *row, act16 x, size_t nb) {
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

static float dot_row(int kind, const uint8_t *row, act16 x, size_t nb) {
#if defined(H3K_AVX2)
    return dot_avx2(kind, row, x, nb);
#elif defined(H3K_NEON)
    return dot_neon(kind, row, x, nb);
#else
    return dot_scalar(kind, row, x, nb);
#endif
}

/* ------------------------------------------------------------ thread pool */

/* Atomic ints (load/store with acquire/release, a relaxed fetch-add) and a
 * spin-loop hint: for the counters threads poll or take without a lock. */
#if defined(_MSC_VER) && !defined(__clang__)
typedef volatile long h3k_atomic;
static int atomic_get(h3k_atomic *v) { return (int)InterlockedCompareExchange(v, 0, 0); }
static void atomic_put(h3k_atomic *v, int x) { InterlockedExchange(v, x); }
static int atomic_take(h3k_atomic *v) { return (int)InterlockedExchangeAdd(v, 1); }
#else
typedef int h3k_atomic;
static int atomic_get(h3k_atomic *v) { return __atomic_load_n(v, __ATOMIC_ACQUIRE); }
static void atomic_put(h3k_atomic *v, int x) { __atomic_store_n(v, x, __ATOMIC_RELEASE); }
/* Returns the old value and adds 1. */
static int atomic_take(h3k_atomic *v) { return __atomic_fetch_add(v, 1, __ATOMIC_RELAXED); }
#endif
#if defined(H3K_X86) && defined(_MSC_VER) && !defined(__clang__)
#define cpu_relax() _mm_pause()
#elif defined(H3K_X86)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__) && defined(_MSC_VER) && !defined(__clang__)
#define cpu_relax() __yield()
#elif defined(__aarch64__) || defined(__arm__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* How long a thread polls before it sleeps on a condition variable: a
 * worker after its task, a caller for its workers. Long enough to span
 * the gap between back-to-back products (layer after layer), short enough
 * that an idle pool costs nothing; and a sleeping vCPU can take
 * milliseconds to wake, more than a whole product. */
#ifndef H3K_SPIN_SECONDS
#define H3K_SPIN_SECONDS 0.002
#endif

/* A spin budget: spin_more() pauses once and says whether time is left;
 * every 256 rounds it yields the CPU and reads the clock. */
typedef struct {
    double t0;
    unsigned rounds;
} spin_clock;

static int spin_more(spin_clock *c) {
    cpu_relax();
    if (++c->rounds % 256) return 1;
    thread_yield(); /* free on an idle machine; lets others run on a busy one */
    double t = now_seconds();
    if (c->t0 == 0.0) c->t0 = t;
    return t - c->t0 <= H3K_SPIN_SECONDS;
}

/* One process-wide pool of worker threads, started on first use and kept,
 * so a product pays a wake-up (microseconds) instead of thread starts. A
 * task is split into `parts` pieces: the caller runs piece 0 and worker i
 * pieces i, i + n, i + 2n, ... where n is the number of threads taking
 * part; normally n == parts, one piece each. One task runs at a time:
 * callers from several threads queue on `run`. The pool grows (never
 * shrinks) to the most workers a task has used, at most one less than the
 * CPUs and than H3K_MAX_THREADS; a worker that cannot start is simply not
 * there and its pieces go to the others, so a task never fails half-way.
 * Idle workers poll for H3K_SPIN_SECONDS, then sleep. */
typedef void (*h3k_task_fn)(void *arg, int part, int parts);

typedef struct {
    h3k_mutex run;        /* held by a caller for its whole task */
    h3k_mutex lock;       /* guards everything below */
    h3k_cond wake;        /* a new task, or stop */
    h3k_cond done;        /* a worker finished its pieces, or checked in */
    h3k_thread threads[H3K_MAX_THREADS];
    int workers;          /* started */
    int ready;            /* started and past reading the generation */
    int stop;
    h3k_atomic generation; /* bumped for each task and for stop; polled */
    h3k_atomic pending;   /* workers not yet done with the current task; polled */
    h3k_task_fn fn;       /* the current task */
    void *arg;
    int parts, active;    /* pieces; workers taking part (ids 1..active) */
    int spin;             /* poll after this task (products), or sleep at once (reads) */
} h3k_pool;

static h3k_pool pool;

/* Wait for a generation other than `seen`: poll a while, then sleep.
 * Returns with the lock held. */
static void pool_wait_task(int seen, int spin) {
    spin_clock c = {0.0, 0};
    while (spin && atomic_get(&pool.generation) == seen && spin_more(&c)) continue;
    mutex_lock(&pool.lock);
    while (atomic_get(&pool.generation) == seen) cond_wait(&pool.wake, &pool.lock);
}

/* Worker `id` (1..): the generation and the task are read together under
 * the lock, so a worker that woke late takes the task now published,
 * once, and never one it already ran. */
H3K_THREAD_FUNC(pool_worker) {
    int id = (int)(intptr_t)arg;
    mutex_lock(&pool.lock);
    int seen = atomic_get(&pool.generation); /* no task runs while workers start */
    int spin = 1;
    pool.ready++;
    cond_broadcast(&pool.done);
    mutex_unlock(&pool.lock);
    for (;;) {
        pool_wait_task(seen, spin);
        seen = atomic_get(&pool.generation);
        if (pool.stop) break;
        h3k_task_fn fn = pool.fn;
        void *task = pool.arg;
        int parts = pool.parts, step = pool.active + 1, mine = id <= pool.active;
        spin = pool.spin;
        mutex_unlock(&pool.lock);
        if (!mine) continue;
        for (int p = id; p < parts; p += step) fn(task, p, parts);
        mutex_lock(&pool.lock);
        int left = atomic_get(&pool.pending) - 1;
        atomic_put(&pool.pending, left);
        if (left == 0) cond_broadcast(&pool.done);
        mutex_unlock(&pool.lock);
    }
    pool.ready--;
    mutex_unlock(&pool.lock);
    H3K_THREAD_END;
}

#if !defined(_WIN32)
/* fork() copies only the calling thread: the child forgets the workers
 * (they are not there) and gets the locks back in a known state, so a
 * forked process (Python multiprocessing) can still run products. */
static void pool_prefork(void) {
    mutex_lock(&pool.run);
    mutex_lock(&pool.lock);
}

static void pool_postfork_parent(void) {
    mutex_unlock(&pool.lock);
    mutex_unlock(&pool.run);
}

static void pool_postfork_child(void) {
    pool.workers = pool.ready = 0;
    atomic_put(&pool.pending, 0);
    cond_init(&pool.wake);
    cond_init(&pool.done);
    mutex_unlock(&pool.lock);
    mutex_unlock(&pool.run);
}
#endif

static void pool_init(void) {
    mutex_init(&pool.run);
    mutex_init(&pool.lock);
    cond_init(&pool.wake);
    cond_init(&pool.done);
#if !defined(_WIN32)
    pthread_atfork(pool_prefork, pool_postfork_parent, pool_postfork_child);
#endif
}

#if defined(_WIN32)
static INIT_ONCE pool_once = INIT_ONCE_STATIC_INIT;
static BOOL CALLBACK pool_init_win(PINIT_ONCE once, PVOID param, PVOID *ctx) {
    (void)once, (void)param, (void)ctx;
    pool_init();
    return TRUE;
}
static void pool_init_once(void) { InitOnceExecuteOnce(&pool_once, pool_init_win, NULL, NULL); }
#else
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_init_once(void) { pthread_once(&pool_once, pool_init); }
#endif

/* Start workers until there are `want` (run held, so no task is running),
 * and wait until each has read the task generation. */
static void pool_grow(int want) {
    mutex_lock(&pool.lock);
    while (pool.workers < want) {
        void *id = (void *)(intptr_t)(pool.workers + 1);
        mutex_unlock(&pool.lock); /* the new thread takes the lock at once */
        int ok = thread_start(&pool.threads[pool.workers], pool_worker, id);
        mutex_lock(&pool.lock);
        if (!ok) break;
        pool.workers++;
    }
    while (pool.ready < pool.workers) cond_wait(&pool.done, &pool.lock);
    mutex_unlock(&pool.lock);
}

/* Publish a task (or stop) to every worker: bump the generation they poll
 * and wake those asleep. Lock held. */
static void pool_publish(void) {
    atomic_put(&pool.generation, atomic_get(&pool.generation) + 1);
    cond_broadcast(&pool.wake);
}

/* Run fn(arg, p, parts) for every p in 0..parts-1 and return when all are
 * done. At most one thread per CPU this process may use takes part (more
 * would only take turns); the calling thread runs piece 0, and pieces are
 * dealt round-robin when there are more pieces than threads. spin: whether
 * the workers poll for the next task afterwards (products come in runs) or
 * sleep at once (a block read is followed by the caller's own compute,
 * which wants every CPU). */
static void pool_run(h3k_task_fn fn, void *arg, int parts, int spin) {
    int threads = h3k_cpu_count();
    threads = threads < parts ? threads : parts;
    if (threads > H3K_MAX_THREADS) threads = H3K_MAX_THREADS;
    if (threads <= 1) {
        for (int p = 0; p < parts; p++) fn(arg, p, parts);
        return;
    }
    pool_init_once();
    mutex_lock(&pool.run);
    pool_grow(threads - 1);
    mutex_lock(&pool.lock);
    int active = pool.workers < threads - 1 ? pool.workers : threads - 1;
    pool.fn = fn;
    pool.arg = arg;
    pool.parts = parts;
    pool.active = active;
    pool.spin = spin;
    atomic_put(&pool.pending, active);
    pool_publish();
    mutex_unlock(&pool.lock);
    for (int p = 0; p < parts; p += active + 1) fn(arg, p, parts);
    spin_clock c = {0.0, 0};
    while (atomic_get(&pool.pending) && spin_more(&c)) continue;
    mutex_lock(&pool.lock);
    while (atomic_get(&pool.pending)) cond_wait(&pool.done, &pool.lock);
    mutex_unlock(&pool.lock);
    mutex_unlock(&pool.run);
}

/* Stop and join the workers (after the task in flight, if any); the next
 * threaded call starts a new pool. For leak checkers, and before unloading
 * the library: its workers run its code. */
void h3k_pool_shutdown(void) {
    pool_init_once();
    mutex_lock(&pool.run);
    mutex_lock(&pool.lock);
    pool.stop = 1;
    pool_publish();
    mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.workers; i++) thread_join(pool.threads[i]);
    mutex_lock(&pool.lock);
    pool.workers = 0;
    pool.stop = 0;
    mutex_unlock(&pool.lock);
    mutex_unlock(&pool.run);
}

/* Workers started so far (0 before the first threaded call). */
int h3k_pool_threads(void) {
    pool_init_once();
    mutex_lock(&pool.lock);
    int n = pool.workers;
    mutex_unlock(&pool.lock);
    return n;
}

/* --------------------------------------------------- threaded products */

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
            act16 x = {j->xq + b * j->cols, j->xs + b * nb};
            j->y[b * j->rows + r] = j->reference ? dot_scalar(j->kind, row, x, nb)
                                                 : dot_row(j->kind, row, x, nb);
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

/* Pieces for a product of `rows` rows: `threads`, or with 0 one per CPU
 * this process may use; never more than rows. (The pool runs at most one
 * thread per CPU whatever is asked.) */
static int product_threads(int threads, size_t rows) {
    int nt = threads > 0 ? threads : h3k_cpu_count();
    if (nt > H3K_MAX_THREADS) nt = H3K_MAX_THREADS;
    if ((size_t)nt > rows) nt = (int)rows;
    return nt;
}

/* Split the job into pieces of equal rows, about 32 grains each, and run
 * them on the pool. */
static int run_product(product_job *j, int threads) {
    int parts = product_threads(threads, j->rows);
    size_t grain = j->rows / ((size_t)parts * 32);
    j->grain = grain < 1 ? 1 : grain > 1024 ? 1024 : grain;
    j->cursor = (grain_cursor *)H3K_ALIGNED_ALLOC(64, (size_t)parts * sizeof(grain_cursor));
    if (!j->cursor) return H3K_ENOMEM;
    for (int p = 0; p < parts; p++) atomic_put(&j->cursor[p].next, 0);
    pool_run(product_part, j, parts, 1);
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
        quantize_act16(x + b * cols, cols, xq + b * cols, xs + b * (cols / H3K_BLOCK));
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

/* ------------------------------------------------------------------ arena */

struct h3k_arena {
    h3k_mutex lock;
    unsigned char *base;
    size_t capacity, used, peak;
    int locked;
    char err[256];
};

/* Reserve and commit the whole region; writing one byte per page makes the
 * OS back it now, so the cost is paid at start-up, not mid-inference. */
static unsigned char *reserve_region(size_t cap) {
#if defined(_WIN32)
    return (unsigned char *)VirtualAlloc(NULL, cap, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
#else
    void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    return p == MAP_FAILED ? NULL : (unsigned char *)p;
#endif
}

static void release_region(unsigned char *p, size_t cap) {
#if defined(_WIN32)
    (void)cap;
    VirtualFree(p, 0, MEM_RELEASE);
#else
    munmap(p, cap);
#endif
}

/* Try to pin the region; on refusal say why, and how to allow it. */
static int lock_region(h3k_arena *a) {
#if defined(_WIN32)
    SIZE_T lo = 0, hi = 0;
    HANDLE self = GetCurrentProcess();
    if (GetProcessWorkingSetSize(self, &lo, &hi))
        SetProcessWorkingSetSize(self, lo + a->capacity, hi + a->capacity);
    if (VirtualLock(a->base, a->capacity)) return 1;
    set_err(a->err, sizeof a->err,
            "VirtualLock of %zu bytes was refused (error %lu); the region is reserved "
            "and touched but Windows may page it out",
            a->capacity, (unsigned long)GetLastError());
    return 0;
#else
    if (mlock(a->base, a->capacity) == 0) return 1;
    int e = errno;
    struct rlimit rl;
    unsigned long long lim = 0;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) lim = (unsigned long long)rl.rlim_cur;
    set_err(a->err, sizeof a->err,
            "mlock of %zu bytes was refused (%s; RLIMIT_MEMLOCK is %llu bytes); the region "
            "is reserved and touched but may be paged out. Raise 'ulimit -l' to lock it",
            a->capacity, strerror(e), lim);
    return 0;
#endif
}

int h3k_arena_open(h3k_arena **out, size_t capacity, int flags) {
    if (!out) return H3K_EINVAL;
    *out = NULL;
    size_t cap;
    if (!capacity || !add_ok(capacity, H3K_PAGE - 1, &cap)) return H3K_EINVAL;
    cap -= cap % H3K_PAGE;
    h3k_arena *a = (h3k_arena *)H3K_CALLOC(1, sizeof *a);
    if (!a) return H3K_ENOMEM;
    a->base = reserve_region(cap);
    if (!a->base) {
        H3K_FREE(a);
        return H3K_ENOMEM;
    }
    a->capacity = cap;
    for (size_t off = 0; off < cap; off += H3K_PAGE) ((volatile unsigned char *)a->base)[off] = 0;
    if (flags & H3K_ARENA_LOCK) a->locked = lock_region(a);
    mutex_init(&a->lock);
    *out = a;
    return H3K_OK;
}

void h3k_arena_close(h3k_arena *a) {
    if (!a) return;
#if !defined(_WIN32)
    if (a->locked) munlock(a->base, a->capacity);
#endif
    release_region(a->base, a->capacity);
    mutex_destroy(&a->lock);
    H3K_FREE(a);
}

/* Bump allocation; align must be a power of two (0 means 64, a cache line). */
void *h3k_arena_alloc(h3k_arena *a, size_t size, size_t align) {
    if (!a) return NULL;
    if (!align) align = 64;
    mutex_lock(&a->lock);
    void *p = NULL;
    if (align & (align - 1)) {
        set_err(a->err, sizeof a->err, "alignment %zu is not a power of two", align);
    } else {
        uintptr_t start = (uintptr_t)a->base + a->used;
        uintptr_t aligned = (start + (align - 1)) & ~(uintptr_t)(align - 1);
        size_t off = (size_t)(aligned - (uintptr_t)a->base), end;
        if (aligned < start || !add_ok(off, size, &end) || end > a->capacity) {
            set_err(a->err, sizeof a->err,
                    "arena full: asked for %zu bytes aligned to %zu with %zu of %zu bytes used",
                    size, align, a->used, a->capacity);
        } else {
            p = a->base + off;
            a->used = end;
            if (end > a->peak) a->peak = end;
        }
    }
    mutex_unlock(&a->lock);
    return p;
}

void h3k_arena_reset(h3k_arena *a) {
    if (!a) return;
    mutex_lock(&a->lock);
    a->used = 0;
    mutex_unlock(&a->lock);
}

/* Read one size_t field under the handle's lock. */
static size_t arena_field(h3k_arena *a, const size_t *field) {
    mutex_lock(&a->lock);
    size_t v = *field;
    mutex_unlock(&a->lock);
    return v;
}

size_t h3k_arena_capacity(h3k_arena *a) { return a ? a->capacity : 0; }
size_t h3k_arena_used(h3k_arena *a) { return a ? arena_field(a, &a->used) : 0; }
size_t h3k_arena_peak(h3k_arena *a) { return a ? arena_field(a, &a->peak) : 0; }
int h3k_arena_locked(h3k_arena *a) { return a ? a->locked : 0; }
const char *h3k_arena_last_error(h3k_arena *a) { return a ? copy_err(&a->lock, a->err) : "no arena"; }

/* ---------------------------------------------------------- file access */

#if defined(_WIN32)
typedef HANDLE h3k_file;
#define H3K_NO_FILE INVALID_HANDLE_VALUE
#else
typedef int h3k_file;
#define H3K_NO_FILE (-1)
#endif

/* Open read-only and report the size; paths are UTF-8 everywhere. */
static int file_open(const char *path, h3k_file *f, uint64_t *size, char *err, size_t cap) {
#if defined(_WIN32)
    wchar_t wpath[4096];
    if (!MultiByteToWideChar(CP_UTF8, 0, path, -1, wpath, 4096)) {
        set_err(err, cap, "path is not valid UTF-8 or longer than 4095 characters: %s", path);
        return H3K_EINVAL;
    }
    *f = CreateFileW(wpath, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                     FILE_FLAG_SEQUENTIAL_SCAN, NULL);
    LARGE_INTEGER sz;
    if (*f == INVALID_HANDLE_VALUE || !GetFileSizeEx(*f, &sz)) {
        set_err(err, cap, "cannot open %s (error %lu)", path, (unsigned long)GetLastError());
        if (*f != INVALID_HANDLE_VALUE) CloseHandle(*f);
        return H3K_EIO;
    }
    *size = (uint64_t)sz.QuadPart;
#else
    struct stat st;
    *f = open(path, O_RDONLY | O_CLOEXEC);
    if (*f < 0 || fstat(*f, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, cap, "cannot open %s: %s", path, *f < 0 ? strerror(errno) : "not a regular file");
        if (*f >= 0) close(*f);
        return H3K_EIO;
    }
    *size = (uint64_t)st.st_size;
#endif
    return H3K_OK;
}

static void file_close(h3k_file f) {
#if defined(_WIN32)
    CloseHandle(f);
#else
    close(f);
#endif
}

/* Read exactly len bytes at off; a file that ends early is an error. */
static int file_read_at(h3k_file f, void *buf, size_t len, uint64_t off, char *err, size_t cap) {
    unsigned char *p = (unsigned char *)buf;
    while (len) {
#if defined(_WIN32)
        DWORD want = len > (1u << 30) ? (1u << 30) : (DWORD)len, got = 0;
        OVERLAPPED ov;
        memset(&ov, 0, sizeof ov);
        ov.Offset = (DWORD)(off & 0xffffffffu);
        ov.OffsetHigh = (DWORD)(off >> 32);
        if (!ReadFile(f, p, want, &got, &ov) && GetLastError() != ERROR_HANDLE_EOF) {
            set_err(err, cap, "read failed at offset %llu (error %lu)", (unsigned long long)off,
                    (unsigned long)GetLastError());
            return H3K_EIO;
        }
        size_t n = got;
#else
        size_t want = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t n = pread(f, p, want, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            set_err(err, cap, "read failed at offset %llu: %s", (unsigned long long)off, strerror(errno));
            return H3K_EIO;
        }
#endif
        if (n == 0) {
            set_err(err, cap, "the file ended at offset %llu, before the requested range did",
                    (unsigned long long)off);
            return H3K_ERANGE;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return H3K_OK;
}

/* --------------------------------------------------------------- streamer */

enum { SLOT_FREE, SLOT_READING, SLOT_FILLED, SLOT_HELD };

typedef struct {
    unsigned char *buf;
    size_t len;
    uint64_t off;
    int state, status;
    char err[200];
} stream_slot;

typedef struct {
    uint64_t off, len;
    int advise; /* only bring it into the page cache (h3k_streamer_advise); nothing is delivered */
} stream_range;

struct h3k_streamer {
    h3k_mutex lock;
    h3k_cond changed; /* any slot or queue state change */
    h3k_thread thread;
    h3k_file file;
    uint64_t file_size;
    size_t read_size;
    int depth, stop, holding;
    stream_slot *slots;
    size_t fill, take;          /* next slot to fill / to hand out */
    stream_range *queue;        /* pending ranges, a circular buffer */
    size_t q_cap, q_head, q_count;
    uint64_t submitted, delivered; /* in chunks */
    uint64_t bytes_read;
    double wait_s, read_s;
    unsigned char *scratch; /* where advice has no system call: ranges read here and dropped */
    char err[256];
    char path[512];
};

/* Read size and ring depth from the plan: a shard is read in about 16
 * pieces (1..64 MiB) so the first piece arrives fast; the ring holds at most
 * preload_bytes but always 2 buffers (reading must overlap use) and at most
 * 8 (one disk gains nothing from more). */
int h3k_streamer_plan(uint64_t shard_size_bytes, uint64_t preload_bytes, size_t *read_size,
                      int *depth) {
    if (!read_size || !depth) return H3K_EINVAL;
    const uint64_t mib = 1u << 20;
    uint64_t rs = shard_size_bytes / 16;
    rs = rs < mib ? mib : rs > 64 * mib ? 64 * mib : rs;
    rs -= rs % mib;
    if (preload_bytes && preload_bytes / 2 < rs) rs = preload_bytes / 2 < mib ? mib : preload_bytes / 2;
    rs -= rs % mib;
    uint64_t d = preload_bytes ? preload_bytes / rs : 2;
    d = d < 2 ? 2 : d > 8 ? 8 : d;
    *read_size = (size_t)rs;
    *depth = (int)d;
    return H3K_OK;
}

/* How much one piece of advice covers. Linux reads at most the device's
 * read-ahead window per POSIX_FADV_WILLNEED (the larger of read_ahead_kb and
 * max_sectors_kb: 128 KiB and 1280 KiB are common; a single 100 MB call
 * brought in 8 MiB on the test machine, 512 KiB pieces all of it), so a
 * range is advised in pieces that fit under that window. */
#define H3K_ADVISE_PIECE ((size_t)512 << 10)

/* Start the OS reading [off, off+len) into its page cache and return
 * without waiting: posix_fadvise(WILLNEED) or macOS's F_RDADVISE. Where
 * neither exists (Windows), read it into a scratch buffer: that waits for
 * the disk here, in the streamer's thread, and costs a copy. */
static void advise_piece(h3k_streamer *s, uint64_t off, size_t len) {
#if defined(__APPLE__)
    struct radvisory ra;
    ra.ra_offset = (off_t)off;
    ra.ra_count = (int)len;
    (void)fcntl(s->file, F_RDADVISE, &ra);
#elif defined(POSIX_FADV_WILLNEED)
    (void)posix_fadvise(s->file, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
#else
    char err[200];
    if (!s->scratch) s->scratch = (unsigned char *)H3K_ALIGNED_ALLOC(H3K_PAGE, H3K_ADVISE_PIECE);
    if (s->scratch) (void)file_read_at(s->file, s->scratch, len, off, err, sizeof err);
#endif
}

H3K_THREAD_FUNC(streamer_thread) {
    h3k_streamer *s = (h3k_streamer *)arg;
    mutex_lock(&s->lock);
    for (;;) {
        while (!s->stop && (s->q_count == 0 || (!s->queue[s->q_head].advise &&
                                                s->slots[s->fill].state != SLOT_FREE)))
            cond_wait(&s->changed, &s->lock);
        if (s->stop) break;
        stream_range *r = &s->queue[s->q_head];
        int advise = r->advise;
        size_t len = r->len < s->read_size ? (size_t)r->len : s->read_size;
        if (advise && len > H3K_ADVISE_PIECE) len = H3K_ADVISE_PIECE;
        uint64_t off = r->off;
        r->off += len;
        r->len -= len;
        if (r->len == 0) {
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_count--;
        }
        if (advise) { /* a hint: nothing waits for it, and its failure fails nothing */
            mutex_unlock(&s->lock);
            advise_piece(s, off, len);
            mutex_lock(&s->lock);
            continue;
        }
        stream_slot *slot = &s->slots[s->fill];
        slot->state = SLOT_READING;
        mutex_unlock(&s->lock);
        double t0 = now_seconds();
        int st = file_read_at(s->file, slot->buf, len, off, slot->err, sizeof slot->err);
        double t1 = now_seconds();
        mutex_lock(&s->lock);
        slot->len = len;
        slot->off = off;
        slot->status = st;
        slot->state = SLOT_FILLED;
        s->read_s += t1 - t0;
        if (st == H3K_OK) s->bytes_read += len;
        s->fill = (s->fill + 1) % (size_t)s->depth;
        cond_broadcast(&s->changed);
    }
    mutex_unlock(&s->lock);
    H3K_THREAD_END;
}

static void streamer_free(h3k_streamer *s) {
    if (s->slots) {
        for (int i = 0; i < s->depth; i++) H3K_ALIGNED_FREE(s->slots[i].buf);
        H3K_FREE(s->slots);
    }
    H3K_FREE(s->queue);
    if (s->scratch) H3K_ALIGNED_FREE(s->scratch);
    if (s->file != H3K_NO_FILE) file_close(s->file);
    H3K_FREE(s);
}

/* The ring of page-aligned buffers and the range queue; 0 when out of memory. */
static int streamer_alloc_ring(h3k_streamer *s) {
    s->slots = (stream_slot *)H3K_CALLOC((size_t)s->depth, sizeof *s->slots);
    s->q_cap = 16;
    s->queue = (stream_range *)H3K_CALLOC(s->q_cap, sizeof *s->queue);
    if (!s->slots || !s->queue) return 0;
    for (int i = 0; i < s->depth; i++) {
        s->slots[i].buf = (unsigned char *)H3K_ALIGNED_ALLOC(H3K_PAGE, s->read_size);
        if (!s->slots[i].buf) return 0;
        memset(s->slots[i].buf, 0, s->read_size); /* fault the pages in now, not mid-stream */
    }
    return 1;
}

int h3k_streamer_open(h3k_streamer **out, const char *path, size_t read_size, int depth) {
    if (!out) return H3K_EINVAL;
    *out = NULL;
    if (!path || read_size == 0 || read_size > ((size_t)1 << 31) || depth < 1 || depth > 64)
        return H3K_EINVAL;
    h3k_streamer *s = (h3k_streamer *)H3K_CALLOC(1, sizeof *s);
    if (!s) return H3K_ENOMEM;
    s->file = H3K_NO_FILE;
    s->depth = depth;
    s->read_size = read_size;
    snprintf(s->path, sizeof s->path, "%s", path);
    int st = file_open(path, &s->file, &s->file_size, s->err, sizeof s->err);
    if (st != H3K_OK) {
        s->file = H3K_NO_FILE;
        streamer_free(s);
        return st;
    }
    if (!streamer_alloc_ring(s)) {
        streamer_free(s);
        return H3K_ENOMEM;
    }
    mutex_init(&s->lock);
    cond_init(&s->changed);
    if (!thread_start(&s->thread, streamer_thread, s)) {
        mutex_destroy(&s->lock);
        cond_destroy(&s->changed);
        streamer_free(s);
        return H3K_ENOMEM;
    }
    *out = s;
    return H3K_OK;
}

void h3k_streamer_close(h3k_streamer *s) {
    if (!s) return;
    mutex_lock(&s->lock);
    s->stop = 1;
    cond_broadcast(&s->changed);
    mutex_unlock(&s->lock);
    thread_join(s->thread);
    mutex_destroy(&s->lock);
    cond_destroy(&s->changed);
    streamer_free(s);
}

uint64_t h3k_streamer_file_size(h3k_streamer *s) { return s ? s->file_size : 0; }

/* Grow the circular range queue, keeping its order (lock held). */
static int queue_grow(h3k_streamer *s) {
    size_t cap, bytes;
    if (!mul_ok(s->q_cap, 2, &cap) || !mul_ok(cap, sizeof(stream_range), &bytes)) return 0;
    stream_range *q = (stream_range *)H3K_MALLOC(bytes);
    if (!q) return 0;
    for (size_t i = 0; i < s->q_count; i++) q[i] = s->queue[(s->q_head + i) % s->q_cap];
    H3K_FREE(s->queue);
    s->queue = q;
    s->q_cap = cap;
    s->q_head = 0;
    return 1;
}

/* A range that does not lie inside the file is refused before any thread
 * touches it (lock held). */
static int range_in_file(h3k_streamer *s, uint64_t offset, uint64_t length) {
    if (offset <= s->file_size && length <= s->file_size - offset) return H3K_OK;
    set_err(s->err, sizeof s->err,
            "range at offset %llu of %llu bytes ends past the end of %s (%llu bytes)",
            (unsigned long long)offset, (unsigned long long)length, s->path,
            (unsigned long long)s->file_size);
    return H3K_ERANGE;
}

static int enqueue(h3k_streamer *s, uint64_t offset, uint64_t length, int advise) {
    if (!s) return H3K_EINVAL;
    mutex_lock(&s->lock);
    int st = range_in_file(s, offset, length);
    if (st == H3K_OK && length && s->q_count == s->q_cap && !queue_grow(s)) {
        set_err(s->err, sizeof s->err, "out of memory queueing a range");
        st = H3K_ENOMEM;
    } else if (st == H3K_OK && length) {
        stream_range r = {offset, length, advise};
        s->queue[(s->q_head + s->q_count) % s->q_cap] = r;
        s->q_count++;
        if (!advise) s->submitted += (length + s->read_size - 1) / s->read_size;
        cond_broadcast(&s->changed);
    }
    mutex_unlock(&s->lock);
    return st;
}

/* Queue [offset, offset+length) for reading into the ring. */
int h3k_streamer_submit(h3k_streamer *s, uint64_t offset, uint64_t length) {
    return enqueue(s, offset, length, 0);
}

int h3k_streamer_advise(h3k_streamer *s, uint64_t offset, uint64_t length) {
    return enqueue(s, offset, length, 1);
}

int h3k_streamer_next(h3k_streamer *s, const void **data, size_t *length, uint64_t *offset) {
    if (!s || !data || !length || !offset) return H3K_EINVAL;
    mutex_lock(&s->lock);
    if (s->holding) { /* hand the previous chunk's buffer back to the reader */
        s->slots[s->take].state = SLOT_FREE;
        s->take = (s->take + 1) % (size_t)s->depth;
        s->holding = 0;
        cond_broadcast(&s->changed);
    }
    if (s->delivered == s->submitted) {
        mutex_unlock(&s->lock);
        return H3K_END;
    }
    stream_slot *slot = &s->slots[s->take];
    if (slot->state != SLOT_FILLED) {
        double t0 = now_seconds();
        while (slot->state != SLOT_FILLED) cond_wait(&s->changed, &s->lock);
        s->wait_s += now_seconds() - t0;
    }
    s->delivered++;
    int st = slot->status;
    if (st != H3K_OK) {
        set_err(s->err, sizeof s->err, "%s: %s", s->path, slot->err);
        slot->state = SLOT_FREE;
        s->take = (s->take + 1) % (size_t)s->depth;
        cond_broadcast(&s->changed);
    } else {
        slot->state = SLOT_HELD;
        s->holding = 1;
        *data = slot->buf;
        *length = slot->len;
        *offset = slot->off;
    }
    mutex_unlock(&s->lock);
    return st;
}

void h3k_streamer_stats(h3k_streamer *s, uint64_t *bytes_read, double *wait_seconds,
                        double *read_seconds, uint64_t *chunks) {
    if (!s) return;
    mutex_lock(&s->lock);
    if (bytes_read) *bytes_read = s->bytes_read;
    if (wait_seconds) *wait_seconds = s->wait_s;
    if (read_seconds) *read_seconds = s->read_s;
    if (chunks) *chunks = s->delivered;
    mutex_unlock(&s->lock);
}

const char *h3k_streamer_last_error(h3k_streamer *s) {
    return s ? copy_err(&s->lock, s->err) : "no streamer";
}

/* ------------------------------------------------- direct reads, widening */

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
    int st = file_read_at(j->s->file, from, m * in, r->offset + (uint64_t)v0 * in, err, cap);
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
            set_err(j->s->err, sizeof j->s->err, "%s: %s", j->s->path, err);
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
        int st = range_in_file(s, r->offset, r->length);
        if (st != H3K_OK) return st;
        if (!in || !out || (r->file_type != r->dst_type && !widen)) {
            set_err(s->err, sizeof s->err,
                    "read %zu: cannot read type %d into type %d (same type, or F16/BF16 into F32)", i,
                    r->file_type, r->dst_type);
            return H3K_EINVAL;
        }
        if (r->length % in || r->length / in > SIZE_MAX / out ||
            (size_t)(r->length / in) * out > r->dst_size || (r->length && !r->dst)) {
            set_err(s->err, sizeof s->err,
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
    if (j.first[count]) pool_run(read_part, &j, product_threads(threads, j.first[count]), 0);
    H3K_FREE(j.first);
    mutex_lock(&s->lock);
    s->read_s += now_seconds() - t0;
    if (j.status == H3K_OK) s->bytes_read += bytes;
    mutex_unlock(&s->lock);
    return j.status;
}

/* ------------------------------------------------------------------ tiles */

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

/* -------------------------------------------------------------- self-test */

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

int h3k_selftest(int *checks, char *msg, size_t msg_size) {
    selftest_state t = {0, msg, msg_size, 0};
    if (msg && msg_size) msg[0] = '\0';
    unsigned need = h3k_build_features(), have = h3k_cpu_features();
    check(&t, (need & have) == need, "this CPU lacks features the %s build needs", h3k_variant());
    if (!t.failed) {
        selftest_fp16(&t);
        selftest_quant(&t);
        selftest_products(&t);
        selftest_arena(&t);
        selftest_tiles(&t);
    }
    if (checks) *checks = t.checks;
    return t.failed ? H3K_ESELFTEST : H3K_OK;
}
