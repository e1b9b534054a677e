// Preloaded into the bucketfs process that scripts/bench-fs runs under callgrind. Valgrind 3.19
// (Debian bookworm) writes into the signal mask a program hands to sigsuspend(2); Swift's
// libdispatch hands it a constant in read-only memory (the main thread of an async main parks in
// sigsuspend), and valgrind dies of SIGSEGV. This passes a writable copy instead.
//
// Built by scripts/bench-fs: cc -O2 -shared -fPIC sigsuspend_copy.c -o sigsuspend_copy.so

#define _GNU_SOURCE
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
    sigset_t copy = *mask;
    return (int)syscall(SYS_rt_sigsuspend, &copy, _NSIG / 8);
}
