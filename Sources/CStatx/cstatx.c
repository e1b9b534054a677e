#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>

#include "cstatx.h"

int cstatx_identity(const char *path, uint64_t *inode, int64_t *birth_seconds, uint32_t *birth_nanoseconds) {
    struct statx buffer;
    if (statx(AT_FDCWD, path, 0, STATX_INO | STATX_BTIME, &buffer) != 0) return -1;
    *inode = buffer.stx_ino;
    if (!(buffer.stx_mask & STATX_BTIME)) return 1;
    *birth_seconds = buffer.stx_btime.tv_sec;
    *birth_nanoseconds = buffer.stx_btime.tv_nsec;
    return 0;
}
