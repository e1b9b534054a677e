#ifndef BUCKETFS_CSPAWN_H
#define BUCKETFS_CSPAWN_H

#include <sys/types.h>

/// Starts `path` (argv, envp as execve takes them) with its standard input, output and error on
/// `input`, `output`, `error` (a descriptor of this process, or -1 for /dev/null), in `directory`
/// (NULL: this process's), with every other descriptor closed, every signal's default action and
/// an empty signal mask, and, when `new_process_group` is not 0, in a process group of its own.
/// Returns 0 with `*pid` set, or an errno value (exec failures included: glibc's posix_spawn
/// reports them).
int bucketfs_spawn(
    pid_t *pid, const char *path, char *const argv[], char *const envp[], const char *directory,
    int input, int output, int error, int new_process_group);

#endif
