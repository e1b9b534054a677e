#ifndef CSTATX_H
#define CSTATX_H

#include <stdint.h>

/// A file's inode number and birth time, from statx(2) (a glibc extension Swift's Glibc module
/// does not show). Returns 0 with both, 1 when the file system keeps no birth time (then only
/// `inode` is set), -1 with errno set when the file cannot be examined.
int cstatx_identity(const char *path, uint64_t *inode, int64_t *birth_seconds, uint32_t *birth_nanoseconds);

#endif
