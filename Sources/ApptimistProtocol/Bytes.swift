/// Reads the spec's big-endian fields from a header, naming the field that runs out.
struct ByteReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    mutating func bytes(_ count: Int, _ field: String) throws(ApptimistProtocolError) -> [UInt8] {
        guard count <= remaining else { throw .truncatedHeader(field: field) }
        defer { offset += count }
        return Array(bytes[offset ..< offset + count])
    }

    mutating func unsigned<T: FixedWidthInteger & UnsignedInteger>(_: T.Type, _ field: String) throws(ApptimistProtocolError) -> T {
        try bytes(T.bitWidth / 8, field).reduce(0) { ($0 << 8) | T($1) }
    }

    /// Everything must have been read: a header has no optional tail.
    func finish() throws(ApptimistProtocolError) {
        guard remaining == 0 else { throw .trailingBytes(remaining) }
    }
}

/// Writes the spec's big-endian fields, refusing what its fixed sizes or length prefixes cannot hold.
struct ByteWriter {
    private(set) var bytes: [UInt8] = []

    mutating func unsigned<T: FixedWidthInteger & UnsignedInteger>(_ value: T) {
        for shift in stride(from: T.bitWidth - 8, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> shift)) }
    }

    mutating func fixed(_ value: [UInt8], _ field: String, length: Int) throws(ApptimistProtocolError) {
        guard value.count == length else { throw .wrongFieldLength(field: field, expected: length, actual: value.count) }
        bytes += value
    }

    mutating func raw(_ value: [UInt8]) { bytes += value }

    /// The length of `value` as a `T`-sized prefix (the value itself is written separately where
    /// the spec puts several prefixes before their values).
    mutating func length<T: FixedWidthInteger & UnsignedInteger>(of value: [UInt8], _ field: String, as _: T.Type) throws(ApptimistProtocolError) {
        guard let length = T(exactly: value.count) else { throw .fieldTooLong(field: field, length: value.count, maximum: Int(T.max)) }
        unsigned(length)
    }
}
