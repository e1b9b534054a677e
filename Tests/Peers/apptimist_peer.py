#!/usr/bin/env python3
"""An independent Apptimist App-Server client for the tests: PyNaCl for crypto_box and Ed25519,
websocket-client for the socket, and its own rendering and parsing of frames and headers from
the seed specification (../shared/spec/apptimist-app-server-protocol.md) and
Docs/apptimist-protocol.md, sharing no code with the Swift modules.

Usage: apptimist_peer.py LIFETIME_SECONDS. One JSON command per line on stdin, one JSON answer
per line on stdout; byte strings are hex, texts UTF-8. An answer with "error" is a failure of
the peer itself (the test fails with it); a closed connection is an ordinary answer
({"closed": code, "reason": ...}).
"""
import hashlib
import json
import os
import signal
import struct
import sys
import urllib.request

import nacl.exceptions
import websocket
from nacl.public import Box, PrivateKey, PublicKey
from nacl.signing import SigningKey, VerifyKey

TYPES = {
    "login": 1, "redirect": 2, "new": 3, "del": 4, "message": 5, "truncate": 6, "pause": 7, "resume": 8,
    "vouch": 9, "vouchers": 10, "search_by_name": 11, "search_by_uid": 12, "search_by_key": 13, "user": 14,
    "read": 15, "lock": 16, "write": 17, "remove": 18,
}
NAMES = {number: name for name, number in TYPES.items()}
FILE_PDUS = ("read", "lock", "write", "remove")


class Closed(Exception):
    def __init__(self, code, reason):
        super().__init__("closed %s %s" % (code, reason))
        self.code = code
        self.reason = reason


class Peer:
    def __init__(self, command):
        self.port = command["port"]
        self.service = command["service"]
        self.box = PrivateKey(bytes.fromhex(command["box_secret"]))
        self.sign = SigningKey(bytes.fromhex(command["sign_seed"]))
        self.public = bytes(self.box.public_key)
        url = "http://127.0.0.1:%d/%s" % (self.port, self.service)
        document = json.loads(urllib.request.urlopen(url, timeout=30).read())
        self.service_public = bytes.fromhex(document["public_key"])
        signature = bytes.fromhex(document["signature"])
        VerifyKey(bytes.fromhex(document["auth_key"])).verify(self.service_public, signature)
        self.data_nonce = signature[:24]
        self.device = PrivateKey.generate()
        # device_first: a device key that sorts before the service's (this side sends odd numbers).
        while command.get("device_first") and bytes(self.device.public_key) >= self.service_public:
            self.device = PrivateKey.generate()
        device_public = bytes(self.device.public_key)
        self.header_box = Box(self.device, PublicKey(self.service_public))
        self.user_box = Box(self.box, PublicKey(self.service_public))
        offered = command.get("subprotocols", ["apptimist.v2", "apptimist.v1"])
        self.ws = websocket.create_connection(
            "ws://127.0.0.1:%d/%s?%s" % (self.port, self.service, device_public.hex()),
            subprotocols=offered or None, timeout=30)
        accepted = self.ws.getsubprotocol()
        self.version = {None: 1, "apptimist.v1": 1, "apptimist.v2": 2}[accepted]
        # header_lines: MESSAGE and search headers exactly as the seed's header lines write them
        # (`version type recipientPubEncrKey toPubEncrKey fromPubEncrKey`, `version type nameLen
        # name`): no `time`, no `maxUsers`; and MESSAGEs received are read so, strictly.
        self.header_lines = bool(command.get("header_lines"))
        # The seed's rule: the side whose public key sorts first sends 1, 3, 5, ...
        first = device_public < self.service_public
        self.next_out = 1 if first else 2
        self.next_in = 2 if first else 1
        self.pending = []
        self.sent_frames = []

    # Frames and headers.

    def header_nonce(self, seq):
        if self.version == 1:
            return self.data_nonce[:22] + struct.pack(">H", seq)
        return self.data_nonce[:16] + struct.pack(">Q", seq)

    def seal_data(self, box, plain):
        if self.version == 1:
            return box.encrypt(plain, self.data_nonce).ciphertext
        nonce = os.urandom(24)
        return nonce + box.encrypt(plain, nonce).ciphertext

    def open_data(self, box, part):
        if self.version == 1:
            return box.decrypt(part, self.data_nonce)
        return box.decrypt(part[24:], part[:24])

    def frame(self, fields, data=b"", seq=None, header_box=None):
        header = bytes([self.version]) + fields
        if seq is None:
            seq = self.next_out
            self.next_out += 2
        sealed = (header_box or self.header_box).encrypt(header, self.header_nonce(seq)).ciphertext
        return struct.pack(">II", len(sealed), len(data)) + sealed + data

    def send_frame(self, frame):
        self.sent_frames.append(frame)
        self.ws.send_binary(frame)

    def send(self, kind, fields, data=b""):
        self.send_frame(self.frame(bytes([TYPES[kind]]) + fields, data))

    def receive(self, timeout):
        self.ws.settimeout(timeout)
        try:
            opcode, payload = self.ws.recv_data(control_frame=False)
        except websocket.WebSocketTimeoutException:
            return None
        except (websocket.WebSocketConnectionClosedException, ConnectionError) as error:
            raise Closed(None, str(error))
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
            raise Closed(code, payload[2:].decode("utf-8", "replace"))
        if opcode != websocket.ABNF.OPCODE_BINARY:
            raise Exception("a non-binary message from the service")
        header_length, data_length = struct.unpack(">II", payload[:8])
        assert 8 + header_length + data_length == len(payload), "frame lengths do not add up"
        sealed = payload[8:8 + header_length]
        data = payload[8 + header_length:]
        header = self.header_box.decrypt(sealed, self.header_nonce(self.next_in))
        self.next_in += 2
        assert header[0] == self.version, "header version %d on a version %d connection" % (header[0], self.version)
        pdu = parse(header, data, self.header_lines)
        # A MESSAGE from the service's own key is a file notice (Docs/apptimist-protocol.md):
        # its own kind, so that waiting for messages does not take one.
        if pdu["type"] == "message" and pdu["from"] == self.service_public:
            pdu["type"] = "notice"
        return pdu

    def next_pdu(self, kinds=None, timeout=30):
        """The next PDU of one of `kinds` (others are kept for `recv`)."""
        for index, pdu in enumerate(self.pending):
            if kinds is None or pdu["type"] in kinds:
                return self.pending.pop(index)
        while True:
            pdu = self.receive(timeout)
            if pdu is None:
                return None
            if kinds is None or pdu["type"] in kinds:
                return pdu
            self.pending.append(pdu)

    # The PDUs.

    def login(self, command):
        head = bytes.fromhex(command.get("head") or "00" * 64)
        signature = self.sign.sign(self.public).signature
        if command.get("bad_signature"):
            signature = bytes([signature[0] ^ 1]) + signature[1:]
        self.send("login", self.public + signature + struct.pack(">H", command.get("max", 0)) + head)
        echo = self.next_pdu(["login"])
        return {"logged_in": echo is not None}

    def new(self, command):
        name = command["name"].encode()
        uid = command.get("uid", "").encode()
        token = command.get("token", "").encode()
        key = self.public
        auth = self.sign.verify_key.encode()
        if "event_box_secret" in command:
            key = bytes(PrivateKey(bytes.fromhex(command["event_box_secret"])).public_key)
            auth = SigningKey(bytes.fromhex(command["event_sign_seed"])).verify_key.encode()
        self.send("new", key + auth + bytes([len(name), len(uid), len(token)]) + name + uid + token)
        echo = self.next_pdu(["new"])
        return {"created": echo is not None}

    def file(self, command):
        kind = command["kind"]
        owner = bytes.fromhex(command.get("owner", self.public.hex()))
        name = command["name"].encode()
        data = b""
        if kind == "write":
            # "hex": bytes that are no text (an access-control file's keys).
            plain = bytes.fromhex(command["hex"]) if "hex" in command else command["text"].encode()
            data = self.seal_data(self.user_box, plain)
            if command.get("bad_box"):
                data = data[:-1] + bytes([data[-1] ^ 1])
        self.send(kind, owner + struct.pack(">HB", 0, len(name)) + name, data)
        if command.get("no_wait"):
            return {"sent": True}
        answer = self.next_pdu([kind])
        if answer is None:
            return {"timeout": True}
        result = {"code": answer["error"], "name": answer["filename"]}
        if answer["data"]:
            result["text"] = self.open_data(self.user_box, answer["data"]).decode("utf-8", "replace")
        return result

    def message(self, command):
        to = bytes.fromhex(command["to"])
        sender = bytes.fromhex(command.get("from", self.public.hex()))
        fields = to + to + sender
        if not self.header_lines:
            fields = struct.pack(">Q", command.get("time", 1700000000)) + fields
        data = self.seal_data(Box(self.box, PublicKey(to)), command["text"].encode())
        self.send("message", fields, data)
        header = bytes([self.version, TYPES["message"]]) + fields
        return {"id": hashlib.sha512(header + data).hexdigest()}

    def delete(self, command):
        """DEL of an event or forum; {"deleted": false} when the service sends no echo in time."""
        key = bytes.fromhex(command["key"])
        self.send("del", key)
        echo = self.next_pdu(["del"], timeout=command.get("timeout", 30))
        return {"deleted": echo is not None and echo["key"] == key}

    def describe(self, pdu, open_as=None):
        """`open_as`: the secret key (hex) to open a message's data with instead of the user's,
        as a forum member opens a forum message (sealed by its sender to the forum's key)."""
        kind = pdu["type"]
        if kind == "message":
            other = pdu["from"] if pdu["from"] != self.public else pdu["to"]
            own = PrivateKey(bytes.fromhex(open_as)) if open_as else self.box
            text = self.open_data(Box(own, PublicKey(other)), pdu["data"]).decode("utf-8", "replace")
            return {"type": kind, "id": pdu["id"].hex(), "recipient": pdu["recipient"].hex(), "from": pdu["from"].hex(),
                    "to": pdu["to"].hex(), "text": text, "time": pdu.get("time"), "header_length": len(pdu["header"])}
        if kind == "notice":
            notice = json.loads(self.open_data(self.user_box, pdu["data"]))
            # A file notice names a file; a bounce ({"undelivered": ...}) a message.
            if "file" in notice:
                notice["name"] = bytes.fromhex(notice["file"]).decode("utf-8", "replace")
            # The PDU's fields, where the document has none of that name (a bounce's "to" is the
            # recipient it names).
            for key, value in {"type": kind, "id": pdu["id"].hex(), "from": pdu["from"].hex(), "to": pdu["to"].hex(),
                               "recipient": pdu["recipient"].hex(), "version": pdu["header"][0]}.items():
                notice.setdefault(key, value)
            return notice
        result = {"type": kind}
        for key, value in pdu.items():
            if key in ("type", "data", "header"):
                continue
            if isinstance(value, bytes):
                result[key] = value.hex()
            elif isinstance(value, list):
                result[key] = [item.hex() for item in value]
            else:
                result[key] = value
        return result

    def search(self, command):
        kind = command["kind"]
        if kind == "search_by_key":
            self.send(kind, bytes.fromhex(command["key"]))
        else:
            value = command["value"].encode()
            limit = b"" if self.header_lines else struct.pack(">H", command.get("max_users", 0))
            self.send(kind, limit + bytes([len(value)]) + value)
        users = []
        while True:
            pdu = self.next_pdu(["user"])
            if pdu is None:
                return {"timeout": True, "users": users}
            users.append(self.describe(pdu))
            if pdu["count"] == 0:
                return {"users": users}

    def flood(self, command):
        """Sends READs of a name that is no file name (answered EINVAL without touching the
        store) as long as this side's version 1 sequence lasts (at most `count`), a window at
        a time, and counts the answers until the service closes or goes quiet."""
        fields = self.public + struct.pack(">HB", 0, 3) + b"a/b"
        sent = replies = 0
        try:
            while sent < command["count"] and self.next_out <= 0xFFFF:
                self.send("read", fields)
                sent += 1
                if sent - replies >= 256:
                    replies += self.next_pdu(["read"], timeout=command.get("timeout", 60)) is not None
            while self.next_pdu(["read"], timeout=command.get("timeout", 60)) is not None:
                replies += 1
        except Closed as closed:
            return {"sent": sent, "replies": replies, "closed": closed.code, "reason": closed.reason, "last_seq": self.next_in - 2}
        return {"sent": sent, "replies": replies, "timeout": True}

    def raw(self, command):
        """Sends a malformed or forged PDU (kind below) and reports what the service does."""
        kind = command["kind"]
        pause = bytes([TYPES["pause"]])
        if kind == "bad_box":
            frame = bytearray(self.frame(pause))
            frame[9] ^= 1
            self.send_frame(bytes(frame))
        elif kind == "truncated_frame":
            self.ws.send_binary(self.frame(pause)[:5])
        elif kind == "length_past_frame":
            frame = self.frame(pause)
            self.ws.send_binary(struct.pack(">II", len(frame), 0) + frame[8:])
        elif kind == "unknown_type":
            self.send_frame(self.frame(bytes([99])))
        elif kind == "replay":
            self.ws.send_binary(self.sent_frames[-1])
        elif kind == "wrong_key":
            stranger = Box(PrivateKey.generate(), PublicKey(self.service_public))
            self.send_frame(self.frame(pause, header_box=stranger))
        elif kind == "text":
            self.ws.send("not a PDU")
        else:
            return {"error": "unknown raw kind " + kind}
        return {"sent": kind}


def parse(header, data, header_lines=False):
    kind = NAMES.get(header[1], "unknown")
    body = header[2:]
    pdu = {"type": kind, "data": data, "header": header}
    if kind == "message":
        if header_lines:
            assert len(body) == 96, "a MESSAGE header of %d bytes, not the header line's 98" % len(header)
        else:
            assert len(body) == 104, "a MESSAGE header of %d bytes, not the field list's 106" % len(header)
            pdu["time"] = struct.unpack(">Q", body[:8])[0]
            body = body[8:]
        pdu["recipient"], pdu["to"], pdu["from"] = body[:32], body[32:64], body[64:96]
        pdu["id"] = hashlib.sha512(header + data).digest()
    elif kind == "truncate":
        pdu["id"] = body[:64]
    elif kind in FILE_PDUS:
        pdu["owner"] = body[:32]
        pdu["error"], length = struct.unpack(">HB", body[32:35])
        pdu["filename"] = body[35:35 + length].decode("utf-8", "replace")
    elif kind == "user":
        pdu["count"] = struct.unpack(">H", body[:2])[0]
        pdu["key"] = body[2:34]
        name_length, uid_length = body[34], body[35]
        pdu["name"] = body[36:36 + name_length].decode("utf-8", "replace")
        pdu["uid"] = body[36 + name_length:36 + name_length + uid_length].decode("utf-8", "replace")
    elif kind == "vouchers":
        pdu["subject"] = body[:32]
        count = struct.unpack(">I", body[32:36])[0]
        pdu["vouchers"] = [body[36 + 32 * i:68 + 32 * i] for i in range(count)]
    elif kind == "vouch":
        pdu["subject"], pdu["signature"] = body[:32], body[32:96]
    elif kind in ("login", "new", "del"):
        pdu["key"] = body[:32]
    return pdu


def main():
    signal.alarm(int(sys.argv[1]) if len(sys.argv) > 1 else 120)  # never outlive the test
    peer = None
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        try:
            if op == "connect":
                peer = Peer(command)
                answer = {"version": peer.version, "service_public": peer.service_public.hex()}
            elif op == "login":
                answer = peer.login(command)
            elif op == "new":
                answer = peer.new(command)
            elif op == "file":
                answer = peer.file(command)
            elif op == "message":
                answer = peer.message(command)
            elif op == "recv":
                pdu = peer.next_pdu(command.get("kinds"), timeout=command.get("timeout", 30))
                answer = {"timeout": True} if pdu is None else peer.describe(pdu, command.get("open_as"))
            elif op == "del":
                answer = peer.delete(command)
            elif op == "truncate":
                peer.send("truncate", bytes.fromhex(command["id"]))
                answer = {"sent": True}
            elif op in ("pause", "resume"):
                peer.send(op, b"")
                answer = {"sent": True}
            elif op == "vouch":
                subject = bytes.fromhex(command["subject"])
                signature = peer.sign.sign(subject).signature
                if command.get("revoke"):
                    signature = bytes(64)
                elif command.get("bad_signature"):
                    signature = bytes([signature[0] ^ 1]) + signature[1:]
                peer.send("vouch", subject + signature)
                answer = {"sent": True}
            elif op == "vouchers":
                peer.send("vouchers", bytes.fromhex(command["subject"]) + struct.pack(">I", 0))
                pdu = peer.next_pdu(["vouchers"])
                answer = {"timeout": True} if pdu is None else peer.describe(pdu)
            elif op == "search":
                answer = peer.search(command)
            elif op == "flood":
                answer = peer.flood(command)
            elif op == "raw":
                answer = peer.raw(command)
            elif op == "close":
                if peer is not None:
                    peer.ws.close()
                answer = {"closed_by_peer": True}
            else:
                answer = {"error": "unknown op " + op}
        except Closed as closed:
            answer = {"closed": closed.code, "reason": closed.reason}
        except Exception as error:  # reported to the test, which fails with it
            answer = {"error": "%s: %s" % (type(error).__name__, error)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if op == "close":
            return


if __name__ == "__main__":
    main()
