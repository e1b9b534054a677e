import JSONDiff
import PropertyBased
import Testing
@testable import SyncProtocol

/// parse(render(x)) == x for random messages of every kind. PropertyBased supplies (and reports)
/// the seed; `RandomMessages` grows a message from it, so a failure is reproducible.
@Suite struct RoundTripPropertyTests {
    static let seeds = Gen.int(in: 0...Int.max)

    @Test func clientMessagesRoundTrip() async {
        await propertyCheck(count: 400, input: Self.seeds) { seed in
            var random = RandomMessages(seed: UInt64(seed))
            let message = random.clientMessage()
            let text = message.render()
            do {
                #expect(try ClientMessage.parse(text) == message, "\(text)")
            } catch {
                Issue.record("\(text): \(error)")
            }
        }
    }

    @Test func serverMessagesRoundTrip() async {
        await propertyCheck(count: 400, input: Self.seeds) { seed in
            var random = RandomMessages(seed: UInt64(seed))
            let message = random.serverMessage()
            let text = message.render()
            do {
                #expect(try ServerMessage.parse(text) == message, "\(text)")
            } catch {
                Issue.record("\(text): \(error)")
            }
        }
    }

    @Test func framesRoundTripAndRenderIsStable() async {
        await propertyCheck(count: 300, input: Self.seeds) { seed in
            var random = RandomMessages(seed: UInt64(seed))
            let text = random.serverMessage().render()
            do {
                let frame = try Frame.parse(text)
                #expect(frame.render() == text)
                #expect(try ServerMessage(frame: frame).render() == text)
            } catch {
                Issue.record("\(text): \(error)")
            }
        }
    }

    @Test func truncatedFramesFailWithTypedErrorsOrParse() async {
        // Every prefix of a valid frame either parses or throws ProtocolError (typed throws
        // guarantees the type; this proves there is no trap on the way).
        await propertyCheck(count: 60, input: Self.seeds) { seed in
            var random = RandomMessages(seed: UInt64(seed))
            let text = random.clientMessage().render()
            for length in stride(from: 0, through: text.count, by: max(1, text.count / 40)) {
                _ = try? ClientMessage.parse(String(text.prefix(length)))
                _ = try? ServerMessage.parse(String(text.prefix(length)))
            }
        }
    }

    @Test func validKeysAreAlwaysAccepted() async {
        await propertyCheck(count: 300, input: Self.seeds) { seed in
            var random = RandomMessages(seed: UInt64(seed))
            let key = random.key()
            #expect(EntityKey.isValid(key))
            do {
                #expect(try ClientMessage.parse("7:e:\(key).3") == .channel(7, .entity(key: key, version: 3)))
            } catch {
                Issue.record("\(key): \(error)")
            }
        }
    }
}

/// SplitMix64: small, fast, and the same sequence for the same seed everywhere.
struct RandomMessages {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + Int(next() % UInt64(range.count))
    }

    mutating func bool() -> Bool { next() & 1 == 1 }

    mutating func maybe<T>(_ make: (inout RandomMessages) -> T) -> T? {
        bool() ? make(&self) : nil
    }

    mutating func string(from alphabet: [Character], length: ClosedRange<Int>) -> String {
        String((0..<int(length)).map { _ in alphabet[int(0...alphabet.count - 1)] })
    }

    static let keyAlphabet = Array("abcXYZ019._%@-")
    static let tokenAlphabet = Array("abcdef0123456789")
    static let textAlphabet: [Character] = Array("ab :,\"\\\n\t{}[]é😀\u{1}/") + ["\u{2028}"]

    mutating func key() -> String { string(from: Self.keyAlphabet, length: 1...20) }
    mutating func token() -> String { string(from: Self.tokenAlphabet, length: 1...32) }
    mutating func text() -> String { string(from: Self.textAlphabet, length: 0...12) }
    mutating func version() -> Int { int(0...1_000_000) }

    mutating func json(depth: Int = 0) -> JSONValue {
        switch int(0...(depth > 2 ? 4 : 6)) {
        case 0: return .null
        case 1: return .bool(bool())
        case 2: return .integer(Int64(int(-1_000_000...1_000_000)))
        case 3: return .double(Double(int(-1000...1000)) + 0.25)
        case 4: return .string(text())
        case 5: return .array((0..<int(0...3)).map { _ in json(depth: depth + 1) })
        default: return .object(object(depth: depth + 1))
        }
    }

    mutating func object(depth: Int = 0) -> JSONObject {
        var object = JSONObject()
        for _ in 0..<int(0...3) { object[JSONKey(text())] = json(depth: depth + 1) }
        return object
    }

    mutating func diffOp(depth: Int) -> DiffOp {
        switch int(0...(depth > 2 ? 5 : 7)) {
        case 0: return .insert(json(depth: depth))
        case 1: return .remove
        case 2: return .replace(json(depth: depth))
        case 3: return .increment(.integer(Int64(int(-50...50))))
        case 4: return .stringDelta("=\(int(0...9))\t-1\t+\(text())")
        case 5: return .listDelta("=2\t+[1]%0A")
        case 6: return .object(diff(depth: depth + 1))
        default:
            var list = ListDiff()
            for _ in 0..<int(0...3) { list[int(0...20)] = diffOp(depth: depth + 1) }
            return .list(list)
        }
    }

    mutating func diff(depth: Int = 0) -> ObjectDiff {
        var diff = ObjectDiff()
        for _ in 0..<int(0...4) { diff[JSONKey(text())] = diffOp(depth: depth) }
        return diff
    }

    mutating func changeRequest() -> ChangeRequest {
        let operation: ChangeOperation = bool() ? .modify : .remove
        return ChangeRequest(
            clientID: maybe { $0.token() }, id: key(), operation: operation,
            diff: operation == .modify ? maybe { $0.diff() } : nil,
            sourceVersion: maybe { $0.version() }, ccid: token(), data: maybe { $0.object() }
        )
    }

    mutating func change() -> Change {
        if int(0...3) == 0 {
            return .rejected(ChangeRejection(
                clientID: maybe { $0.token() }, id: text(), ccids: (0..<int(0...2)).map { _ in token() },
                code: [400, 401, 404, 405, 409, 412, 413, 440, 500, 503][int(0...9)], data: maybe { $0.object() }
            ))
        }
        let operation: ChangeOperation = bool() ? .modify : .remove
        return .applied(AppliedChange(
            clientID: maybe { $0.text() }, id: key(), operation: operation,
            diff: operation == .modify ? diff() : maybe { $0.diff() },
            endVersion: operation == .modify ? version() : maybe { $0.version() },
            sourceVersion: maybe { $0.version() }, changeVersion: token(),
            ccids: (0..<int(0...3)).map { _ in token() }, data: maybe { $0.object() }
        ))
    }

    mutating func channelClientMessage() -> ChannelClientMessage {
        switch int(0...5) {
        case 0:
            return .initialize(InitRequest(
                clientID: maybe { $0.text() }, api: maybe { $0.text() }, token: text(), appID: maybe { $0.text() },
                name: text(), library: maybe { $0.text() }, version: maybe { $0.text() },
                cmd: maybe { "i:1:\($0.token())::\($0.int(1...500))" }
            ))
        case 1:
            return .index(IndexRequest(
                includeData: bool(), mark: maybe { $0.token() }, offset: maybe { $0.token() }, limit: maybe { $0.version() }
            ))
        case 2: return .entity(key: key(), version: version())
        case 3: return .changeVersion(token())
        case 4: return .changes((0..<int(0...4)).map { _ in changeRequest() })
        default:
            return .indexReply(LocalIndex(
                current: maybe { $0.token() },
                index: (0..<int(0...3)).map { _ in IndexPage.Entry(id: key(), version: version(), data: maybe { $0.object() }) },
                pending: (0..<int(0...3)).map { _ in LocalIndex.Pending(id: key(), sourceVersion: maybe { $0.version() }, ccid: token()) },
                extra: maybe { $0.object() }
            ))
        }
    }

    mutating func clientMessage() -> ClientMessage {
        switch int(0...5) {
        case 0: return .heartbeat(version())
        case 1: return .log(.object(["log": .string(text())]))
        default: return .channel(int(0...99), channelClientMessage())
        }
    }

    mutating func channelServerMessage() -> ChannelServerMessage {
        switch int(0...6) {
        case 0: return .authOK(username: "\(key())@example.com")
        case 1: return .authError(code: [400, 401, 500][int(0...2)], message: text())
        case 2:
            return .index(IndexPage(
                current: token(),
                index: (0..<int(0...4)).map { _ in IndexPage.Entry(id: key(), version: version(), data: maybe { $0.object() }) },
                mark: maybe { $0.token() }
            ))
        case 3: return .entity(key: key(), version: version(), bool() ? .unknown : .data(object()))
        case 4: return .changeVersionUnknown
        case 5: return .changes((0..<int(0...4)).map { _ in change() })
        default: return .indexRequest
        }
    }

    mutating func serverMessage() -> ServerMessage {
        switch int(0...5) {
        case 0: return .heartbeat(version())
        case 1: return .log(level: int(0...2))
        default: return .channel(int(0...99), channelServerMessage())
        }
    }
}
