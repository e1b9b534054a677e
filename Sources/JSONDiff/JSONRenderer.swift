extension JSONValue {
    /// The file format: 2-space indent, keys sorted by code point, `": "` after keys, trailing newline.
    public func prettyRendered() -> String {
        String(decoding: prettyRenderedBytes(), as: UTF8.self)
    }

    /// The file format as UTF-8 bytes.
    public func prettyRenderedBytes() -> [UInt8] {
        var writer = JSONWriter(pretty: true)
        writer.write(self, indent: 0)
        writer.output.append(0x0A)
        return writer.output
    }

    /// The wire format and the file format's bytes from one rendering: the wire format is the
    /// file format without its whitespace, which is cheaper to drop than to walk the value (and
    /// sort each object's members) again. A first sync stores every entity both ways.
    public func compactAndPrettyRendered() -> (compact: String, pretty: [UInt8]) {
        let pretty = prettyRenderedBytes()
        return (String(unsafeUninitializedCapacity: pretty.count) { compact in
            pretty.withUnsafeBufferPointer { Self.dropWhitespace(outsideStringsOf: $0, into: compact) }
        }, pretty)
    }

    /// Copies JSON text without the whitespace between its tokens; returns the bytes written.
    private static func dropWhitespace(
        outsideStringsOf text: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>
    ) -> Int {
        var written = 0
        var index = 0
        while index < text.count {
            let byte = text[index]
            if byte == UInt8(ascii: "\"") {
                let end = ByteScanning.endOfString(text, openingAt: index) ?? text.count
                _ = UnsafeMutableBufferPointer(rebasing: output[written..<(written + end - index)])
                    .initialize(from: UnsafeBufferPointer(rebasing: text[index..<end]))
                written += end - index
                index = end
                continue
            }
            switch byte {
            case UInt8(ascii: " "), 0x0A, 0x0D, 0x09: break
            default:
                output[written] = byte
                written += 1
            }
            index += 1
        }
        return written
    }

    /// The wire format: keys sorted by code point, no whitespace.
    public func compactRendered() -> String {
        String(decoding: compactRenderedBytes(), as: UTF8.self)
    }

    /// The wire format as UTF-8 bytes.
    public func compactRenderedBytes() -> [UInt8] {
        var writer = JSONWriter(pretty: false)
        writer.write(self, indent: 0)
        return writer.output
    }
}

extension JSONValue {
    /// The compact text of the wire diff that makes an object from an empty object, as
    /// `JSONDiffing.encode(JSONDiffing.diff(from: [:], to: object))` renders compactly:
    /// `{"key":{"o":"+","v":value},...}`, keys in code point order. Written from the object's own
    /// compact text (`compactRendered`'s: no whitespace, members in that order), each member
    /// wrapped where it stands: the object itself may be let go first (for a note of 750,000
    /// small keys it takes three times its text, and its diff was an object of two members per
    /// key), and the diff is written once, into a string of its exact length (the text's and 14
    /// bytes per member). Nil if `text` is not a compact JSON object.
    public static func compactCreationDiff(ofCompactText text: String) -> String? {
        var text = text
        return text.withUTF8 { bytes -> String? in
            var members = 0
            guard CompactObjectText.forEachMember(bytes, { _, _ in members += 1 }) else { return nil }
            let wrapper = Array(#":{"o":"+","v":"#.utf8)
            return String(unsafeUninitializedCapacity: compactCreationDiffLength(compactLength: bytes.count, members: members)) { output in
                var text = FilledText(output)
                text.append(UInt8(ascii: "{"))
                var first = true
                _ = CompactObjectText.forEachMember(bytes) { key, value in
                    if !first { text.append(UInt8(ascii: ",")) }
                    first = false
                    text.append(UnsafeBufferPointer(rebasing: bytes[key]))
                    wrapper.withUnsafeBufferPointer { text.append($0) }
                    text.append(UnsafeBufferPointer(rebasing: bytes[value]))
                    text.append(UInt8(ascii: "}"))
                }
                text.append(UInt8(ascii: "}"))
                return text.count
            }
        }
    }
}

/// The members of a JSON object's text, gathered from it one by one (`JSONValue.compactObjectPieces`):
/// each key's bytes and each value's compact text, in document order. They no longer need the
/// text they came from, so it may go before they are put together (`text()`).
public struct CompactObjectPieces: Sendable {
    fileprivate var keys: [UInt8]
    fileprivate var values: [UInt8]
    /// Where each member's key and value end in `keys` and `values`, in document order.
    fileprivate var ends: [(key: UInt32, value: UInt32)]
}

extension JSONValue {
    /// The compact text of the JSON object `bytes` hold, exactly as `JSONValue(parsing:)` and
    /// `compactRendered()` make it, and its member count, without building the object
    /// (`compactObjectPieces`, then `CompactObjectPieces.text()`). Nil if `bytes` are not one JSON
    /// object (the parse says why).
    public static func compactObjectText(parsing bytes: [UInt8]) -> (text: String, members: Int)? {
        compactObjectPieces(parsing: bytes)?.text()
    }

    /// The pieces of the compact text of the JSON object `bytes` hold: each member's value is
    /// parsed and rendered on its own as it comes. For a note of 750,000 small keys the object
    /// took three times its text (issue 37); the pieces take the text and 8 bytes per member.
    /// Nil if `bytes` are not one JSON object.
    public static func compactObjectPieces(parsing bytes: [UInt8]) -> CompactObjectPieces? {
        // Room for as many bytes as the document holds, which the keys and the values' text
        // rarely pass: growing by doubling copied each at its largest (issue 37). A large
        // buffer is mapped on its own (`FreedMemory`), so the room that stays unused costs no
        // memory.
        var keys: [UInt8] = []
        keys.reserveCapacity(bytes.count)
        var values = JSONWriter(pretty: false)
        values.output.reserveCapacity(bytes.count)
        var ends: [(key: UInt32, value: UInt32)] = []
        let parsed = bytes.withUnsafeBufferPointer { buffer in
            JSONParser.forEachOutermostMember(
                buffer,
                JSONParser.OutermostMembers(
                    expect: { count in ends.reserveCapacity(count) },
                    member: { key, value in
                        keys.append(contentsOf: key.utf8)
                        values.write(value, indent: 0)
                        ends.append((UInt32(keys.count), UInt32(values.output.count)))
                    }))
        }
        guard parsed, keys.count <= UInt32.max, values.output.count <= UInt32.max else { return nil }
        return CompactObjectPieces(keys: keys, values: values.output, ends: ends)
    }
}

extension CompactObjectPieces {
    /// The object's compact text and member count: the members put in their keys' order (the
    /// last of duplicate keys kept, as the parse keeps it). Sorting takes 4 bytes per member
    /// when the keys came out of order.
    public consuming func text() -> (text: String, members: Int) {
        let ends = self.ends
        return keys.withUnsafeBufferPointer { keys in
            values.withUnsafeBufferPointer { values in
                let start = { (index: Int) -> (key: Int, value: Int) in
                    index == 0 ? (0, 0) : (Int(ends[index - 1].key), Int(ends[index - 1].value))
                }
                let key = { (index: Int) in UnsafeBufferPointer(rebasing: keys[start(index).key..<Int(ends[index].key)]) }
                // Keys' code point order is their bytes' order.
                let compare = { (a: Int, b: Int) -> Int in
                    let left = key(a)
                    let right = key(b)
                    for position in 0..<min(left.count, right.count) where left[position] != right[position] {
                        return Int(left[position]) - Int(right[position])
                    }
                    return left.count - right.count
                }
                // The members in their keys' order, the last of equal keys kept. A document in
                // that order already (every note this mount wrote, and most edits of one) is
                // taken as it is; any other is sorted by position among equal keys, and the
                // earlier of equal keys left out.
                var kept: [UInt32]? = nil
                if !ends.indices.dropFirst().allSatisfy({ compare($0 - 1, $0) < 0 }) {
                    var order = (0..<UInt32(ends.count)).map { $0 }
                    order.sort { a, b in
                        let keys = compare(Int(a), Int(b))
                        return keys != 0 ? keys < 0 : a < b
                    }
                    var count = 0
                    for position in order.indices {
                        if position + 1 < order.count, compare(Int(order[position + 1]), Int(order[position])) == 0 { continue }
                        order[count] = order[position]
                        count += 1
                    }
                    order.removeSubrange(count...)
                    kept = order
                }
                let memberCount = kept?.count ?? ends.count
                let member = { (position: Int) -> Int in kept.map { Int($0[position]) } ?? position }
                // A key that needs no escape is its bytes quoted; one that does is rendered by the
                // writer, once to measure the text and once to write it.
                let plain = { (index: Int) -> Bool in
                    !key(index).contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
                }
                let escaped = { (index: Int) -> [UInt8] in
                    var writer = JSONWriter(pretty: false)
                    writer.writeString(String(decoding: key(index), as: UTF8.self))
                    return writer.output
                }
                var length = 2 + max(memberCount - 1, 0)
                for position in 0..<memberCount {
                    let index = member(position)
                    let keyLength = plain(index) ? key(index).count + 2 : escaped(index).count
                    length += keyLength + 1 + Int(ends[index].value) - start(index).value
                }
                let text = String(unsafeUninitializedCapacity: length) { output in
                    var text = FilledText(output)
                    text.append(UInt8(ascii: "{"))
                    for position in 0..<memberCount {
                        let index = member(position)
                        if position > 0 { text.append(UInt8(ascii: ",")) }
                        if plain(index) {
                            text.append(UInt8(ascii: "\""))
                            text.append(key(index))
                            text.append(UInt8(ascii: "\""))
                        } else {
                            escaped(index).withUnsafeBufferPointer { text.append($0) }
                        }
                        text.append(UInt8(ascii: ":"))
                        text.append(UnsafeBufferPointer(rebasing: values[start(index).value..<Int(ends[index].value)]))
                    }
                    text.append(UInt8(ascii: "}"))
                    return text.count
                }
                return (text, memberCount)
            }
        }
    }
}

extension JSONValue {
    /// The length of `compactCreationDiff`'s text for an object of `members` members whose own
    /// compact text takes `compactLength` bytes: each member's value wrapped in `{"o":"+","v":…}`.
    public static func compactCreationDiffLength(compactLength: Int, members: Int) -> Int {
        compactLength + 14 * members
    }
}

/// Text written into a string's uninitialized storage (`String(unsafeUninitializedCapacity:)`),
/// its length counted; the caller sized the storage exactly.
struct FilledText {
    private let output: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0

    init(_ output: UnsafeMutableBufferPointer<UInt8>) {
        self.output = output
    }

    mutating func append(_ byte: UInt8) {
        output[count] = byte
        count += 1
    }

    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        _ = UnsafeMutableBufferPointer(rebasing: output[count..<(count + bytes.count)]).initialize(from: bytes)
        count += bytes.count
    }
}

/// The members of an object's compact JSON text, found by their bytes alone (strings skipped a
/// word at a time, containers by their depth), without parsing a value.
enum CompactObjectText {
    /// Calls `body` with each member's key (quoted) and value ranges, in order; false if `text`
    /// is not a compact object (whitespace, or anything out of place).
    static func forEachMember(_ text: UnsafeBufferPointer<UInt8>, _ body: (Range<Int>, Range<Int>) -> Void) -> Bool {
        guard text.count >= 2, text[0] == UInt8(ascii: "{"), text[text.count - 1] == UInt8(ascii: "}") else { return false }
        var index = 1
        if text.count == 2 { return true }
        while true {
            guard text[index] == UInt8(ascii: "\""), let keyEnd = ByteScanning.endOfString(text, openingAt: index),
                keyEnd < text.count, text[keyEnd] == UInt8(ascii: ":"), let valueEnd = endOfValue(text, from: keyEnd + 1)
            else { return false }
            body(index..<keyEnd, (keyEnd + 1)..<valueEnd)
            guard valueEnd < text.count else { return false }
            if valueEnd == text.count - 1 { return text[valueEnd] == UInt8(ascii: "}") }
            guard text[valueEnd] == UInt8(ascii: ",") else { return false }
            index = valueEnd + 1
        }
    }

    /// The offset after the value that starts at `start`: a string, a container (to its
    /// matching end), or a literal or number (to the next `,`, `]` or `}`).
    private static func endOfValue(_ text: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard start < text.count else { return nil }
        switch text[start] {
        case UInt8(ascii: "\""):
            return ByteScanning.endOfString(text, openingAt: start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var index = start
            while index < text.count {
                switch text[index] {
                case UInt8(ascii: "\""):
                    guard let end = ByteScanning.endOfString(text, openingAt: index) else { return nil }
                    index = end
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return index + 1 }
                default: break
                }
                index += 1
            }
            return nil
        default:
            var index = start
            while index < text.count, text[index] != UInt8(ascii: ","), text[index] != UInt8(ascii: "}"),
                text[index] != UInt8(ascii: "]")
            {
                index += 1
            }
            return index > start ? index : nil
        }
    }
}

extension String {
    /// This string as a JSON string literal (quoted and escaped).
    public var jsonQuoted: String {
        var writer = JSONWriter(pretty: false)
        writer.writeString(self)
        return String(decoding: writer.output, as: UTF8.self)
    }
}

/// A compact JSON object written member by member, in the caller's order, into one buffer: the
/// protocol's messages put fields in the reference clients' order, and a string per field (quoted
/// key, rendered value, each appended) cost more than the fields' bytes (~40K instructions for a
/// small change's broadcast).
public struct JSONMemberWriter {
    private var writer = JSONWriter(pretty: false)
    private var isEmpty = true

    public init() {
        writer.output.append(UInt8(ascii: "{"))
    }

    /// `"key":`, after a comma if a member came before.
    public mutating func key(_ key: String) {
        if !isEmpty { writer.output.append(UInt8(ascii: ",")) }
        isEmpty = false
        writer.writeString(key)
        writer.output.append(UInt8(ascii: ":"))
    }

    public mutating func value(_ value: JSONValue) {
        writer.write(value, indent: 0)
    }

    public mutating func string(_ string: String) {
        writer.writeString(string)
    }

    public mutating func integer(_ number: Int) {
        writer.output.append(contentsOf: String(number).utf8)
    }

    /// `strings` as a JSON array of strings.
    public mutating func strings(_ strings: [String]) {
        writer.output.append(UInt8(ascii: "["))
        for (index, string) in strings.enumerated() {
            if index > 0 { writer.output.append(UInt8(ascii: ",")) }
            writer.writeString(string)
        }
        writer.output.append(UInt8(ascii: "]"))
    }

    /// JSON text the caller rendered already, as it is.
    public mutating func raw(_ json: String) {
        writer.output.append(contentsOf: json.utf8)
    }

    /// The object, closed.
    public func rendered() -> String {
        var output = writer.output
        output.append(UInt8(ascii: "}"))
        return String(decoding: output, as: UTF8.self)
    }
}

/// Sorts object keys by Unicode code point (UTF-8 byte order), like Python's `sort_keys`.
func codePointOrder(_ lhs: String, _ rhs: String) -> Bool {
    var lhs = lhs
    var rhs = rhs
    return lhs.withUTF8 { left in
        rhs.withUTF8 { right in
            let count = min(left.count, right.count)
            for index in 0..<count where left[index] != right[index] {
                return left[index] < right[index]
            }
            return left.count < right.count
        }
    }
}

struct JSONWriter {
    let pretty: Bool
    var output: [UInt8] = []

    init(pretty: Bool) {
        self.pretty = pretty
        output.reserveCapacity(256)
    }

    mutating func write(_ value: JSONValue, indent: Int) {
        switch value {
        case .null: append("null")
        case .bool(let flag): append(flag ? "true" : "false")
        case .integer(let number): append(String(number))
        case .bigInteger(let text): append(text)
        case .double(let number): writeDouble(number)
        case .string(let string): writeString(string)
        case .array(let items):
            guard !items.isEmpty else { return append("[]") }
            output.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                write(item, indent: indent + 1)
            }
            newline(indent)
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            guard !members.isEmpty else { return append("{}") }
            output.append(UInt8(ascii: "{"))
            var first = true
            Self.forEachSortedMember(members) { key, value in
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                newline(indent + 1)
                writeString(key.string)
                output.append(UInt8(ascii: ":"))
                if pretty { output.append(UInt8(ascii: " ")) }
                write(value, indent: indent + 1)
            }
            newline(indent)
            output.append(UInt8(ascii: "}"))
        }
    }

    /// An object's members in their keys' code point order. A small object's pairs are sorted
    /// as they are (sorting the pairs, not the keys, saves a hash lookup per member). A large
    /// one's would be moved and retained at every step, and their keys compared byte by byte:
    /// 40 % of the time of rendering a note of 750,000 keys (issue 37). So what is sorted is
    /// each key's first eight UTF-8 bytes as one number, beside the member's index, and keys
    /// compare whole only where those are equal. Where two prefixes differ, their order is the
    /// keys' order: at the first byte that differs, either both keys have it, or the one padded
    /// with zero there is the shorter, which sorts first. The members stay where the object
    /// keeps them (sorted are positions in it): a copy of them, and a sorted one, took 60 MB
    /// for those 750,000 keys.
    static func forEachSortedMember(_ members: JSONObject, _ body: (JSONKey, JSONValue) -> Void) {
        guard members.count > 32 else {
            for member in members.sorted(by: { $0.key < $1.key }) { body(member.key, member.value) }
            return
        }
        var order: [(prefix: UInt64, index: JSONObject.Index)] = []
        order.reserveCapacity(members.count)
        var index = members.startIndex
        while index != members.endIndex {
            var key = members[index].key.string
            let prefix = key.withUTF8(ByteScanning.orderPrefix)
            order.append((prefix, index))
            members.formIndex(after: &index)
        }
        order.sort { a, b in a.prefix != b.prefix ? a.prefix < b.prefix : members[a.index].key < members[b.index].key }
        for position in order {
            let member = members[position.index]
            body(member.key, member.value)
        }
    }

    private mutating func newline(_ indent: Int) {
        guard pretty else { return }
        output.append(0x0A)
        output.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent * 2))
    }

    private mutating func append(_ text: String) {
        output.append(contentsOf: text.utf8)
    }

    /// Swift's description is the shortest text that round-trips; it always has a '.' or an
    /// exponent, so the value parses back as a double. Non-finite values cannot come from
    /// parsing; if constructed they render as null (JSON has no such numbers).
    private mutating func writeDouble(_ number: Double) {
        guard number.isFinite else { return append("null") }
        append(number.description)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    mutating func writeString(_ string: String) {
        var string = string
        output.append(UInt8(ascii: "\""))
        string.withUTF8 { bytes in
            // Copy runs that need no escaping in one go.
            var runStart = 0
            var index = 0
            while index < bytes.count {
                index = ByteScanning.skipPlainWords(bytes, from: index)
                guard index < bytes.count else { break }
                let byte = bytes[index]
                index += 1
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<(index - 1)]))
                runStart = index
                appendEscape(byte)
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count]))
        }
        output.append(UInt8(ascii: "\""))
    }

    private mutating func appendEscape(_ byte: UInt8) {
        output.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): output.append(byte)
        case 0x0A: output.append(UInt8(ascii: "n"))
        case 0x0D: output.append(UInt8(ascii: "r"))
        case 0x09: output.append(UInt8(ascii: "t"))
        case 0x08: output.append(UInt8(ascii: "b"))
        case 0x0C: output.append(UInt8(ascii: "f"))
        default:
            output.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            output.append(Self.hexDigits[Int(byte >> 4)])
            output.append(Self.hexDigits[Int(byte & 0x0F)])
        }
    }
}
