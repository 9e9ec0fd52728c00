/* streamer.c -- the block streamer's ring: byte ranges of a big file (a
 * safetensors shard) read by a background thread into a ring of
 * page-aligned buffers, so block i+1 loads while block i is in use; and
 * read-ahead advice for the direct reads (direct_read.c), which the same
 * thread passes to the OS.
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - The ring suits a caller that computes elsewhere (a GPU, MPS): the CPU
 *     is free while the device works. Chunks come back in submission order;
 *     a chunk stays the caller's until the next h3k_streamer_next.
 *   - Advice costs the caller nothing: the range is passed on in 512 KiB
 *     pieces (posix_fadvise WILLNEED, F_RDADVISE on macOS) and nothing waits
 *     for it; where there is no such call (Windows) the thread reads it into
 *     a scratch buffer, which puts it in the page cache.
 *   - One lock and one condition variable per handle; every range is checked
 *     against the file's size when it is queued, never by the thread.
 *   - A file larger than the page cache can keep next to the run is read
 *     past the cache (h3k_streamer_bypass_cache): a cyclic scan bigger than
 *     the cache misses every time anyway, and going through it costs a copy
 *     out of the cache and the kernel's reclaim of the pages it evicts, on
 *     the cores the compute needs. Such a read is rounded out to
 *     H3K_UNCACHED_ALIGN and lands that many bytes early in its buffer at
 *     most (slot->pad); a read that fails that way is redone through the
 *     cache, and the ring stays there.
 *
 * Left out on purpose
 * -------------------
 *   - More than one reader thread per file: one disk gains nothing from it.
 *   - Reading ahead of the caller with the CPU (converting in the
 *     background): see direct_read.c.
 */

#include "h3k_internal.h"

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
    if (s->scratch) (void)h3k_file_read_at(s->file, s->scratch, len, off, err, sizeof err);
#endif
}

/* One ring piece into slot: past the page cache through `uncached` when
 * that is open, rounded out to the alignment such reads need; through the
 * cache when it is not, or when that read fails (the ring then stays in
 * the cache: the flag is dropped under the lock). */
static int read_piece(h3k_streamer *s, h3k_file uncached, stream_slot *slot, uint64_t off, size_t len) {
    slot->pad = 0;
    if (uncached != H3K_NO_FILE) {
        size_t pad = (size_t)(off % H3K_UNCACHED_ALIGN), want = pad + len;
        want += (H3K_UNCACHED_ALIGN - want % H3K_UNCACHED_ALIGN) % H3K_UNCACHED_ALIGN;
        if (h3k_file_read_uncached(uncached, slot->buf, want, off - pad, pad + len, slot->err,
                                   sizeof slot->err) == H3K_OK) {
            slot->pad = pad;
            return H3K_OK;
        }
        mutex_lock(&s->lock);
        s->uncached_failed = 1;
        h3k_set_err(s->err, sizeof s->err, "%s: %s; reading through the page cache instead", s->path,
                    slot->err);
        mutex_unlock(&s->lock);
    }
    return h3k_file_read_at(s->file, slot->buf, len, off, slot->err, sizeof slot->err);
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
        h3k_file uncached = s->uncached_failed ? H3K_NO_FILE : s->uncached;
        mutex_unlock(&s->lock);
        double t0 = now_seconds();
        int st = read_piece(s, uncached, slot, off, len);
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
    if (s->uncached != H3K_NO_FILE) h3k_file_close(s->uncached);
    if (s->file != H3K_NO_FILE) h3k_file_close(s->file);
    H3K_FREE(s);
}

/* The ring of page-aligned buffers and the range queue; 0 when out of memory. */
static int streamer_alloc_ring(h3k_streamer *s) {
    s->slots = (stream_slot *)H3K_CALLOC((size_t)s->depth, sizeof *s->slots);
    s->q_cap = 16;
    s->queue = (stream_range *)H3K_CALLOC(s->q_cap, sizeof *s->queue);
    if (!s->slots || !s->queue) return 0;
    /* room for a read rounded out at both ends when it bypasses the page cache */
    size_t bytes = s->read_size + 2 * H3K_UNCACHED_ALIGN;
    for (int i = 0; i < s->depth; i++) {
        s->slots[i].buf = (unsigned char *)H3K_ALIGNED_ALLOC(H3K_UNCACHED_ALIGN, bytes);
        if (!s->slots[i].buf) return 0;
        memset(s->slots[i].buf, 0, bytes); /* fault the pages in now, not mid-stream */
    }
    return 1;
}

/* The most h3k_streamer_open takes: one read of 2 GiB (a single read call
 * moves at most that much on every system), a ring of 64 buffers. Callers
 * ask h3k_streamer_limits rather than keep a copy. */
#define H3K_STREAMER_MAX_READ ((size_t)1 << 31)
#define H3K_STREAMER_MAX_DEPTH 64

int h3k_streamer_limits(uint64_t *max_read_size, int *max_depth) {
    if (!max_read_size || !max_depth) return H3K_EINVAL;
    *max_read_size = (uint64_t)H3K_STREAMER_MAX_READ;
    *max_depth = H3K_STREAMER_MAX_DEPTH;
    return H3K_OK;
}

int h3k_streamer_open(h3k_streamer **out, const char *path, size_t read_size, int depth) {
    if (!out) return H3K_EINVAL;
    *out = NULL;
    if (!path || read_size == 0 || read_size > H3K_STREAMER_MAX_READ || depth < 1 ||
        depth > H3K_STREAMER_MAX_DEPTH)
        return H3K_EINVAL;
    h3k_streamer *s = (h3k_streamer *)H3K_CALLOC(1, sizeof *s);
    if (!s) return H3K_ENOMEM;
    s->file = H3K_NO_FILE;
    s->uncached = H3K_NO_FILE;
    s->depth = depth;
    s->read_size = read_size;
    snprintf(s->path, sizeof s->path, "%s", path);
    int st = h3k_file_open(path, &s->file, &s->file_size, s->err, sizeof s->err);
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

int h3k_streamer_bypass_cache(h3k_streamer *s) {
    if (!s) return H3K_EINVAL;
    mutex_lock(&s->lock);
    int open_already = s->uncached != H3K_NO_FILE;
    mutex_unlock(&s->lock);
    if (open_already) return h3k_streamer_bypassing(s) ? H3K_OK : H3K_EIO;
    char err[256];
    h3k_file f = H3K_NO_FILE;
    int st = h3k_file_open_uncached(s->path, &f, err, sizeof err);
    mutex_lock(&s->lock);
    if (st == H3K_OK) s->uncached = f;
    else h3k_set_err(s->err, sizeof s->err, "%s", err);
    mutex_unlock(&s->lock);
    return st;
}

int h3k_streamer_bypassing(h3k_streamer *s) {
    if (!s) return 0;
    mutex_lock(&s->lock);
    int on = s->uncached != H3K_NO_FILE && !s->uncached_failed;
    mutex_unlock(&s->lock);
    return on;
}

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
int h3k_range_in_file(h3k_streamer *s, uint64_t offset, uint64_t length) {
    if (offset <= s->file_size && length <= s->file_size - offset) return H3K_OK;
    h3k_set_err(s->err, sizeof s->err,
            "range at offset %llu of %llu bytes ends past the end of %s (%llu bytes)",
            (unsigned long long)offset, (unsigned long long)length, s->path,
            (unsigned long long)s->file_size);
    return H3K_ERANGE;
}

static int enqueue(h3k_streamer *s, uint64_t offset, uint64_t length, int advise) {
    if (!s) return H3K_EINVAL;
    mutex_lock(&s->lock);
    int st = h3k_range_in_file(s, offset, length);
    if (st == H3K_OK && length && s->q_count == s->q_cap && !queue_grow(s)) {
        h3k_set_err(s->err, sizeof s->err, "out of memory queueing a range");
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
        h3k_set_err(s->err, sizeof s->err, "%s: %s", s->path, slot->err);
        slot->state = SLOT_FREE;
        s->take = (s->take + 1) % (size_t)s->depth;
        cond_broadcast(&s->changed);
    } else {
        slot->state = SLOT_HELD;
        s->holding = 1;
        *data = slot->buf + slot->pad;
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
    return s ? h3k_copy_err(&s->lock, s->err) : "no streamer";
}
