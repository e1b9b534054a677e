#!/usr/bin/env python3
"""The Apptimist tests' independent implementation of crypto_box and Ed25519 (PyNaCl).

Usage: nacl_peer.py LIFETIME_SECONDS, one JSON object on stdin, one JSON answer on stdout.
All byte strings are hex. The caller (Swift) hands both sides' secret keys; this script derives
every public key itself, opens and verifies what Swift sealed and signed, and seals and signs
with the same inputs so that Swift can compare bytes and open and verify in turn.
"""
import json
import signal
import sys

import nacl.exceptions
from nacl.public import Box, PrivateKey
from nacl.signing import SigningKey


def main():
    signal.alarm(int(sys.argv[1]))  # never outlive a test that forgot us
    request = json.load(sys.stdin)
    b = {key: bytes.fromhex(value) for key, value in request.items()}
    swift_box = PrivateKey(b["swift_box_secret"])
    peer_box = PrivateKey(b["peer_box_secret"])
    swift_sign = SigningKey(b["swift_sign_seed"])
    peer_sign = SigningKey(b["peer_sign_seed"])
    answer = {
        "swift_box_public": bytes(swift_box.public_key).hex(),
        "peer_box_public": bytes(peer_box.public_key).hex(),
        "swift_sign_public": swift_sign.verify_key.encode().hex(),
        "peer_sign_public": peer_sign.verify_key.encode().hex(),
    }
    # What Swift sealed for us: open it, and seal the same message ourselves (crypto_box is
    # deterministic for one key pair and nonce, so the bytes must be equal).
    from_swift = Box(peer_box, swift_box.public_key)
    answer["opened"] = from_swift.decrypt(b["swift_sealed"], b["nonce"]).hex()
    answer["same_sealed"] = Box(swift_box, peer_box.public_key).encrypt(b["message"], b["nonce"]).ciphertext.hex()
    tampered = bytearray(b["swift_sealed"])
    tampered[-1] ^= 1
    try:
        from_swift.decrypt(bytes(tampered), b["nonce"])
        answer["tampered_box_opened"] = True
    except nacl.exceptions.CryptoError:
        answer["tampered_box_opened"] = False
    # Swift's signature: verify it, and sign the same message (Ed25519 is deterministic).
    try:
        swift_sign.verify_key.verify(b["message"], b["swift_signature"])
        answer["signature_verified"] = True
    except nacl.exceptions.BadSignatureError:
        answer["signature_verified"] = False
    answer["same_signature"] = swift_sign.sign(b["message"]).signature.hex()
    # Our own reply, for Swift to open and verify.
    answer["reply_sealed"] = Box(peer_box, swift_box.public_key).encrypt(b["reply"], b["reply_nonce"]).ciphertext.hex()
    answer["reply_signature"] = peer_sign.sign(b["reply"]).signature.hex()
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
