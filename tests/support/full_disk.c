/* A full disk under $FULL_DISK_DIR, for tests (LD_PRELOAD): a write that needs
   blocks the disk does not have fails with ENOSPC, as on a real full disk.
   $FULL_DISK_FREE bytes are free at start (default 0); a write within a file's
   allocated blocks needs none, and a truncation gives its blocks back. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long free_bytes = -1; /* FULL_DISK_FREE: bytes free at start (default 0) */

/* The bytes allocated to ``fd`` when it is a file on the full disk, else -1. */
static long long on_disk(int fd) {
    const char *dir = getenv("FULL_DISK_DIR");
    struct stat st;
    char link[64], path[4096];
    ssize_t n;
    size_t len;
    if (dir == NULL || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n < 0) return -1;
    path[n] = 0;
    len = strlen(dir);
    if (strncmp(path, dir, len) != 0 || (path[len] != 0 && path[len] != '/')) return -1;
    if (free_bytes < 0) {
        const char *text = getenv("FULL_DISK_FREE");
        free_bytes = text ? atoll(text) : 0;
    }
    return (long long)st.st_blocks * 512;
}

/* Whether writing ``count`` bytes at ``start`` (-1: the file offset) needs
   blocks the disk does not have; if it has them, they are taken. */
static int needs_blocks(int fd, off_t start, size_t count) {
    long long allocated = on_disk(fd), end, wanted;
    if (allocated < 0 || count == 0) return 0;
    if (start < 0) start = lseek(fd, 0, SEEK_CUR);
    end = (long long)start + (long long)count;
    if (end <= allocated) return 0;
    wanted = ((end - allocated + 4095) / 4096) * 4096;
    if (__atomic_sub_fetch(&free_bytes, wanted, __ATOMIC_SEQ_CST) >= 0) return 0;
    __atomic_add_fetch(&free_bytes, wanted, __ATOMIC_SEQ_CST);
    return 1;
}

/* A truncation gives the blocks it frees back to the disk. */
static void credit(int fd, long long before) {
    long long after = on_disk(fd);
    if (before >= 0 && after >= 0 && before > after)
        __atomic_add_fetch(&free_bytes, before - after, __ATOMIC_SEQ_CST);
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    if (needs_blocks(fd, -1, count)) { errno = ENOSPC; return -1; }
    return real(fd, buf, count);
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite);
    if (needs_blocks(fd, offset, count)) { errno = ENOSPC; return -1; }
    return real(fd, buf, count, offset);
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64);
    if (needs_blocks(fd, offset, count)) { errno = ENOSPC; return -1; }
    return real(fd, buf, count, offset);
}
int fallocate(int fd, int mode, off_t offset, off_t len) {
    REAL(fallocate);
    if (needs_blocks(fd, offset, (size_t)len)) { errno = ENOSPC; return -1; }
    return real(fd, mode, offset, len);
}
int posix_fallocate(int fd, off_t offset, off_t len) {
    REAL(posix_fallocate);
    if (needs_blocks(fd, offset, (size_t)len)) return ENOSPC;
    return real(fd, offset, len);
}
int ftruncate(int fd, off_t length) {
    REAL(ftruncate);
    long long before = on_disk(fd);
    int result = real(fd, length);
    if (result == 0) credit(fd, before);
    return result;
}
int ftruncate64(int fd, off_t length) {
    REAL(ftruncate64);
    long long before = on_disk(fd);
    int result = real(fd, length);
    if (result == 0) credit(fd, before);
    return result;
}
