// The grep baseline of scripts/bench-fs: a passthrough of a local directory on libfuse's
// low-level API, serving it as libfuse's example passthrough_ll does with its default options
// (cache=normal: entries and attributes cached for 1 s, no kept page cache across opens;
// readdirplus; the multi-threaded loop with 10 idle threads, no clone fds). It is read-only:
// lookup, getattr, readdir(plus), open, read and their releases are what `grep -r` sends.
// Each inode holds the file's path, where passthrough_ll's holds an O_PATH descriptor: the kernel
// keeps an inode for each of the 100,000 files grep reads, more than the descriptor limit here
// (passthrough_ll itself fails with EMFILE on such a tree); files are read with pread.
//
// Built by scripts/bench-fs: cc -O2 passthrough_ll.c $(pkg-config fuse3 --cflags --libs)
// Run: passthrough_ll SOURCE MOUNTPOINT (foreground; fusermount3 -u MOUNTPOINT ends it)

#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TIMEOUT 1.0
#define BUCKET_COUNT (1u << 18)

struct inode {
    char *path;
    ino_t ino;
    dev_t dev;
    uint64_t refcount;
    struct inode *next_in_bucket;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct inode root;
static struct inode *buckets[BUCKET_COUNT];

static struct inode *inode_of(fuse_ino_t ino) {
    return ino == FUSE_ROOT_ID ? &root : (struct inode *)(uintptr_t)ino;
}

static uint32_t bucket_of(ino_t ino, dev_t dev) {
    return (uint32_t)((ino * 0x9E3779B97F4A7C15ull ^ dev) >> 40) & (BUCKET_COUNT - 1);
}

// Finds or makes the inode of `name` in `parent`, counting one more kernel reference.
static int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e) {
    memset(e, 0, sizeof *e);
    e->attr_timeout = TIMEOUT;
    e->entry_timeout = TIMEOUT;
    char *path;
    if (asprintf(&path, "%s/%s", inode_of(parent)->path, name) == -1) return ENOMEM;
    if (lstat(path, &e->attr) == -1) {
        int error = errno;
        free(path);
        return error;
    }
    pthread_mutex_lock(&lock);
    uint32_t b = bucket_of(e->attr.st_ino, e->attr.st_dev);
    struct inode *found = buckets[b];
    while (found && !(found->ino == e->attr.st_ino && found->dev == e->attr.st_dev)) found = found->next_in_bucket;
    if (found) {
        found->refcount++;
        pthread_mutex_unlock(&lock);
        free(path);
    } else {
        found = calloc(1, sizeof *found);
        if (!found) {
            pthread_mutex_unlock(&lock);
            free(path);
            return ENOMEM;
        }
        found->path = path;
        found->ino = e->attr.st_ino;
        found->dev = e->attr.st_dev;
        found->refcount = 1;
        found->next_in_bucket = buckets[b];
        buckets[b] = found;
        pthread_mutex_unlock(&lock);
    }
    e->ino = (uintptr_t)found;
    return 0;
}

static void forget_one(fuse_ino_t ino, uint64_t count) {
    struct inode *inode = inode_of(ino);
    if (inode == &root) return;
    pthread_mutex_lock(&lock);
    inode->refcount -= count;
    if (inode->refcount == 0) {
        for (struct inode **p = &buckets[bucket_of(inode->ino, inode->dev)]; *p; p = &(*p)->next_in_bucket) {
            if (*p == inode) {
                *p = inode->next_in_bucket;
                break;
            }
        }
        pthread_mutex_unlock(&lock);
        free(inode->path);
        free(inode);
        return;
    }
    pthread_mutex_unlock(&lock);
}

static void pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    struct fuse_entry_param e;
    int error = do_lookup(parent, name, &e);
    if (error) fuse_reply_err(req, error);
    else fuse_reply_entry(req, &e);
}

static void pt_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    forget_one(ino, nlookup);
    fuse_reply_none(req);
}

static void pt_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    for (size_t i = 0; i < count; i++) forget_one(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    if (lstat(inode_of(ino)->path, &st) == -1) fuse_reply_err(req, errno);
    else fuse_reply_attr(req, &st, TIMEOUT);
}

struct directory {
    DIR *dp;
    struct dirent *entry;
    off_t offset;
};

static void pt_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    struct directory *d = calloc(1, sizeof *d);
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (!(d->dp = opendir(inode_of(ino)->path))) {
        int error = errno;
        free(d);
        fuse_reply_err(req, error);
        return;
    }
    fi->fh = (uintptr_t)d;
    fuse_reply_open(req, fi);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi, int plus) {
    struct directory *d = (struct directory *)(uintptr_t)fi->fh;
    char *buffer = calloc(1, size);
    if (!buffer) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (offset != d->offset) {
        seekdir(d->dp, offset);
        d->entry = NULL;
        d->offset = offset;
    }
    size_t used = 0;
    int error = 0;
    for (;;) {
        if (!d->entry) {
            errno = 0;
            d->entry = readdir(d->dp);
            if (!d->entry) {
                error = errno;
                break;
            }
        }
        off_t next = d->entry->d_off;
        const char *name = d->entry->d_name;
        size_t added;
        if (plus) {
            struct fuse_entry_param e;
            if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
                memset(&e, 0, sizeof e);
                e.attr.st_ino = d->entry->d_ino;
                e.attr.st_mode = d->entry->d_type << 12;
            } else if ((error = do_lookup(ino, name, &e))) {
                break;
            }
            added = fuse_add_direntry_plus(req, buffer + used, size - used, name, &e, next);
            if (added > size - used) {
                if (e.ino) forget_one(e.ino, 1);
                break;
            }
        } else {
            struct stat st = {.st_ino = d->entry->d_ino, .st_mode = d->entry->d_type << 12};
            added = fuse_add_direntry(req, buffer + used, size - used, name, &st, next);
            if (added > size - used) break;
        }
        used += added;
        d->entry = NULL;
        d->offset = next;
    }
    if (error && used == 0) fuse_reply_err(req, error);
    else fuse_reply_buf(req, buffer, used);
    free(buffer);
}

static void pt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    do_readdir(req, ino, size, offset, fi, 0);
}

static void pt_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    do_readdir(req, ino, size, offset, fi, 1);
}

static void pt_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    struct directory *d = (struct directory *)(uintptr_t)fi->fh;
    closedir(d->dp);
    free(d);
    fuse_reply_err(req, 0);
}

static void pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    if ((fi->flags & O_ACCMODE) != O_RDONLY) {
        fuse_reply_err(req, EROFS);
        return;
    }
    int fd = open(inode_of(ino)->path, fi->flags & ~O_NOFOLLOW);
    if (fd == -1) {
        fuse_reply_err(req, errno);
        return;
    }
    fi->fh = (uint64_t)fd;
    fuse_reply_open(req, fi);
}

static void pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)ino;
    struct fuse_bufvec buffer = FUSE_BUFVEC_INIT(size);
    buffer.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buffer.buf[0].fd = (int)fi->fh;
    buffer.buf[0].pos = offset;
    fuse_reply_data(req, &buffer, FUSE_BUF_SPLICE_MOVE);
}

static void pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    close((int)fi->fh);
    fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops operations = {
    .lookup = pt_lookup,
    .forget = pt_forget,
    .forget_multi = pt_forget_multi,
    .getattr = pt_getattr,
    .opendir = pt_opendir,
    .readdir = pt_readdir,
    .readdirplus = pt_readdirplus,
    .releasedir = pt_releasedir,
    .open = pt_open,
    .read = pt_read,
    .release = pt_release,
};

int main(int argc, char *argv[]) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOURCE MOUNTPOINT\n", argv[0]);
        return 2;
    }
    root.path = realpath(argv[1], NULL);
    root.refcount = 2;
    if (!root.path) {
        fprintf(stderr, "passthrough_ll: cannot open %s\n", argv[1]);
        return 1;
    }
    char *fuse_argv[] = {argv[0], "-o", "ro", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
    struct fuse_session *session = fuse_session_new(&args, &operations, sizeof operations, NULL);
    if (!session || fuse_set_signal_handlers(session) != 0 || fuse_session_mount(session, argv[2]) != 0) {
        fprintf(stderr, "passthrough_ll: cannot mount at %s\n", argv[2]);
        return 1;
    }
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_idle_threads(config, 10);
    int result = fuse_session_loop_mt(session, config);
    fuse_loop_cfg_destroy(config);
    fuse_session_unmount(session);
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    return result ? 1 : 0;
}
