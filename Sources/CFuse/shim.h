#ifndef BUCKETFS_CFUSE_SHIM_H
#define BUCKETFS_CFUSE_SHIM_H

// libfuse 3.14 (Debian bookworm/trixie libfuse3-dev); 312 selects the fuse_loop_config API.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <sys/stat.h>
#include <errno.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

// fuse_session_loop_mt is a function-like macro (versioned symbol), which Swift cannot import.
// Each worker reads and answers on its own clone of /dev/fuse: the kernel then keeps one queue
// of requests in progress per worker rather than one that every worker locks (measured: ~10 %
// more editor saves per second while the sync engine is busy, as with libfuse's passthrough_ll).
static inline int cfuse_session_loop_mt(struct fuse_session *session, unsigned int max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) {
        return -ENOMEM;
    }
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    fuse_loop_cfg_set_clone_fd(config, 1);
    int result = fuse_session_loop_mt(session, config);
    fuse_loop_cfg_destroy(config);
    return result;
}

// The calling thread's kernel name (the first 15 bytes); prctl is variadic, which Swift cannot call.
static inline void cfuse_name_this_thread(const char *name) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
}

// A set of CPUs (up to 1024), as sched_setaffinity(2) takes it.
typedef struct {
    uint64_t bits[16];
} cfuse_cpu_set;

// The CPUs thread `tid` (0: the calling one) may run on; -1 on failure. Raw system calls, since
// glibc's wrappers and CPU_* macros need _GNU_SOURCE, which Swift's Glibc module may not have set.
static inline int cfuse_get_cpus(int tid, cfuse_cpu_set *set) {
    memset(set, 0, sizeof(*set));
    return syscall(SYS_sched_getaffinity, tid, sizeof(set->bits), set->bits) < 0 ? -1 : 0;
}

// Lets thread `tid` (0: the calling one) run on `set` only; -1 on failure (it has ended, say).
static inline int cfuse_set_cpus(int tid, const cfuse_cpu_set *set) {
    return syscall(SYS_sched_setaffinity, tid, sizeof(set->bits), set->bits) < 0 ? -1 : 0;
}

// Bit-fields of struct fuse_file_info, set in C so Swift never depends on their layout.
static inline void cfuse_file_info_set_keep_cache(struct fuse_file_info *info, int value) {
    info->keep_cache = value ? 1 : 0;
}

static inline void cfuse_file_info_set_noflush(struct fuse_file_info *info, int value) {
    info->noflush = value ? 1 : 0;
}

static inline void cfuse_file_info_set_cache_readdir(struct fuse_file_info *info, int value) {
    info->cache_readdir = value ? 1 : 0;
}

static inline void cfuse_file_info_set_direct_io(struct fuse_file_info *info, int value) {
    info->direct_io = value ? 1 : 0;
}

static inline void cfuse_conn_want(struct fuse_conn_info *conn, unsigned int capability) {
    if (conn->capable & capability) {
        conn->want |= capability;
    }
}

#endif
