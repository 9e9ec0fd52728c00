/* h3k_internal.h -- what the units of the library share, and nothing the
 * caller sees (the public API is h3k.h alone).
 *
 * What it holds
 * -------------
 *   - the system headers and the SIMD level of this build (H3K_X86,
 *     H3K_AVX2, H3K_NEON), decided once here so every unit agrees;
 *   - floating point contraction off, in every unit (see kernels.c);
 *   - the allocator macros and overflow-checked size arithmetic;
 *   - the platform shims: mutexes, condition variables, threads, a
 *     monotonic clock, atomic ints, files read at an offset, and each
 *     handle's last-error text (platform.c);
 *   - the internal calls between units: the worker pool (pool.c), the
 *     int16 activations and dot kernels (kernels.c), and the streamer's
 *     fields, shared by its ring (streamer.c) and its direct reads
 *     (direct_read.c).
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Every unit includes this header first, before any system header, so
 *     _GNU_SOURCE and the pragmas hold for the whole unit.
 *   - The shims are static inline: tiny, and the compiler sees through them.
 *     What is not tiny or keeps state (last-error copies, files, the pool)
 *     is a function with the h3k_ prefix, hidden from the library's exports
 *     (-fvisibility=hidden; only H3K_API functions are exported on Windows).
 *
 * Left out on purpose
 * -------------------
 *   - The arena's fields: only arena.c uses them, so they live there.
 *   - Any use from outside the library: the tests and the self-test use
 *     h3k.h only.
 */
#ifndef H3K_INTERNAL_H
#define H3K_INTERNAL_H

#if !defined(_WIN32)
#define _GNU_SOURCE
#define _DARWIN_C_SOURCE
#endif

#define H3K_BUILDING 1 /* h3k.h: export the H3K_API calls from the DLL on Windows */
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
static inline void *h3k_posix_aligned(size_t align, size_t n) {
    void *p = NULL;
    return posix_memalign(&p, align, n) == 0 ? p : NULL;
}
#define H3K_ALIGNED_ALLOC(al, n) h3k_posix_aligned((al), (n))
#define H3K_ALIGNED_FREE(p) free(p)
#endif

#define H3K_PAGE 4096u
#define H3K_MAX_THREADS 256

/* a * b without overflow; returns 0 and leaves *out alone when it would. */
static inline int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

static inline int add_ok(size_t a, size_t b, size_t *out) {
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

/* --------------------------------------------------- threads, time, atomics */

#if defined(_WIN32)
typedef CRITICAL_SECTION h3k_mutex;
typedef CONDITION_VARIABLE h3k_cond;
typedef HANDLE h3k_thread;
typedef DWORD(WINAPI *h3k_thread_fn)(LPVOID);
#define H3K_THREAD_FUNC(name) static DWORD WINAPI name(LPVOID arg)
#define H3K_THREAD_END return 0
static inline void mutex_init(h3k_mutex *m) { InitializeCriticalSection(m); }
static inline void mutex_destroy(h3k_mutex *m) { DeleteCriticalSection(m); }
static inline void mutex_lock(h3k_mutex *m) { EnterCriticalSection(m); }
static inline void mutex_unlock(h3k_mutex *m) { LeaveCriticalSection(m); }
static inline void cond_init(h3k_cond *c) { InitializeConditionVariable(c); }
static inline void cond_destroy(h3k_cond *c) { (void)c; }
static inline void cond_wait(h3k_cond *c, h3k_mutex *m) { SleepConditionVariableCS(c, m, INFINITE); }
static inline void cond_broadcast(h3k_cond *c) { WakeAllConditionVariable(c); }
static inline int thread_start(h3k_thread *t, h3k_thread_fn fn, void *arg) {
    *t = CreateThread(NULL, 0, fn, arg, 0, NULL);
    return *t != NULL;
}
static inline void thread_join(h3k_thread t) {
    WaitForSingleObject(t, INFINITE);
    CloseHandle(t);
}
static inline void thread_yield(void) { SwitchToThread(); }
static inline double now_seconds(void) {
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
static inline void mutex_init(h3k_mutex *m) { pthread_mutex_init(m, NULL); }
static inline void mutex_destroy(h3k_mutex *m) { pthread_mutex_destroy(m); }
static inline void mutex_lock(h3k_mutex *m) { pthread_mutex_lock(m); }
static inline void mutex_unlock(h3k_mutex *m) { pthread_mutex_unlock(m); }
static inline void cond_init(h3k_cond *c) { pthread_cond_init(c, NULL); }
static inline void cond_destroy(h3k_cond *c) { pthread_cond_destroy(c); }
static inline void cond_wait(h3k_cond *c, h3k_mutex *m) { pthread_cond_wait(c, m); }
static inline void cond_broadcast(h3k_cond *c) { pthread_cond_broadcast(c); }
static inline int thread_start(h3k_thread *t, h3k_thread_fn fn, void *arg) {
    return pthread_create(t, NULL, fn, arg) == 0;
}
static inline void thread_join(h3k_thread t) { pthread_join(t, NULL); }
static inline void thread_yield(void) { sched_yield(); }
static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
#endif

/* Atomic ints (load/store with acquire/release, a relaxed fetch-add): for
 * the counters threads poll or take without a lock. */
#if defined(_MSC_VER) && !defined(__clang__)
typedef volatile long h3k_atomic;
static inline int atomic_get(h3k_atomic *v) { return (int)InterlockedCompareExchange(v, 0, 0); }
static inline void atomic_put(h3k_atomic *v, int x) { InterlockedExchange(v, x); }
static inline int atomic_take(h3k_atomic *v) { return (int)InterlockedExchangeAdd(v, 1); }
#else
typedef int h3k_atomic;
static inline int atomic_get(h3k_atomic *v) { return __atomic_load_n(v, __ATOMIC_ACQUIRE); }
static inline void atomic_put(h3k_atomic *v, int x) { __atomic_store_n(v, x, __ATOMIC_RELEASE); }
/* Returns the old value and adds 1. */
static inline int atomic_take(h3k_atomic *v) { return __atomic_fetch_add(v, 1, __ATOMIC_RELAXED); }
#endif

/* ------------------------------------------- errors and files (platform.c) */

/* Write a handle's last-error text (always NUL-terminated, truncated).
 * Callers hold the handle's lock, or own the handle alone (while opening). */
void H3K_PRINTF(3, 4) h3k_set_err(char *buf, size_t cap, const char *fmt, ...);

/* What *_last_error returns: the handle's text copied under its lock into
 * a buffer of the calling thread. */
const char *h3k_copy_err(h3k_mutex *lock, const char *err);

#if defined(_WIN32)
typedef HANDLE h3k_file;
#define H3K_NO_FILE INVALID_HANDLE_VALUE
#else
typedef int h3k_file;
#define H3K_NO_FILE (-1)
#endif

int h3k_file_open(const char *path, h3k_file *f, uint64_t *size, char *err, size_t cap);
void h3k_file_close(h3k_file f);
int h3k_file_read_at(h3k_file f, void *buf, size_t len, uint64_t off, char *err, size_t cap);
/* Reads past the page cache: offsets, lengths and buffers on this boundary
 * (4 KiB covers the logical block size of every disk in use). */
#define H3K_UNCACHED_ALIGN ((size_t)4096)
int h3k_file_open_uncached(const char *path, h3k_file *f, char *err, size_t cap);
int h3k_file_read_uncached(h3k_file f, void *buf, size_t want, uint64_t off, size_t need, char *err,
                           size_t cap);

/* ------------------------------------------------------ the pool (pool.c) */

/* A task split into `parts` pieces; piece `part` runs on some thread. */
typedef void (*h3k_task_fn)(void *arg, int part, int parts);

/* Run fn(arg, p, parts) for every p and return when all are done; spin:
 * whether the workers poll for the next task afterwards (see pool.c). */
void h3k_pool_run(h3k_task_fn fn, void *arg, int parts, int spin);

/* Pieces for a task of n units: `threads`, or with 0 one per CPU this
 * process may use; never more than n. */
int h3k_pool_parts(int threads, size_t n);

/* ------------------------------------------------ kernels (kernels.c) */

static inline size_t block_bytes(int kind) {
    return kind == H3K_Q8_0 ? 2 + H3K_BLOCK : kind == H3K_Q4_0 ? 2 + H3K_BLOCK / 2 : 0;
}

/* Activations of a product: each 32-value block of x as int16 with its own
 * fp32 scale (kernels.c says why). */
typedef struct {
    const int16_t *q; /* cols values */
    const float *s;   /* cols / 32 scales */
} h3k_act16;

void h3k_act16_quantize(const float *x, size_t n, int16_t *q, float *s);
/* One row of quantized weights (nb blocks) times x: the build's kernel, or
 * the portable scalar one the others are checked against. */
float h3k_dot_row(int kind, const uint8_t *row, h3k_act16 x, size_t nb);
float h3k_dot_scalar(int kind, const uint8_t *row, h3k_act16 x, size_t nb);

/* ------------------------------------ the streamer (streamer.c, direct_read.c) */

enum { SLOT_FREE, SLOT_READING, SLOT_FILLED, SLOT_HELD };

typedef struct {
    unsigned char *buf;
    size_t len, pad; /* the chunk starts pad bytes into buf (an uncached read starts on a boundary) */
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
    h3k_file uncached; /* H3K_NO_FILE unless the ring's reads bypass the page cache (h3k_streamer_bypass_cache) */
    uint64_t file_size;
    size_t read_size;
    int depth, stop, holding;
    int uncached_failed; /* an uncached read failed: the ring went back to the page cache */
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

/* H3K_OK when [offset, offset+length) lies inside the file, else
 * H3K_ERANGE with the error text set (lock held). */
int h3k_range_in_file(h3k_streamer *s, uint64_t offset, uint64_t length);

#endif
