/* arena.c -- one region reserved, touched and (where allowed) locked up
 * front, with bump allocation inside it: the preload budget is paid once,
 * at start-up, and cannot be paged out mid-inference.
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - The region is committed page by page at open (one byte written per
 *     page), so the OS backs it now; a refused lock (RLIMIT_MEMLOCK, a
 *     working-set limit) is not an error: the arena works unlocked and its
 *     last-error text says why and how to allow it.
 *   - Each handle has its own lock, so one arena can be shared by threads.
 *
 * Left out on purpose
 * -------------------
 *   - Freeing single allocations: only h3k_arena_reset, all at once.
 *   - Growing: the capacity is the plan's, fixed at open.
 */

#include "h3k_internal.h"

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
    h3k_set_err(a->err, sizeof a->err,
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
    h3k_set_err(a->err, sizeof a->err,
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
        h3k_set_err(a->err, sizeof a->err, "alignment %zu is not a power of two", align);
    } else {
        uintptr_t start = (uintptr_t)a->base + a->used;
        uintptr_t aligned = (start + (align - 1)) & ~(uintptr_t)(align - 1);
        size_t off = (size_t)(aligned - (uintptr_t)a->base), end;
        if (aligned < start || !add_ok(off, size, &end) || end > a->capacity) {
            h3k_set_err(a->err, sizeof a->err,
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
const char *h3k_arena_last_error(h3k_arena *a) { return a ? h3k_copy_err(&a->lock, a->err) : "no arena"; }
