// The bare FUSE baseline of scripts/bench-fs: the thinnest file system FUSE can serve. Files live
// in memory, found through one hash table; nothing is stored or sent. A request costs the kernel
// round trip and a few hundred nanoseconds here, so its rate for an operation that writes (which
// no kernel cache answers) is the most any FUSE file system reaches on the machine. It is served
// as bucketfs serves: libfuse's multi-threaded loop, one /dev/fuse clone per worker, entries and
// attributes cached for an hour, O_TRUNC handled in open.
//
// With FSYNC_FILE, fsync also writes the file's first 4 KiB over the first block of FSYNC_FILE and
// fdatasyncs it: the least a FUSE file system whose fsync survives a power loss pays on the disk
// FSYNC_FILE is on (one write and one flush of the disk's cache), and nothing else.
//
// Built by scripts/bench-fs: cc -O2 bare_fuse.c $(pkg-config fuse3 --cflags --libs)
// Run: bare_fuse MOUNTPOINT [FSYNC_FILE] (foreground; fusermount3 -u MOUNTPOINT ends it)

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CACHE_SECONDS 3600.0
#define BUCKET_COUNT (1u << 18)

struct node {
    fuse_ino_t ino;
    fuse_ino_t parent;
    char *name;
    mode_t mode;
    unsigned char *data;
    size_t size, capacity;
    struct timespec mtime, ctime;
    int linked;
    struct node *next_in_bucket;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fsync_file = -1;  // FSYNC_FILE, or -1: fsync does nothing
static struct node **nodes;  // by inode number; 0 unused, 1 the root
static size_t node_count, node_capacity;
static struct node *buckets[BUCKET_COUNT];

static uint32_t bucket_of(fuse_ino_t parent, const char *name) {
    uint64_t hash = 1469598103934665603ull ^ parent;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) hash = (hash ^ *c) * 1099511628211ull;
    return (uint32_t)(hash & (BUCKET_COUNT - 1));
}

static struct node *find(fuse_ino_t parent, const char *name) {
    for (struct node *n = buckets[bucket_of(parent, name)]; n; n = n->next_in_bucket)
        if (n->parent == parent && strcmp(n->name, name) == 0) return n;
    return NULL;
}

static void link_node(struct node *n, fuse_ino_t parent, const char *name) {
    free(n->name);
    n->parent = parent;
    n->name = strdup(name);
    uint32_t b = bucket_of(parent, name);
    n->next_in_bucket = buckets[b];
    buckets[b] = n;
    n->linked = 1;
}

static void unlink_node(struct node *n) {
    for (struct node **p = &buckets[bucket_of(n->parent, n->name)]; *p; p = &(*p)->next_in_bucket) {
        if (*p == n) {
            *p = n->next_in_bucket;
            break;
        }
    }
    n->linked = 0;
}

static struct node *new_node(fuse_ino_t parent, const char *name, mode_t mode) {
    if (node_count + 1 >= node_capacity) {
        node_capacity = node_capacity ? node_capacity * 2 : 1024;
        nodes = realloc(nodes, node_capacity * sizeof *nodes);
    }
    struct node *n = calloc(1, sizeof *n);
    n->ino = ++node_count;
    n->mode = mode;
    clock_gettime(CLOCK_REALTIME, &n->mtime);
    n->ctime = n->mtime;
    nodes[n->ino] = n;
    if (name) link_node(n, parent, name);
    return n;
}

static struct node *node_of(fuse_ino_t ino) { return ino >= 1 && ino <= node_count ? nodes[ino] : NULL; }

static void fill_stat(const struct node *n, struct stat *st) {
    memset(st, 0, sizeof *st);
    st->st_ino = n->ino;
    st->st_mode = n->mode;
    st->st_nlink = S_ISDIR(n->mode) ? 2 : (n->linked ? 1 : 0);
    st->st_size = (off_t)n->size;
    st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
    st->st_mtim = n->mtime;
    st->st_ctim = n->ctime;
    st->st_atim = n->mtime;
}

static void reply_entry_of(fuse_req_t req, const struct node *n) {
    struct fuse_entry_param e = {.ino = n->ino, .attr_timeout = CACHE_SECONDS, .entry_timeout = CACHE_SECONDS};
    fill_stat(n, &e.attr);
    pthread_mutex_unlock(&lock);
    fuse_reply_entry(req, &e);
}

static void bare_init(void *userdata, struct fuse_conn_info *conn) {
    (void)userdata;
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
}

static void bare_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    pthread_mutex_lock(&lock);
    struct node *n = find(parent, name);
    if (!n) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, ENOENT);
        return;
    }
    reply_entry_of(req, n);
}

static void bare_forget(fuse_req_t req, fuse_ino_t ino, uint64_t count) {
    (void)ino, (void)count;
    fuse_reply_none(req);
}

static void bare_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    (void)count, (void)forgets;
    fuse_reply_none(req);
}

static void bare_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    pthread_mutex_lock(&lock);
    struct node *n = node_of(ino);
    if (n) fill_stat(n, &st);
    pthread_mutex_unlock(&lock);
    if (!n) fuse_reply_err(req, ENOENT);
    else fuse_reply_attr(req, &st, CACHE_SECONDS);
}

static void resize(struct node *n, size_t size) {
    if (size > n->capacity) {
        n->capacity = size * 2;
        n->data = realloc(n->data, n->capacity);
    }
    if (size > n->size) memset(n->data + n->size, 0, size - n->size);
    n->size = size;
}

static void bare_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
    (void)fi;
    struct stat st;
    pthread_mutex_lock(&lock);
    struct node *n = node_of(ino);
    if (n) {
        if (to_set & FUSE_SET_ATTR_SIZE) resize(n, (size_t)attr->st_size);
        if (to_set & FUSE_SET_ATTR_MODE) n->mode = (n->mode & S_IFMT) | (attr->st_mode & 07777);
        if (to_set & FUSE_SET_ATTR_MTIME) n->mtime = attr->st_mtim;
        if (to_set & FUSE_SET_ATTR_MTIME_NOW) clock_gettime(CLOCK_REALTIME, &n->mtime);
        clock_gettime(CLOCK_REALTIME, &n->ctime);
        fill_stat(n, &st);
    }
    pthread_mutex_unlock(&lock);
    if (!n) fuse_reply_err(req, ENOENT);
    else fuse_reply_attr(req, &st, CACHE_SECONDS);
}

static void add_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    pthread_mutex_lock(&lock);
    if (find(parent, name)) {
        pthread_mutex_unlock(&lock);
        fuse_reply_err(req, EEXIST);
        return;
    }
    struct node *n = new_node(parent, name, mode);
    if (!fi) return reply_entry_of(req, n);
    struct fuse_entry_param e = {.ino = n->ino, .attr_timeout = CACHE_SECONDS, .entry_timeout = CACHE_SECONDS};
    fill_stat(n, &e.attr);
    pthread_mutex_unlock(&lock);
    fi->keep_cache = 1;
    fuse_reply_create(req, &e, fi);
}

static void bare_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
    add_node(req, parent, name, S_IFDIR | (mode & 07777), NULL);
}

static void bare_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi) {
    add_node(req, parent, name, S_IFREG | (mode & 07777), fi);
}

static void bare_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    pthread_mutex_lock(&lock);
    struct node *n = node_of(ino);
    if (n && (fi->flags & O_TRUNC)) resize(n, 0);
    pthread_mutex_unlock(&lock);
    if (!n) return (void)fuse_reply_err(req, ENOENT);
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void bare_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct node *n = node_of(ino);
    size_t start = n && (size_t)offset < n->size ? (size_t)offset : (n ? n->size : 0);
    size_t length = n ? (n->size - start < size ? n->size - start : size) : 0;
    unsigned char *copy = length ? malloc(length) : NULL;
    if (copy) memcpy(copy, n->data + start, length);
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, (const char *)copy, length);
    free(copy);
}

static void bare_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t offset,
                       struct fuse_file_info *fi) {
    (void)fi;
    pthread_mutex_lock(&lock);
    struct node *n = node_of(ino);
    if (n) {
        if ((size_t)offset + size > n->size) resize(n, (size_t)offset + size);
        memcpy(n->data + offset, buf, size);
        clock_gettime(CLOCK_REALTIME, &n->mtime);
        n->ctime = n->mtime;
    }
    pthread_mutex_unlock(&lock);
    if (!n) fuse_reply_err(req, ENOENT);
    else fuse_reply_write(req, size);
}

static void bare_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino, (void)fi;
    fuse_reply_err(req, 0);
}

static void bare_open_directory(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    fuse_reply_open(req, fi);
}

static void bare_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
    (void)datasync;
    if (fsync_file >= 0) {
        unsigned char block[4096] = {0};
        pthread_mutex_lock(&lock);
        struct node *n = node_of(ino);
        if (n && n->data) memcpy(block, n->data, n->size < sizeof block ? n->size : sizeof block);
        pthread_mutex_unlock(&lock);
        if (pwrite(fsync_file, block, sizeof block, 0) != (ssize_t)sizeof block || fdatasync(fsync_file) != 0)
            return (void)fuse_reply_err(req, EIO);
    }
    bare_ok(req, ino, fi);
}

static void remove_node(fuse_req_t req, fuse_ino_t parent, const char *name) {
    pthread_mutex_lock(&lock);
    struct node *n = find(parent, name);
    if (n) unlink_node(n);
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, n ? 0 : ENOENT);
}

static void bare_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                        unsigned int flags) {
    if (flags) return (void)fuse_reply_err(req, EINVAL);
    pthread_mutex_lock(&lock);
    struct node *n = find(parent, name);
    if (n) {
        struct node *replaced = find(newparent, newname);
        if (replaced) unlink_node(replaced);
        unlink_node(n);
        link_node(n, newparent, newname);
        clock_gettime(CLOCK_REALTIME, &n->ctime);
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_err(req, n ? 0 : ENOENT);
}

static void bare_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)fi;
    char *buffer = malloc(size);
    size_t used = 0;
    struct stat st = {0};
    pthread_mutex_lock(&lock);
    // Offsets are inode numbers: a scan of every node, which only the benchmark's final check uses.
    for (size_t i = (size_t)offset + 1; i <= node_count; i++) {
        struct node *n = nodes[i];
        if (!n->linked || n->parent != ino || n->ino == ino) continue;
        st.st_ino = n->ino;
        st.st_mode = n->mode;
        size_t entry = fuse_add_direntry(req, buffer + used, size - used, n->name, &st, (off_t)i);
        if (entry > size - used) break;
        used += entry;
    }
    pthread_mutex_unlock(&lock);
    fuse_reply_buf(req, buffer, used);
    free(buffer);
}

static const struct fuse_lowlevel_ops operations = {
    .init = bare_init,
    .lookup = bare_lookup,
    .forget = bare_forget,
    .forget_multi = bare_forget_multi,
    .getattr = bare_getattr,
    .setattr = bare_setattr,
    .mkdir = bare_mkdir,
    .create = bare_create,
    .open = bare_open,
    .read = bare_read,
    .write = bare_write,
    .flush = bare_ok,
    .release = bare_ok,
    .fsync = bare_fsync,
    .unlink = remove_node,
    .rmdir = remove_node,
    .rename = bare_rename,
    .opendir = bare_open_directory,
    .readdir = bare_readdir,
    .releasedir = bare_ok,
};

int main(int argc, char *argv[]) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: %s MOUNTPOINT [FSYNC_FILE]\n", argv[0]);
        return 2;
    }
    if (argc == 3) {
        // Written once at its full size, so that an fsync's write never grows it.
        static const unsigned char zeros[4096];
        fsync_file = open(argv[2], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fsync_file < 0 || pwrite(fsync_file, zeros, sizeof zeros, 0) != (ssize_t)sizeof zeros || fsync(fsync_file) != 0) {
            fprintf(stderr, "bare_fuse: cannot prepare %s\n", argv[2]);
            return 1;
        }
    }
    new_node(0, NULL, S_IFDIR | 0755);  // the root, inode 1
    char *fuse_argv[] = {argv[0], NULL};
    struct fuse_args args = FUSE_ARGS_INIT(1, fuse_argv);
    struct fuse_session *session = fuse_session_new(&args, &operations, sizeof operations, NULL);
    if (!session || fuse_set_signal_handlers(session) != 0 || fuse_session_mount(session, argv[1]) != 0) {
        fprintf(stderr, "bare_fuse: cannot mount at %s\n", argv[1]);
        return 1;
    }
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_idle_threads(config, 10);
    fuse_loop_cfg_set_clone_fd(config, 1);
    int result = fuse_session_loop_mt(session, config);
    fuse_loop_cfg_destroy(config);
    fuse_session_unmount(session);
    fuse_remove_signal_handlers(session);
    fuse_session_destroy(session);
    return result ? 1 : 0;
}
