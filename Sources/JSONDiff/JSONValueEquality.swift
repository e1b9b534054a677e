/// Equality is exact: string values compare by their Unicode scalars, not by Swift's canonical
/// equivalence, so that an edit that only changes normalization ("é" precomposed vs "e" +
/// combining accent) is a real change and gets diffed and synced. Object keys are `JSONKey`s,
/// exact in the same way: keys differing only by normalization are two keys.
extension JSONValue {
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.integer(let a), .integer(let b)): return a == b
        case (.bigInteger(let a), .bigInteger(let b)): return exactlyEqual(a, b)
        case (.double(let a), .double(let b)): return a == b
        case (.string(let a), .string(let b)): return exactlyEqual(a, b)
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { $0 == $1 }
        case (.object(let a), .object(let b)):
            guard a.count == b.count else { return false }
            for (key, value) in a {
                guard let otherValue = b[key], value == otherValue else { return false }
            }
            return true
        default: return false
        }
    }

    /// Consistent with `==`: exactly equal values are also canonically equal, which is what
    /// String's own hash respects (JSONKey hashes its exact bytes).
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(1); hasher.combine(value)
        case .integer(let value): hasher.combine(2); hasher.combine(value)
        case .bigInteger(let value): hasher.combine(3); hasher.combine(value)
        case .double(let value): hasher.combine(4); hasher.combine(value)
        case .string(let value): hasher.combine(5); hasher.combine(value)
        case .array(let value): hasher.combine(6); hasher.combine(value)
        case .object(let value): hasher.combine(7); hasher.combine(value)
        }
    }
}

/// Byte equality of the UTF-8 forms, a word at a time (`utf8.elementsEqual` walks the view one
/// index at a time, which dominated diffing large documents). Not `==`, which compares strings
/// by canonical equivalence ("é" precomposed equals "e" + U+0301) and normalizes to do it.
public func exactlyEqual(_ a: String, _ b: String) -> Bool {
    guard a.utf8.count == b.utf8.count else { return false }
    var a = a
    var b = b
    return a.withUTF8 { left in
        b.withUTF8 { right in
            guard let leftBase = left.baseAddress, let rightBase = right.baseAddress else { return true }
            if leftBase == rightBase { return true }  // the same storage
            let count = left.count
            var index = 0
            while index + 8 <= count {
                let leftWord = UnsafeRawPointer(leftBase + index).loadUnaligned(as: UInt64.self)
                let rightWord = UnsafeRawPointer(rightBase + index).loadUnaligned(as: UInt64.self)
                if leftWord != rightWord { return false }
                index += 8
            }
            while index < count {
                if left[index] != right[index] { return false }
                index += 1
            }
            return true
        }
    }
}
