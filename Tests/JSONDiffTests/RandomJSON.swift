import JSONDiff
import PropertyBased

/// Adapts the property checker's seeded generator for the standard library's `random(using:)`.
struct SeededRNG: RandomNumberGenerator {
    var base: any SeededRandomNumberGenerator
    mutating func next() -> UInt64 { base.next() }
}

/// Random JSON documents and random edits of them, biased to a few shared key names so that
/// concurrent edits collide often.
struct RandomJSON {
    var rng: SeededRNG

    /// The last two are one text in two Unicode forms: distinct keys (issue 13).
    static let keys: [JSONKey] = ["a", "b", "c", "n", "l", "m", "t", "caf\u{E9}", "cafe\u{301}"]
    static let fragments = ["a", "b", " ", "é", "😀", "中", "\n", "\"", "%", "\u{1}", "word", "👨‍👩‍👧", "\t"]

    /// List policy for "l", list_dmp for "m", integer for "n" (where those happen to hold lists/numbers).
    static let policy = try? DiffPolicy(json: [
        "l": ["otype": "list", "item": ["attributes": ["n": ["otype": "integer"]]]],
        "m": ["otype": "list_dmp"],
        "n": ["otype": "integer"],
    ])

    mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &rng) }
    mutating func chance(_ percent: Int) -> Bool { int(1...100) <= percent }

    mutating func string() -> String {
        (0..<int(0...6)).map { _ in Self.fragments[int(0...Self.fragments.count - 1)] }.joined()
    }

    mutating func number() -> JSONValue {
        switch int(0...5) {
        case 0: return .integer(Int64(int(-3...3)))
        case 1: return .integer(Int64.random(in: .min ... .max, using: &rng))
        case 2: return .bigInteger(int(0...1) == 0 ? "18446744073709551617" : "-99999999999999999999999")
        case 3: return .integer(9_007_199_254_740_993)
        case 4:
            let double = Double(bitPattern: UInt64.random(in: .min ... .max, using: &rng))
            return .double(double.isFinite ? double : 0.5)
        default: return .double(Double(int(-1000...1000)) / 8)
        }
    }

    mutating func value(depth: Int) -> JSONValue {
        switch int(0...(depth > 0 ? 7 : 4)) {
        case 0: return .null
        case 1: return .bool(chance(50))
        case 2: return number()
        case 3, 4: return .string(string())
        case 5: return .array((0..<int(0...4)).map { _ in value(depth: depth - 1) })
        default: return .object(object(depth: depth - 1))
        }
    }

    mutating func object(depth: Int) -> JSONObject {
        var object = JSONObject()
        for _ in 0..<int(0...5) {
            object[Self.keys[int(0...Self.keys.count - 1)]] = value(depth: depth)
        }
        return object
    }

    /// A random edit: most values kept, some changed in kind-preserving ways, some replaced.
    mutating func edit(_ value: JSONValue, depth: Int) -> JSONValue {
        guard chance(60) else { return value }
        switch value {
        case .string(let text):
            var characters = Array(text)
            for _ in 0..<int(1...3) {
                if !characters.isEmpty, chance(50) {
                    characters.remove(at: int(0...characters.count - 1))
                } else {
                    characters.insert(contentsOf: Array(string()), at: int(0...characters.count))
                }
            }
            return .string(String(characters))
        case .integer(let number) where chance(70):
            return .integer(number &+ Int64(int(-5...5)))
        case .array(var items):
            for _ in 0..<int(1...3) {
                switch int(0...2) {
                case 0 where !items.isEmpty: items.remove(at: int(0...items.count - 1))
                case 1 where !items.isEmpty:
                    let index = int(0...items.count - 1)
                    items[index] = edit(items[index], depth: depth - 1)
                default: items.insert(self.value(depth: max(depth - 1, 0)), at: int(0...items.count))
                }
            }
            return .array(items)
        case .object(let members):
            return .object(edit(members, depth: depth - 1))
        default:
            return self.value(depth: max(depth, 0))
        }
    }

    mutating func edit(_ object: JSONObject, depth: Int) -> JSONObject {
        var result = JSONObject()
        for (key, value) in object where !chance(15) {
            result[key] = edit(value, depth: depth)
        }
        if chance(40) { result[Self.keys[int(0...Self.keys.count - 1)]] = self.value(depth: max(depth, 0)) }
        return result
    }

    /// A document with the keys the policy names holding values of the kinds it expects.
    mutating func document() -> JSONObject {
        var document = object(depth: 3)
        if chance(70) { document["l"] = .array((0..<int(0...5)).map { _ in chance(50) ? .object(["n": .integer(Int64(int(0...9)))]) : value(depth: 1) }) }
        if chance(70) { document["m"] = .array((0..<int(0...5)).map { _ in value(depth: 1) }) }
        if chance(70) { document["n"] = .integer(Int64(int(-100...100))) }
        return document
    }
}

extension Gen where Value == RandomJSON {
    /// A seeded source of random JSON (the checker reports the seed of a failing run).
    static var json: Generator<RandomJSON, Shrink.None<RandomJSON>> {
        Generator(run: { rng in RandomJSON(rng: SeededRNG(base: rng)) })
    }
}
