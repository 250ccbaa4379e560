/* libsmx-flushdelay.so: the slow-disk lab of perf/relay-bench --flush-delay
 * (docs/benchmarks.md). Loaded with LD_PRELOAD into every system under test.
 * After the real fsync, fdatasync, syncfs, sync, sync_file_range (with
 * SYNC_FILE_RANGE_WAIT_AFTER) or msync (MS_SYNC) returns, the caller waits
 * for the next emulated device flush:
 *
 *  - emulated flushes are serialized machine-wide: their state is in one
 *    shared file (SMX_FLUSH_SHM, under /dev/shm, mode 0666 so that postfix's
 *    children, running as postfix, can use it too);
 *  - each lasts D = SMX_FLUSH_DELAY_MS milliseconds;
 *  - a caller arriving while a flush runs waits for it to end and then for
 *    the next one, which starts at once and serves everyone waiting by then
 *    (a journal batching its commits).
 *
 * A flush is a deadline in the shared state (CLOCK_MONOTONIC is the same in
 * every process), not a sleeping leader: whichever waiter wakes first after
 * the deadline ends it and, if anyone still needs one, starts the next.
 * Waiters sleep until the deadline outside the lock; a process-shared
 * condition variable would not do: a waiter killed inside
 * pthread_cond_timedwait leaves it hanging every later broadcast (seen with
 * kill -9 in perf/crash-run). So a process killed in the middle costs
 * nothing; a robust mutex covers one killed while holding the lock.
 *
 * D = 0 or unset: every call passes straight through, the file is not used.
 * The environment is read once at load (sendmail and postfix clean theirs
 * later; forks keep the loaded state). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The layout of the shared file (at least 4096 bytes, zero-filled by its
 * creator); perf/lib/smxbench/flushlab.py reads the two counters at offsets
 * 0 and 8. */
struct shared {
    uint64_t flushes;   /* emulated flushes started */
    uint64_t calls;     /* sync calls that waited for one */
    uint64_t done;      /* emulated flushes ended */
    int64_t end_ns;     /* CLOCK_MONOTONIC end of flush `flushes`, while flushes > done */
    _Atomic uint32_t init;  /* 0 fresh (zero-filled), 1 being set up, 2 ready */
    uint32_t pad;
    pthread_mutex_t m;
};

static struct shared* shm;
static int64_t delay_ns;

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);
static int (*real_sync_file_range)(int, off64_t, off64_t, unsigned int);
static int (*real_msync)(void*, size_t, int);

static void die(const char* what) {
    /* A lab that silently passes through would report a fast disk as slow. */
    fprintf(stderr, "libsmx-flushdelay: %s\n", what);
    abort();
}

static void* next(const char* name) {
    void* f = dlsym(RTLD_NEXT, name);
    if (!f) die("dlsym of a sync call failed");
    return f;
}

static void setup_shared(struct shared* s) {
    uint32_t fresh = 0;
    if (atomic_compare_exchange_strong(&s->init, &fresh, 1)) {
        pthread_mutexattr_t ma;
        pthread_mutexattr_init(&ma);
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&s->m, &ma);
        atomic_store(&s->init, 2);
        return;
    }
    for (int i = 0; atomic_load(&s->init) != 2; ++i) {
        if (i > 1000000) die("the shared file was never set up");
        sched_yield();
    }
}

__attribute__((constructor)) static void load(void) {
    real_fsync = (int (*)(int))next("fsync");
    real_fdatasync = (int (*)(int))next("fdatasync");
    real_syncfs = (int (*)(int))next("syncfs");
    real_sync = (void (*)(void))next("sync");
    real_sync_file_range = (int (*)(int, off64_t, off64_t, unsigned int))next("sync_file_range");
    real_msync = (int (*)(void*, size_t, int))next("msync");
    const char* d = getenv("SMX_FLUSH_DELAY_MS");
    if (!d || !*d) return;
    char* end;
    double ms = strtod(d, &end);
    if (*end || ms < 0 || ms > 10000) die("SMX_FLUSH_DELAY_MS must be a number of ms in [0, 10000]");
    if (ms == 0) return;
    const char* path = getenv("SMX_FLUSH_SHM");
    if (!path || !*path) die("SMX_FLUSH_DELAY_MS is set but SMX_FLUSH_SHM is not");
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) die("cannot open SMX_FLUSH_SHM");
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct shared))
        die("SMX_FLUSH_SHM is smaller than its layout");
    void* p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) die("cannot map SMX_FLUSH_SHM");
    shm = p;
    setup_shared(shm);
    delay_ns = (int64_t)(ms * 1e6);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void lock(void) {
    int e = pthread_mutex_lock(&shm->m);
    /* Its holder died inside these few lines: the state is still whole. */
    if (e == EOWNERDEAD) pthread_mutex_consistent(&shm->m);
    else if (e) die("pthread_mutex_lock failed");
}

/* Waits until a flush that started after this call has ended. */
static void await_flush(void) {
    int saved = errno;
    lock();
    ++shm->calls;
    const uint64_t want = shm->flushes + 1;
    for (;;) {
        const int64_t now = now_ns();
        if (shm->flushes > shm->done && now >= shm->end_ns)
            shm->done = shm->flushes;
        if (shm->done >= want) break;
        if (shm->flushes == shm->done) {  /* none running: ours starts now */
            ++shm->flushes;
            shm->end_ns = now + delay_ns;
        }
        struct timespec until = {(time_t)(shm->end_ns / 1000000000), (long)(shm->end_ns % 1000000000)};
        pthread_mutex_unlock(&shm->m);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {}
        lock();
    }
    pthread_mutex_unlock(&shm->m);
    errno = saved;
}

static int after(int rc) {
    if (shm) await_flush();
    return rc;
}

int fsync(int fd) { return after(real_fsync(fd)); }
int fdatasync(int fd) { return after(real_fdatasync(fd)); }
int syncfs(int fd) { return after(real_syncfs(fd)); }

void sync(void) {
    real_sync();
    after(0);
}

int sync_file_range(int fd, off64_t off, off64_t n, unsigned int flags) {
    int rc = real_sync_file_range(fd, off, n, flags);
    return (flags & SYNC_FILE_RANGE_WAIT_AFTER) ? after(rc) : rc;
}

int msync(void* addr, size_t len, int flags) {
    int rc = real_msync(addr, len, flags);
    return (flags & MS_SYNC) ? after(rc) : rc;
}
