#ifndef BUCKETFS_CSODIUM_SHIM_H
#define BUCKETFS_CSODIUM_SHIM_H

// libsodium 1.0.18 (Debian bookworm libsodium-dev): crypto_box (Curve25519, XSalsa20, Poly1305)
// and Ed25519 signatures for the Apptimist App-Server protocol (issue 18).
#include <sodium.h>

#endif
