struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Array where Element == UInt8 {
    init(hex: String) throws {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { throw TestFailure("odd hex length in \(hex)") }
        self = try stride(from: 0, to: digits.count, by: 2).map { index in
            guard let byte = UInt8(String(decoding: digits[index ..< index + 2], as: UTF8.self), radix: 16) else {
                throw TestFailure("not hex: \(hex)")
            }
            return byte
        }
    }

    var hex: String { map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }
}
