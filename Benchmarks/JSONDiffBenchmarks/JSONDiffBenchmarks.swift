import Benchmark
import DiffMatchPatch
import Foundation
import JSONDiff

// Throughput of the jsondiff engine on the document shapes bucketfs syncs (Simplenote-style
// notes), next to a baseline measured in the same run: a full-document round trip through
// Foundation's JSONSerialization, the least a sync engine without diffs would do per save.
// Issue 2 targets: >= 50,000 diff+apply per second on 1 KB notes; 1 MB documents under 20 ms.

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.throughput, .wallClock, .mallocCountTotal],
        maxDuration: .seconds(3),
        maxIterations: 100_000
    )

    for size in DocumentSize.allCases {
        let pair = DocumentPair(size: size)
        Benchmark("diff+apply \(size.label)") { benchmark in
            for _ in benchmark.scaledIterations {
                let diff = JSONDiffing.diff(from: pair.before, to: pair.after)
                blackHole(try JSONDiffing.apply(diff, to: pair.before))
            }
        }
        Benchmark("baseline: full round trip \(size.label) (JSONSerialization)") { benchmark in
            for _ in benchmark.scaledIterations {
                let object = try JSONSerialization.jsonObject(with: pair.afterBytes)
                blackHole(try JSONSerialization.data(withJSONObject: object))
            }
        }
    }

    let texts = TextPair(length: 100_000, editEvery: 5_000)
    Benchmark("dmp diff 100 KB texts, scattered edits") { benchmark in
        let dmp = DiffMatchPatch()
        for _ in benchmark.scaledIterations {
            var diffs = dmp.diffMain(texts.before, texts.after)
            dmp.diffCleanupSemantic(&diffs)
            blackHole(dmp.diffToDelta(diffs))
        }
    }
    let megabyte = DocumentPair(size: .oneMegabyte).afterBytes
    Benchmark("parse+render 1 MB document") { benchmark in
        let bytes = megabyte
        for _ in benchmark.scaledIterations {
            blackHole(try JSONValue(parsing: bytes).prettyRendered())
        }
    }
}

enum DocumentSize: CaseIterable {
    case oneKilobyte, tenKilobytes, oneMegabyte

    var label: String {
        switch self {
        case .oneKilobyte: "1 KB note"
        case .tenKilobytes: "10 KB note"
        case .oneMegabyte: "1 MB document"
        }
    }
}

/// A document and an edited copy: a few words changed, a timestamp bumped, a tag added.
struct DocumentPair: Sendable {
    let before: JSONObject
    let after: JSONObject
    let afterBytes: Data

    init(size: DocumentSize) {
        var random = SplitMix(seed: 42)
        switch size {
        case .oneKilobyte:
            (before, after) = Self.note(contentLength: 850, random: &random)
        case .tenKilobytes:
            (before, after) = Self.note(contentLength: 9_800, random: &random)
        case .oneMegabyte:
            // 1,000 notes of 1 KB under one object; ten of them edited.
            var before: JSONObject = [:]
            var after: JSONObject = [:]
            for index in 0..<1_000 {
                let (b, a) = Self.note(contentLength: 850, random: &random)
                before["note-\(index)"] = .object(b)
                after["note-\(index)"] = .object(index % 100 == 7 ? a : b)
            }
            (self.before, self.after) = (before, after)
        }
        afterBytes = Data(JSONValue.object(after).compactRendered().utf8)
    }

    private static func note(contentLength: Int, random: inout SplitMix) -> (JSONObject, JSONObject) {
        let content = Text.words(count: contentLength / 6, random: &random)
        var edited = Array(content.split(separator: " "))
        for _ in 0..<3 {
            edited[Int(random.next() % UInt64(edited.count))] = "edited"
        }
        let before: JSONObject = [
            "content": .string(content),
            "tags": .array([.string("work"), .string("ideas")]),
            "systemTags": .array([]),
            "creationDate": .double(1_763_800_000.25),
            "modificationDate": .double(1_763_800_000.25),
            "deleted": .bool(false),
        ]
        var after = before
        after["content"] = .string(edited.joined(separator: " "))
        after["modificationDate"] = .double(1_763_800_360.5)
        after["tags"] = .array([.string("work"), .string("ideas"), .string("later")])
        return (before, after)
    }
}

/// Two long texts differing by one word every `editEvery` characters.
struct TextPair: Sendable {
    let before: String
    let after: String

    init(length: Int, editEvery: Int) {
        var random = SplitMix(seed: 7)
        before = Text.words(count: length / 6, random: &random)
        var words = before.split(separator: " ").map(String.init)
        let stride = max(1, editEvery / 6)
        for index in Swift.stride(from: stride / 2, to: words.count, by: stride) {
            words[index] = "changed"
        }
        after = words.joined(separator: " ")
    }
}

enum Text {
    static let vocabulary = [
        "sync", "bucket", "entity", "note", "draft", "milk", "über", "naïve", "🙂", "version",
        "change", "file", "editor", "offline", "server", "json", "diff", "merge", "conflict", "tag",
    ]

    static func words(count: Int, random: inout SplitMix) -> String {
        (0..<count).map { _ in vocabulary[Int(random.next() % UInt64(vocabulary.count))] }
            .joined(separator: " ")
    }
}

/// A small deterministic generator so every run benchmarks the same documents.
struct SplitMix: Sendable {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
