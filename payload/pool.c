/* pool.c -- the one piece of process-wide state: a pool of worker threads,
 * started on first use and kept, that runs any task split in pieces (the
 * products and the streamer's direct reads).
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - At most one thread per CPU in this process's affinity mask
 *     (platform.c), whatever is asked; the calling thread takes piece 0.
 *   - Idle workers poll (yielding the CPU) for 2 ms after a task before they
 *     sleep: products come back to back, and a sleeping virtual CPU can take
 *     longer to wake than a product. A block read asks them to sleep at once
 *     (the caller's own compute wants every CPU next).
 *   - Callers from several threads take turns (one task at a time uses every
 *     CPU anyway); a forked child gets a fresh pool (pthread_atfork).
 *   - It is not reentrant: a task must not start another.
 *
 * Left out on purpose
 * -------------------
 *   - A pool that shrinks, or per-caller pools. The workers are never
 *     stopped at exit; h3k_pool_shutdown joins them for leak checkers and
 *     before the library is unloaded (its workers run its code).
 */

#include "h3k_internal.h"

/* A spin-loop hint, for the polls below. */
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
void h3k_pool_run(h3k_task_fn fn, void *arg, int parts, int spin) {
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

/* Pieces for a product of `rows` rows: `threads`, or with 0 one per CPU
 * this process may use; never more than rows. (The pool runs at most one
 * thread per CPU whatever is asked.) */
int h3k_pool_parts(int threads, size_t rows) {
    int nt = threads > 0 ? threads : h3k_cpu_count();
    if (nt > H3K_MAX_THREADS) nt = H3K_MAX_THREADS;
    if ((size_t)nt > rows) nt = (int)rows;
    return nt;
}
