import Foundation
import Testing

/// A file renamed on one mount while another mount's create and removal of the same key arrive:
/// rename(2) has returned, so the new name must read back at once, and keep its bytes for good.
/// The whole-system model once saw the opposite (seed 50839940: m1 renamed `k3.json` holding
/// bytes that are not JSON to `k3.bak` while m2's save-then-unlink of k3 was on its way; the read
/// of `k3.bak` right after found nothing, and the file was there again a moment later). The
/// cause: the removal and a's own save made the note again under another inode number, and the
/// mount renamed the new inode while the kernel, which still held the old number for the name,
/// moved that one to the new name: an open of it then found no file for up to the entry
/// timeout (an hour). And bytes written to a file a removal from elsewhere took between the
/// open and the first write went nowhere. This runs that race many times, on both kinds of
/// destination and content.
@Suite(.serialized, .timeLimit(.minutes(10)))
struct RenameRaceTests {
    enum Destination: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// `mv k.json k.bak`: a local-only name nothing from elsewhere can take.
        case scratchName
        /// `mv k.json r.json`: another entity, which only this mount touches.
        case anotherEntity

        var testDescription: String { rawValue }
        func name(_ i: Int) -> String { self == .scratchName ? "k\(i).bak" : "r\(i).json" }
    }

    enum Content: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Bytes that are not JSON: kept locally, never sent.
        case invalid
        /// A note, sent as the racing removal arrives.
        case valid

        var testDescription: String { rawValue }
    }

    static let rounds = 40

    @Test(arguments: Destination.allCases, Content.allCases)
    func aRenamedFileReadsBackWhileTheSameKeyIsRemovedElsewhere(_ destination: Destination, _ content: Content) throws {
        let sandbox = try Sandbox(timeLimit: 400)
        defer { sandbox.close() }
        let server = try ServerProcess.start(in: sandbox)
        let a = try MountProcess(sandbox, at: "a", server: server)
        let b = try MountProcess(sandbox, at: "b", server: server, token: try server.newToken(in: sandbox))

        // b saves k<i> and removes it at once; a waits until k<i> shows (the create arrived, the
        // removal is on its way), writes its own bytes into it and renames it, then reads the new
        // name. Every failure is printed as "round call errno".
        let output = try Command.python(
            """
            import errno, json, os, sys, threading, time
            a, b, rounds, destination, content = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
            started = [threading.Event() for _ in range(rounds)]
            def remover():
                for i in range(rounds):
                    path = os.path.join(b, 'k%d.json' % i)
                    with open(path, 'w') as f:
                        f.write('{"n": %d}\\n' % i)
                    os.unlink(path)
                    started[i].set()
                    time.sleep(0.02)
            def renamer():
                for i in range(rounds):
                    started[i].wait(30)
                    source = os.path.join(a, 'k%d.json' % i)
                    deadline = time.time() + 0.5
                    while not os.path.exists(source) and time.time() < deadline:
                        time.sleep(0.001)
                    body = ('not json %d {' % i) if content == 'invalid' else ('{"mine": %d}\\n' % i)
                    with open(source, 'w') as f:
                        f.write(body)
                    target = os.path.join(a, ('k%d.bak' if destination == 'scratchName' else 'r%d.json') % i)
                    try:
                        os.rename(source, target)
                    except OSError as e:
                        print(i, 'rename', errno.errorcode[e.errno])
                        continue
                    try:
                        with open(target) as f:
                            read = f.read()
                        if read != body and (content == 'invalid' or json.loads(read) != json.loads(body)):
                            print(i, 'read', 'other-bytes', repr(read))
                    except OSError as e:
                        print(i, 'read', errno.errorcode[e.errno])
            threads = [threading.Thread(target=remover), threading.Thread(target=renamer)]
            for t in threads: t.start()
            for t in threads: t.join()
            """, [a.path("notes"), b.path("notes"), "\(Self.rounds)", destination.rawValue, content.rawValue],
            in: sandbox.root, timeout: 300)
        #expect(output.stdout.isEmpty, "calls that failed on a (round, call, errno):\n\(output.stdout)")

        // Once everything has settled (a marker each way: each mount has sent all it had before
        // its marker, and has what the other sent), every renamed file still has a's bytes.
        for (from, to) in [(a, b), (b, a)] {
            let marker = TwoMountTests.pretty(["marker": from === a ? "1" : "2"])
            try Files.write(from.path("notes/marker.json"), marker)
            #expect(try Files.waitFor(to.path("notes/marker.json"), toHold: marker, seconds: 120) == marker)
        }
        for i in 0..<Self.rounds {
            let held = try Files.read(a.path("notes/\(destination.name(i))"))
            let expected: Bool
            switch content {
            case .invalid: expected = held == "not json \(i) {"
            case .valid:
                let object = held.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Int] }
                expected = object == ["mine": i]
            }
            #expect(expected, "round \(i): \(destination.name(i)) holds \(held.map { "\($0)" } ?? "nothing")")
        }
    }
}
