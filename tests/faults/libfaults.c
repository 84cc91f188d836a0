/* Faults injected into one process by LD_PRELOAD (issue 19): a wall clock that jumps and a disk
 * that is slow, with nothing changed in the code under test.
 *
 * The control block is a 16-byte file named by TIDELOG_FAULTS_CONTROL, mapped shared, so the test
 * changes the faults while the process runs (tests/faults/injection.py writes it):
 *   int64 at 0: nanoseconds added to CLOCK_REALTIME (clock_gettime, gettimeofday, time);
 *   int64 at 8: microseconds every write or sync of a regular file sleeps first (a slow disk).
 * Without the variable, or with zeros, every call goes straight through. TIDELOG_FAULTS_SLOW_DIR, if
 * set, limits the slow disk to files under that folder (the data directory, not the log file).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *control;
static const char *slow_dir;
static size_t slow_dir_length;

__attribute__((constructor)) static void faults_init(void) {
    slow_dir = getenv("TIDELOG_FAULTS_SLOW_DIR");
    slow_dir_length = slow_dir ? strlen(slow_dir) : 0;
    const char *path = getenv("TIDELOG_FAULTS_CONTROL");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    void *mapped = mmap(NULL, 16, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) control = (volatile int64_t *)mapped;
}

static int64_t clock_offset_ns(void) { return control ? control[0] : 0; }

static void slow_disk(int fd) {
    int64_t delay_us = control ? control[1] : 0;
    struct stat st;
    if (delay_us <= 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (slow_dir_length > 0) {
        char link[64], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t length = readlink(link, target, sizeof target - 1);
        if (length < 0 || (size_t)length < slow_dir_length || strncmp(target, slow_dir, slow_dir_length) != 0) return;
    }
    usleep((useconds_t)delay_us);
}

#define REAL(name) static __typeof__(name) *real_##name; if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

int clock_gettime(clockid_t clock, struct timespec *ts) {
    REAL(clock_gettime);
    int result = real_clock_gettime(clock, ts);
    int64_t offset = clock_offset_ns();
    if (result == 0 && offset != 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset;
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    REAL(gettimeofday);
    int result = real_gettimeofday(tv, tz);
    int64_t offset = clock_offset_ns();
    if (result == 0 && offset != 0) {
        int64_t us = (int64_t)tv->tv_sec * 1000000LL + tv->tv_usec + offset / 1000;
        tv->tv_sec = us / 1000000LL;
        tv->tv_usec = us % 1000000LL;
    }
    return result;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}

ssize_t write(int fd, const void *buf, size_t count) { REAL(write); slow_disk(fd); return real_write(fd, buf, count); }
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite); slow_disk(fd); return real_pwrite(fd, buf, count, offset);
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64); slow_disk(fd); return real_pwrite64(fd, buf, count, offset);
}
ssize_t writev(int fd, const struct iovec *iov, int count) { REAL(writev); slow_disk(fd); return real_writev(fd, iov, count); }
int fsync(int fd) { REAL(fsync); slow_disk(fd); return real_fsync(fd); }
int fdatasync(int fd) { REAL(fdatasync); slow_disk(fd); return real_fdatasync(fd); }
