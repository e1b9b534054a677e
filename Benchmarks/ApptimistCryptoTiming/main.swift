import ApptimistCrypto
import ApptimistProtocol
import Foundation

// The crypto each Apptimist PDU costs (issue 18), timed with the real ApptimistChannel: the
// sender seals a WRITE header and a data part of --bytes bytes (sealData, then seal: what the
// mount does per save), the receiver opens both (open, then openData: what the server does).
// Beside it, the same frame rendered and parsed with nothing sealed, measured in the same run:
// what a PDU costs without crypto. Prints one JSON object (microseconds per PDU, wall clock and
// CPU, median of --rounds rounds of --iterations PDUs each); scripts/bench-apptimist shows it beside the mount's
// per-file time.

struct Options {
    var iterations = 2_000
    var rounds = 7
    var bytes = 1_024
    var version = ApptimistVersion.v2

    init(_ arguments: [String]) throws {
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { throw Failure("\(flag) needs a value") }
            switch flag {
            case "--iterations": iterations = try Self.positive(flag, value)
            case "--rounds": rounds = try Self.positive(flag, value)
            case "--bytes": bytes = try Self.positive(flag, value)
            case "--version":
                guard let raw = UInt8(value), let known = ApptimistVersion(rawValue: raw) else { throw Failure("--version: 1 or 2") }
                version = known
            default: throw Failure("unknown option \(flag)")
            }
        }
        // Version 1's u16 sequence: a channel seals at most maxSequence headers.
        if UInt64(iterations) * UInt64(rounds + 1) > version.maxSequence {
            throw Failure("--iterations × (--rounds + 1) must stay within version \(version.rawValue)'s \(version.maxSequence) PDUs")
        }
    }

    static func positive(_ flag: String, _ value: String) throws -> Int {
        guard let number = Int(value), number > 0 else { throw Failure("\(flag): a positive number") }
        return number
    }
}

struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A mount (device key, user key) and a server (service key) with a channel each way.
struct Pair {
    var sender: ApptimistChannel
    var receiver: ApptimistChannel
    let user: BoxKeyPair
    let service: BoxKeyPair
    let fields: ApptimistFileFields
    let plain: [UInt8]

    init(_ options: Options) throws {
        let device = try BoxKeyPair.generate()
        service = try BoxKeyPair.generate()
        user = try BoxKeyPair.generate()
        let prefix = try CryptoBox.randomNonce()
        sender = try ApptimistChannel(version: options.version, own: device, peerPublicKey: service.publicKey, serviceDataNonce: prefix)
        receiver = try ApptimistChannel(version: options.version, own: service, peerPublicKey: device.publicKey, serviceDataNonce: prefix)
        fields = ApptimistFileFields(publicKey: user.publicKey, filename: Array("notes/benchmark.txt".utf8))
        plain = (0 ..< options.bytes).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    }

    /// One WRITE with its data, sealed by the sender and opened by the receiver; the opened bytes.
    mutating func sealAndOpen() throws -> Int {
        let data = try sender.sealData(plain, to: user.publicKey, from: user.secretKey)
        let frame = try sender.seal(.write(fields), data: data)
        let received = try receiver.open(frame)
        return try receiver.openData(received.data, from: user.publicKey, to: user.secretKey).count + received.headerBytes.count
    }

    /// The same frame with nothing sealed: header rendered and parsed, frame rendered and parsed.
    func plainFrame(_ version: ApptimistVersion) throws -> Int {
        let header = try ApptimistHeader(version: version, pdu: .write(fields)).render()
        let frame = try ApptimistFrame(sealedHeader: header, dataNonce: version == .v1 ? nil : [UInt8](repeating: 0, count: 24), sealedData: plain)
            .render(version: version)
        let parsed = try ApptimistFrame.parse(frame, version: version)
        return try ApptimistHeader.parse(parsed.sealedHeader, version: version).pdu.type.rawValue.hashValue &+ parsed.sealedData.count
    }
}

/// Microseconds per PDU, wall clock and this thread's CPU time (on a loaded machine the wall
/// clock counts the time other processes held the core; the CPU time does not): the median
/// round of each.
func microsecondsPerPDU(_ options: Options, _ body: () throws -> Int) rethrows -> (wall: Double, cpu: Double) {
    var sink = 0
    var wall: [Double] = []
    var cpu: [Double] = []
    for round in 0 ... options.rounds {
        let start = (ContinuousClock.now, threadCPUSeconds())
        for _ in 0 ..< options.iterations { sink &+= try body() }
        let elapsed = ContinuousClock.now - start.0
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        if round > 0 {  // round 0 warms up
            wall.append(seconds * 1e6 / Double(options.iterations))
            cpu.append((threadCPUSeconds() - start.1) * 1e6 / Double(options.iterations))
        }
    }
    if sink == 42 { print("", terminator: "") }  // keeps the work observable
    return (wall.sorted()[wall.count / 2], cpu.sorted()[cpu.count / 2])
}

func threadCPUSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

do {
    let options = try Options(Array(CommandLine.arguments.dropFirst()))
    var pair = try Pair(options)
    let crypto = try microsecondsPerPDU(options) { try pair.sealAndOpen() }
    let plain = try microsecondsPerPDU(options) { try pair.plainFrame(options.version) }
    let result: [String: Any] = [
        "version": Int(options.version.rawValue), "bytes": options.bytes, "iterations": options.iterations, "rounds": options.rounds,
        "seal_open_us": crypto.wall, "seal_open_cpu_us": crypto.cpu, "plain_frame_us": plain.wall, "plain_frame_cpu_us": plain.cpu,
    ]
    print(String(decoding: try JSONSerialization.data(withJSONObject: result, options: [.sortedKeys]), as: UTF8.self))
} catch {
    FileHandle.standardError.write(Data("ApptimistCryptoTiming: \(error)\n".utf8))
    exit(1)
}
