import BenchmarkSupport
import JSONDiff

/// Simplenote-style notes of about 1 KB (compact JSON), the same for a given index on every run.
enum Documents {
    private static let words = [
        "sync", "bucket", "ghost", "version", "change", "server", "client", "offline", "merge", "index",
        "note", "draft", "review", "meeting", "travel", "budget", "garden", "recipe", "coffee", "weekend",
    ]

    static func key(_ index: Int) -> String {
        let digits = String(index)
        return "note-" + String(repeating: "0", count: max(0, 6 - digits.count)) + digits
    }

    static func object(_ index: Int) -> JSONObject {
        var state = UInt64(truncatingIfNeeded: index) &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        var body = ""
        body.reserveCapacity(900)
        while body.utf8.count < 860 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            body += words[Int((state >> 33) % UInt64(words.count))]
            body += (state >> 20) % 11 == 0 ? ".\n" : " "
        }
        return [
            "content": .string(body),
            "tags": .array([.string(words[index % words.count]), .string("bench")]),
            "deleted": .bool(false),
            "creationDate": .double(1_700_000_000.5 + Double(index)),
            "modificationDate": .double(1_700_000_100.25 + Double(index)),
            "shareURL": .string(""),
            "systemTags": .array([]),
        ]
    }

    /// The object as a creating jsondiff (`{"field": {"o": "+", "v": value}}`).
    static func creatingDiff(_ object: JSONObject) -> JSONObject {
        object.mapValues { value in .object(["o": .string("+"), "v": value]) }
    }
}
