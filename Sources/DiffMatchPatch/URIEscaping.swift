/// Percent-escaping as the wire format needs it: JavaScript's `encodeURI` (with spaces left
/// literal, as the reference's `.replace(/%20/g, ' ')` does) and a lenient decoder.
enum URIEscaping {
    /// `encodeURI` leaves these ASCII characters as they are.
    private static let unescaped: [Bool] = {
        var table = [Bool](repeating: false, count: 128)
        let literal = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'();/?:@&=+$,# "
        for byte in literal.utf8 { table[Int(byte)] = true }
        return table
    }()

    private static let hexDigits: [UInt8] = Array("0123456789ABCDEF".utf8)

    /// `encodeURI(text).replace(/%20/g, ' ')`.
    static func encode(_ text: String) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        encode(text.utf8, into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends the escaped form of UTF-8 bytes.
    static func encode(_ bytes: some Sequence<UInt8>, into output: inout [UInt8]) {
        for byte in bytes {
            if byte < 128 && unescaped[Int(byte)] {
                output.append(byte)
            } else {
                output.append(UInt8(ascii: "%"))
                output.append(hexDigits[Int(byte >> 4)])
                output.append(hexDigits[Int(byte & 0x0F)])
            }
        }
    }

    /// Decodes every percent-escape (like the Java and Python ports, not only those `decodeURI`
    /// would) into UTF-16 code units. UTF-8 sequences that encode a surrogate half on its own
    /// (`%ED%A0%BD%ED%B8%80`, CESU-8 style, as some ports emit for astral characters) and
    /// JavaScript `escape`-style `%uD83D` give that half, so split pairs still decode. A `+` stays
    /// a plus. Returns nil for a malformed escape.
    static func decode(_ text: String) -> [UInt16]? {
        var text = text
        return text.withUTF8 { bytes in decode(bytes) }
    }

    /// `decode` of a string's UTF-8 bytes (or any valid UTF-8).
    static func decode(_ bytes: UnsafeBufferPointer<UInt8>) -> [UInt16]? {
        var units: [UInt16] = []
        units.reserveCapacity(bytes.count)
        var literalStart = 0
        var index = 0

        func flushLiteral(upTo end: Int) {
            // Literal runs end at '%' or at the end, so they are whole UTF-8 sequences.
            if literalStart < end {
                units += utf16Units(fromValidUTF8: UnsafeBufferPointer(rebasing: bytes[literalStart..<end]))
            }
        }
        func hexByte(at position: Int) -> UInt8? {
            guard position + 2 < bytes.count, bytes[position] == UInt8(ascii: "%"),
                  let high = hexValue(bytes[position + 1]), let low = hexValue(bytes[position + 2])
            else { return nil }
            return high << 4 | low
        }

        while index < bytes.count {
            guard bytes[index] == UInt8(ascii: "%") else {
                index += 1
                continue
            }
            flushLiteral(upTo: index)
            if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") || bytes[index + 1] == UInt8(ascii: "U") {
                guard index + 5 < bytes.count, let unit = hexUnit(bytes[(index + 2)...(index + 5)]) else { return nil }
                units.append(unit)
                index += 6
                literalStart = index
                continue
            }
            guard let lead = hexByte(at: index) else { return nil }
            let length: Int
            var value: UInt32
            switch lead {
            case 0x00...0x7F: length = 1; value = UInt32(lead)
            case 0xC2...0xDF: length = 2; value = UInt32(lead & 0x1F)
            case 0xE0...0xEF: length = 3; value = UInt32(lead & 0x0F)
            case 0xF0...0xF4: length = 4; value = UInt32(lead & 0x07)
            default: return nil
            }
            for continuation in 1..<length {
                let position = index + 3 * continuation
                guard let byte = hexByte(at: position), byte & 0xC0 == 0x80 else { return nil }
                value = value << 6 | UInt32(byte & 0x3F)
            }
            // Reject overlong forms, which would let an escape smuggle a different character.
            let minimum: UInt32 = [0, 0, 0x80, 0x800, 0x10000][length]
            guard value >= minimum, value <= 0x10FFFF else { return nil }
            if value >= 0x10000 {
                let offset = value - 0x10000
                units.append(UInt16(0xD800 + (offset >> 10)))
                units.append(UInt16(0xDC00 + (offset & 0x3FF)))
            } else {
                units.append(UInt16(value))
            }
            index += 3 * length
            literalStart = index
        }
        flushLiteral(upTo: bytes.count)
        return units
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func hexUnit(_ digits: Slice<UnsafeBufferPointer<UInt8>>) -> UInt16? {
        var value: UInt16 = 0
        for digit in digits {
            guard let nibble = hexValue(digit) else { return nil }
            value = value << 4 | UInt16(nibble)
        }
        return value
    }
}
