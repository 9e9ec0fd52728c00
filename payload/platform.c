/* platform.c -- what differs between Linux, macOS and Windows, behind one
 * set of calls: how many CPUs this process may use, which CPU features it
 * has, files read at an offset, and each handle's last-error text. The
 * thread, lock, clock and atomic shims are static inline in h3k_internal.h.
 *
 * Assumptions made on purpose
 * ---------------------------
 *   - Threads: at most one per CPU in this process's affinity mask
 *     (taskset, cpusets, a container's CPU set), whatever is asked; where
 *     the OS has no mask (macOS, the BSDs), every online CPU.
 *   - CPU features are read at run time (cpuid and XCR0 on x86, the
 *     auxiliary vector or sysctl on arm64), so the loader can refuse a
 *     tuned build the CPU cannot run before it runs a single instruction.
 *   - Paths are UTF-8 everywhere (converted to UTF-16 on Windows), files
 *     are read with pread / ReadFile at an offset, never a shared file
 *     position, so threads read one file at once.
 *
 * Left out on purpose
 * -------------------
 *   - CPU quotas (cgroup cpu.max, docker --cpus): only the affinity mask is
 *     read; a quota leaves the thread count at the CPUs one may run on.
 *   - Uncached reads (O_DIRECT, F_NOCACHE, FILE_FLAG_NO_BUFFERING) for
 *     anything but the streamer's ring: the page cache is what the user's
 *     later runs hit. The ring rounds its reads to the alignment such reads
 *     need and asks for them only for a file the page cache cannot hold.
 */

#include "h3k_internal.h"

/* ------------------------------------------------------------------ errors */

void h3k_set_err(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* What *_last_error returns: the handle's text copied under its lock into
 * a buffer of the calling thread, so no thread writes that buffer while its
 * owner reads it. Valid until the same thread's next *_last_error call. */
static H3K_TLS char err_copy[256];

const char *h3k_copy_err(h3k_mutex *lock, const char *err) {
    mutex_lock(lock);
    snprintf(err_copy, sizeof err_copy, "%s", err);
    mutex_unlock(lock);
    return err_copy;
}

/* -------------------------------------------------------------------- CPUs */

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

/* ---------------------------------------------------------- file access */

/* Open read-only and report the size; paths are UTF-8 everywhere. */
int h3k_file_open(const char *path, h3k_file *f, uint64_t *size, char *err, size_t cap) {
#if defined(_WIN32)
    wchar_t wpath[4096];
    if (!MultiByteToWideChar(CP_UTF8, 0, path, -1, wpath, 4096)) {
        h3k_set_err(err, cap, "path is not valid UTF-8 or longer than 4095 characters: %s", path);
        return H3K_EINVAL;
    }
    *f = CreateFileW(wpath, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                     FILE_FLAG_SEQUENTIAL_SCAN, NULL);
    LARGE_INTEGER sz;
    if (*f == INVALID_HANDLE_VALUE || !GetFileSizeEx(*f, &sz)) {
        h3k_set_err(err, cap, "cannot open %s (error %lu)", path, (unsigned long)GetLastError());
        if (*f != INVALID_HANDLE_VALUE) CloseHandle(*f);
        return H3K_EIO;
    }
    *size = (uint64_t)sz.QuadPart;
#else
    struct stat st;
    *f = open(path, O_RDONLY | O_CLOEXEC);
    if (*f < 0 || fstat(*f, &st) != 0 || !S_ISREG(st.st_mode)) {
        h3k_set_err(err, cap, "cannot open %s: %s", path, *f < 0 ? strerror(errno) : "not a regular file");
        if (*f >= 0) close(*f);
        return H3K_EIO;
    }
    *size = (uint64_t)st.st_size;
#endif
    return H3K_OK;
}

void h3k_file_close(h3k_file f) {
#if defined(_WIN32)
    CloseHandle(f);
#else
    close(f);
#endif
}

/* A second handle on path whose reads bypass the OS's page cache (Linux
 * O_DIRECT, macOS F_NOCACHE, Windows FILE_FLAG_NO_BUFFERING). Such reads
 * must start, end and land on H3K_UNCACHED_ALIGN boundaries: the caller
 * rounds them (h3k_file_read_uncached). H3K_EUNSUPPORTED where the system
 * or the file system has no such reads (tmpfs before Linux 6.6, say). */
int h3k_file_open_uncached(const char *path, h3k_file *f, char *err, size_t cap) {
#if defined(_WIN32)
    wchar_t wpath[4096];
    if (!MultiByteToWideChar(CP_UTF8, 0, path, -1, wpath, 4096)) {
        h3k_set_err(err, cap, "path is not valid UTF-8 or longer than 4095 characters: %s", path);
        return H3K_EINVAL;
    }
    *f = CreateFileW(wpath, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                     FILE_FLAG_NO_BUFFERING | FILE_FLAG_SEQUENTIAL_SCAN, NULL);
    if (*f == INVALID_HANDLE_VALUE) {
        h3k_set_err(err, cap, "cannot open %s unbuffered (error %lu)", path, (unsigned long)GetLastError());
        return H3K_EUNSUPPORTED;
    }
#elif defined(__APPLE__)
    *f = open(path, O_RDONLY | O_CLOEXEC);
    if (*f < 0 || fcntl(*f, F_NOCACHE, 1) != 0) {
        h3k_set_err(err, cap, "cannot open %s uncached: %s", path, strerror(errno));
        if (*f >= 0) close(*f);
        *f = H3K_NO_FILE;
        return H3K_EUNSUPPORTED;
    }
#elif defined(O_DIRECT)
    *f = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (*f < 0) {
        h3k_set_err(err, cap, "cannot open %s with O_DIRECT: %s", path, strerror(errno));
        *f = H3K_NO_FILE;
        return H3K_EUNSUPPORTED;
    }
#else
    (void)path, (void)f;
    h3k_set_err(err, cap, "this system has no reads that bypass the page cache");
    return H3K_EUNSUPPORTED;
#endif
    return H3K_OK;
}

/* Read the aligned stretch [off, off+want) through an uncached handle into
 * buf (aligned too). It may end early at the end of the file, but never
 * before off+need: the bytes the caller asked for. */
int h3k_file_read_uncached(h3k_file f, void *buf, size_t want, uint64_t off, size_t need, char *err,
                           size_t cap) {
    unsigned char *p = (unsigned char *)buf;
    size_t got = 0;
    while (got < need) {
        size_t ask = want - got > ((size_t)1 << 30) ? ((size_t)1 << 30) : want - got;
#if defined(_WIN32)
        DWORD n32 = 0;
        OVERLAPPED ov;
        memset(&ov, 0, sizeof ov);
        ov.Offset = (DWORD)((off + got) & 0xffffffffu);
        ov.OffsetHigh = (DWORD)((off + got) >> 32);
        if (!ReadFile(f, p + got, (DWORD)ask, &n32, &ov) && GetLastError() != ERROR_HANDLE_EOF) {
            h3k_set_err(err, cap, "unbuffered read failed at offset %llu (error %lu)",
                    (unsigned long long)(off + got), (unsigned long)GetLastError());
            return H3K_EIO;
        }
        size_t n = n32;
#else
        ssize_t n = pread(f, p + got, ask, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            h3k_set_err(err, cap, "uncached read failed at offset %llu: %s", (unsigned long long)(off + got),
                    strerror(errno));
            return H3K_EIO;
        }
#endif
        if (n == 0) {
            h3k_set_err(err, cap, "the file ended at offset %llu, before the requested range did",
                    (unsigned long long)(off + got));
            return H3K_ERANGE;
        }
        got += (size_t)n;
        if (got < need && got % H3K_UNCACHED_ALIGN) { /* a short read mid-file leaves the next one unaligned */
            h3k_set_err(err, cap, "uncached read at offset %llu came back short", (unsigned long long)off);
            return H3K_EIO;
        }
    }
    return H3K_OK;
}

/* Read exactly len bytes at off; a file that ends early is an error. */
int h3k_file_read_at(h3k_file f, void *buf, size_t len, uint64_t off, char *err, size_t cap) {
    unsigned char *p = (unsigned char *)buf;
    while (len) {
#if defined(_WIN32)
        DWORD want = len > (1u << 30) ? (1u << 30) : (DWORD)len, got = 0;
        OVERLAPPED ov;
        memset(&ov, 0, sizeof ov);
        ov.Offset = (DWORD)(off & 0xffffffffu);
        ov.OffsetHigh = (DWORD)(off >> 32);
        if (!ReadFile(f, p, want, &got, &ov) && GetLastError() != ERROR_HANDLE_EOF) {
            h3k_set_err(err, cap, "read failed at offset %llu (error %lu)", (unsigned long long)off,
                    (unsigned long)GetLastError());
            return H3K_EIO;
        }
        size_t n = got;
#else
        size_t want = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t n = pread(f, p, want, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            h3k_set_err(err, cap, "read failed at offset %llu: %s", (unsigned long long)off, strerror(errno));
            return H3K_EIO;
        }
#endif
        if (n == 0) {
            h3k_set_err(err, cap, "the file ended at offset %llu, before the requested range did",
                    (unsigned long long)off);
            return H3K_ERANGE;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return H3K_OK;
}

