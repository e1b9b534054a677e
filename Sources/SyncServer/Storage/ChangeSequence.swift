/// Change versions as this server makes them: a database-wide counter rendered as 24 lowercase
/// hex digits, so that they look like the reference service's cvs and sort like the counter.
enum ChangeSequence {
    static let width = 24

    /// The wire form of a counter value.
    static func render(_ value: Int64) -> String {
        let hex = String(UInt64(bitPattern: value), radix: 16)
        return String(repeating: "0", count: max(0, width - hex.utf8.count)) + hex
    }

    /// The counter value of a cv this server made, or nil for anything else (answered `cv:?`).
    static func parse(_ text: some StringProtocol) -> Int64? {
        let utf8 = text.utf8
        guard utf8.count == width,
              utf8.allSatisfy({ ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) }),
              let value = UInt64(text, radix: 16), value <= UInt64(Int64.max)
        else { return nil }
        return Int64(value)
    }
}
