// posix_spawn with the two glibc extensions Swift's Glibc module does not show (they need
// _GNU_SOURCE): closing every inherited descriptor (glibc 2.34) and a working directory (2.29).
#define _GNU_SOURCE
#include "cspawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

int bucketfs_spawn(
    pid_t *pid, const char *path, char *const argv[], char *const envp[], const char *directory,
    int input, int output, int error, int new_process_group)
{
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    const int sources[3] = {input, output, error};
    // Descriptors first, /dev/null after: an open on 0 must not replace a source still to be copied.
    for (int target = 0; target < 3 && result == 0; target++) {
        if (sources[target] >= 0) result = posix_spawn_file_actions_adddup2(&actions, sources[target], target);
    }
    for (int target = 0; target < 3 && result == 0; target++) {
        if (sources[target] < 0) {
            result = posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0);
        }
    }
    if (result == 0) result = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (result == 0 && directory != NULL) result = posix_spawn_file_actions_addchdir_np(&actions, directory);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | (new_process_group ? POSIX_SPAWN_SETPGROUP : 0);
    if (result == 0) result = posix_spawnattr_setflags(&attributes, flags);
    if (result == 0) result = posix_spawnattr_setsigmask(&attributes, &none);
    if (result == 0) result = posix_spawnattr_setsigdefault(&attributes, &all);
    if (result == 0 && new_process_group) result = posix_spawnattr_setpgroup(&attributes, 0);
    if (result == 0) result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}
