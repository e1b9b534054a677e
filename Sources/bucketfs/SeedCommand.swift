import ArgumentParser
import Foundation
import JSONDiff
import SyncServer

/// `bucketfs seed` (hidden): fill a user's bucket on a server's data directory with generated
/// notes, many to a transaction, for benchmarks at scale (`scripts/bench scale`). The notes are
/// stored as if a client had created them (versions, history, change log), so a mount's first
/// sync loads them as any other.
struct Seed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Fill a bucket of a local sync server with generated notes (for benchmarks).",
        discussion: """
            Run it on a --data directory no server is serving. Note i has the content \
            "Note i." followed by words, in Simplenote's shape, about --size bytes of compact JSON; \
            its key is 32 hex digits made from i. The same --count gives the same notes on every run.
            """,
        shouldDisplay: false
    )

    @Option(help: "The server's data directory.")
    var data: String

    @Option(help: "The bucket to fill.")
    var bucket = "notes"

    @Option(help: "How many notes to create.")
    var count: Int

    @Option(help: "About how many bytes of compact JSON each note takes.")
    var size = 500

    @Argument(help: "The user owning the bucket (bucketfs user add).")
    var username: String

    func validate() throws {
        guard count >= 0 else { throw ValidationError("--count must not be negative") }
        guard (150...1_000_000).contains(size) else { throw ValidationError("--size must be between 150 and 1000000") }
    }

    func run() async throws {
        let store = try ServerStore(directory: data)
        let start = ContinuousClock.now
        let size = self.size
        let count = self.count
        let cv = try await store.importEntities(
            username: username, bucket: bucket, count: count,
            entity: { index in (GeneratedNotes.key(index), GeneratedNotes.note(index, size: size)) },
            progress: { done in
                FileHandle.standardError.write(Data("bucketfs seed: \(done) of \(count) notes\n".utf8))
            })
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("seeded \(count) notes in \(bucket) for \(username) in \(String(format: "%.1f", seconds)) s (cv \(cv))")
    }
}

/// The notes `bucketfs seed` makes: the same for a given number on every run.
enum GeneratedNotes {
    private static let words = [
        "sync", "bucket", "ghost", "version", "change", "server", "client", "offline", "merge", "index",
        "note", "draft", "review", "meeting", "travel", "budget", "garden", "recipe", "coffee", "weekend",
    ]

    /// splitmix64: a bijection on 64 bits, so distinct numbers give distinct keys.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    private static func hex16(_ value: UInt64) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: 16 - text.count) + text
    }

    /// 32 hex digits, as Simplenote's keys look, in no particular order.
    static func key(_ index: Int) -> String {
        let first = mix(UInt64(index))
        return hex16(first) + hex16(mix(first))
    }

    static func note(_ index: Int, size: Int) -> JSONObject {
        // The fields besides the content take ~130 bytes of compact JSON.
        let target = max(20, size - 130)
        var state = mix(UInt64(index) ^ 0x5EED)
        var content = "Note \(index).\n\n"
        content.reserveCapacity(target + 10)
        while content.utf8.count < target {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            content += words[Int((state >> 33) % UInt64(words.count))]
            content += (state >> 20) % 11 == 0 ? ".\n" : " "
        }
        let created = 1_700_000_000.5 + Double(index)
        return SampleNotes.note(content, tags: [words[index % words.count]], created: created, modified: created + 100.25)
    }
}
