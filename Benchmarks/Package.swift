// swift-tools-version:6.2
import Foundation
import PackageDescription

// A path dependency is identified by its folder's name, which is whatever the checkout is called.
let bucketfs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

// Benchmarks live in their own package so that building and testing bucketfs does not build
// package-benchmark. Run them with `scripts/bench`.
let package = Package(
    name: "bucketfs-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/ordo-one/package-benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
        // The server benchmark's WebSocket clients (same versions bucketfs itself resolves).
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        // The sync benchmark's bare-SQLite baseline.
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
    ],
    targets: [
        // What the server and sync benchmarks share: a server on a temp dir and a raw WebSocket client.
        .target(
            name: "BenchmarkSupport",
            dependencies: [
                .product(name: "SyncServer", package: bucketfs),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "BenchmarkSupport"
        ),
        .executableTarget(
            name: "JSONDiffBenchmarks",
            dependencies: [
                .product(name: "JSONDiff", package: bucketfs),
                .product(name: "Benchmark", package: "package-benchmark"),
            ],
            path: "JSONDiffBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        .executableTarget(
            name: "ServerBenchmarks",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "SyncServer", package: bucketfs),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Benchmark", package: "package-benchmark"),
            ],
            path: "ServerBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        .executableTarget(
            name: "SyncBenchmarks",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "SyncClient", package: bucketfs),
                .product(name: "SyncStore", package: bucketfs),
                .product(name: "SyncServer", package: bucketfs),
                .product(name: "JSONDiff", package: bucketfs),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Benchmark", package: "package-benchmark"),
            ],
            path: "SyncBenchmarks",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "package-benchmark")]
        ),
        // A plain timing loop (scripts/bench-apptimist runs it and reads its JSON): the crypto one
        // Apptimist PDU costs, beside the same frame unsealed.
        .executableTarget(
            name: "ApptimistCryptoTiming",
            dependencies: [
                .product(name: "ApptimistCrypto", package: bucketfs),
                .product(name: "ApptimistProtocol", package: bucketfs),
            ],
            path: "ApptimistCryptoTiming"
        ),
    ],
    swiftLanguageModes: [.v6]
)
