#!/usr/bin/env python3
"""An independent Telepat client for the server tests: python-socketio 4.x (Engine.IO 3, as
Telepat 0.4's own clients speak) and plain HTTP through requests.

It reads one JSON command per line on stdin and answers each with one JSON line on stdout:
  {"op": "http", "method": "POST", "path": "/object/create", "headers": {...}, "body": {...} | "raw text"}
      -> {"status": 202, "body": <parsed JSON or the text>}
  {"op": "connect", "port": N, "device_id": "...", "application_id": "...", "transports": [...]}
      -> {"ready": true, "sid": ..., "transport": "polling" | "websocket"} once the server
         answered bind_device with ready, or {"refused": <the error event's data>} when it
         answered with an `error` event. `transports` defaults to ["websocket"]; with
         ["polling", "websocket"] the client starts long-polling and upgrades, as
         socket.io-client 1.x (Telepat's JS SDK) does.
  {"op": "next", "timeout": seconds}
      -> {"message": <the next `message` event's data>} or {"timeout": true}
  {"op": "quiet", "seconds": s}   -> {"messages": [every message event in that time]}
  {"op": "close"}                 -> {"closed": true}, then the script ends
"""
import json
import signal
import queue
import sys

import requests
import socketio

messages = queue.Queue()
ready = queue.Queue()  # True on `ready`, {"refused": data} on an `error` event
client = None
base = None


def answer(value):
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def http(command):
    headers = dict(command.get("headers", {}))
    body = command.get("body")
    data = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
    response = requests.request(command["method"], "http://127.0.0.1:%d%s" % (command["port"], command["path"]),
                                headers=headers, data=data, timeout=20)
    try:
        parsed = response.json()
    except ValueError:
        parsed = response.text
    return {"status": response.status_code, "body": parsed}


def connect(command):
    global client
    # engineio's 5 s for each HTTP request (the handshake included) is not enough beside other
    # suites on a busy 2-core machine: a slow handshake then reads as "Connection refused".
    client = socketio.Client(reconnection=False, request_timeout=30)
    client.on("message", lambda data: messages.put(data))
    client.on("ready", lambda data=None: ready.put(True))
    client.on("error", lambda data=None: ready.put({"refused": data}))
    client.connect("http://127.0.0.1:%d" % command["port"], transports=command.get("transports", ["websocket"]))
    client.emit("bind_device", {"device_id": command["device_id"], "application_id": command["application_id"]})
    outcome = ready.get(timeout=command.get("timeout", 30))
    if outcome is not True:
        return outcome
    return {"ready": True, "sid": client.eio.sid, "transport": client.eio.current_transport}


def main():
    # Bounded lifetime: the test may die without closing this process.
    signal.alarm(int(sys.argv[1]) if len(sys.argv) > 1 else 120)
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        try:
            if op == "http":
                answer(http(command))
            elif op == "connect":
                answer(connect(command))
            elif op == "next":
                try:
                    answer({"message": messages.get(timeout=command.get("timeout", 10))})
                except queue.Empty:
                    answer({"timeout": True})
            elif op == "quiet":
                seen = []
                try:
                    while True:
                        seen.append(messages.get(timeout=command["seconds"]))
                except queue.Empty:
                    pass
                answer({"messages": seen})
            elif op == "close":
                if client is not None:
                    client.disconnect()
                answer({"closed": True})
                return
            else:
                answer({"error": "unknown op " + op})
        except Exception as error:  # reported to the test, which fails with it
            answer({"error": "%s: %s" % (type(error).__name__, error)})


if __name__ == "__main__":
    main()
