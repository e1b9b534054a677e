#ifndef BUCKETFS_FUZZ_DRIVER_H
#define BUCKETFS_FUZZ_DRIVER_H
#include <stddef.h>
#include <stdint.h>

/// Runs libFuzzer on `test_one_input` with the command line's options and corpus directories.
/// SwiftPM links an executable's `main` to the module's own entry point, so libFuzzer's `main`
/// is never used: each target's main.swift calls this instead.
int bucketfs_fuzz_main(int argc, char **argv, int (*test_one_input)(const uint8_t *data, size_t size));

#endif
