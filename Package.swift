// swift-tools-version:6.2
import PackageDescription

// Module plan: ../shared/DESIGN.md ("Layout"). Dependencies point one way:
// DiffMatchPatch <- JSONDiff <- SyncProtocol <- SyncStore / SyncServer <- SyncEngine <- SyncClient <- BucketFS <- bucketfs.
let package = Package(
    name: "bucketfs",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "bucketfs", targets: ["bucketfs"]),
        .library(name: "DiffMatchPatch", targets: ["DiffMatchPatch"]),
        .library(name: "JSONDiff", targets: ["JSONDiff"]),
        .library(name: "SyncProtocol", targets: ["SyncProtocol"]),
        .library(name: "TelepatProtocol", targets: ["TelepatProtocol"]),
        .library(name: "ApptimistProtocol", targets: ["ApptimistProtocol"]),
        .library(name: "ApptimistCrypto", targets: ["ApptimistCrypto"]),
        .library(name: "SyncServer", targets: ["SyncServer"]),
        .library(name: "SyncStore", targets: ["SyncStore"]),
        .library(name: "SyncEngine", targets: ["SyncEngine"]),
        .library(name: "SyncClient", targets: ["SyncClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        .target(name: "DiffMatchPatch"),
        // Child processes without Foundation's Process (ChildProcess.swift says why); CSpawn is
        // the posix_spawn call with the glibc extensions Swift's Glibc module does not show.
        .target(name: "CSpawn"),
        // A file's birth time (statx, another glibc extension the Glibc module does not show):
        // how the server tells its SQLite file from a restored copy (ServerHistory).
        .target(name: "CStatx"),
        .target(name: "ChildProcesses", dependencies: ["CSpawn"]),
        .target(name: "JSONDiff", dependencies: ["DiffMatchPatch"]),
        .target(name: "SyncProtocol", dependencies: ["JSONDiff"]),
        .target(name: "TelepatProtocol", dependencies: ["JSONDiff"]),
        // GRDB statements run with their values bound straight to SQLite: the stores' hot paths.
        .target(
            name: "SQLiteStatements",
            dependencies: [.product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift")]
        ),
        .target(
            name: "SyncStore",
            dependencies: [
                "JSONDiff", "SQLiteStatements", .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, for incremental blob I/O (`IncrementalBlob`).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        .target(
            name: "SyncServer",
            dependencies: [
                "JSONDiff", "SyncProtocol", "TelepatProtocol", "ApptimistProtocol", "ApptimistCrypto", "CStatx", "SQLiteStatements",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // `/metrics` (`--metrics-port`): a registry of the server's own, in Prometheus text.
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // The seam every sync engine implements for the mount (one engine per protocol).
        .target(name: "SyncEngine", dependencies: ["SyncStore", "JSONDiff"]),
        .target(
            name: "SyncClient",
            dependencies: [
                "JSONDiff", "SyncProtocol", "SyncStore", "SyncEngine",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The Telepat engine (behind the SyncEngine seam, as SyncClient is for Simperium).
        .target(
            name: "TelepatClient",
            dependencies: [
                "JSONDiff", "TelepatProtocol", "SyncStore", "SyncEngine",
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .systemLibrary(name: "CFuse", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        // Apptimist (issue 18): libsodium's crypto_box and Ed25519, and the PDUs (pure, no I/O).
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .target(name: "ApptimistCrypto", dependencies: ["CSodium", "ApptimistProtocol"]),
        .target(name: "ApptimistProtocol"),
        // The Apptimist engine (behind the SyncEngine seam): a user's files and messages.
        .target(
            name: "ApptimistClient",
            dependencies: [
                "ApptimistCrypto", "ApptimistProtocol", "JSONDiff", "SyncStore", "SyncEngine",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "BucketFS",
            dependencies: ["CFuse", "JSONDiff", "SyncStore", "ChildProcesses", .product(name: "Logging", package: "swift-log")]
        ),
        .executableTarget(
            name: "bucketfs",
            dependencies: [
                "JSONDiff", "SyncProtocol", "SyncServer", "SyncStore", "SyncEngine", "SyncClient", "TelepatClient", "BucketFS",
                "DiffMatchPatch", "ApptimistCrypto", "ApptimistProtocol", "ApptimistClient", "ChildProcesses",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // `bucketfs --version`: the version (file VERSION) and the commit, written before each build.
            plugins: ["BuildInfo"]
        ),
        .plugin(name: "BuildInfo", capability: .buildTool()),
        .testTarget(
            name: "DiffMatchPatchTests",
            dependencies: ["DiffMatchPatch", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        .testTarget(
            name: "JSONDiffTests",
            dependencies: ["JSONDiff", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        .testTarget(
            name: "SyncProtocolTests",
            dependencies: ["SyncProtocol", "JSONDiff", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        // A PostgreSQL cluster of the test process's own, for every suite that needs one.
        .target(
            name: "PostgresTestSupport",
            dependencies: [
                "SyncServer", "ChildProcesses",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/PostgresTestSupport"
        ),
        .testTarget(
            name: "SyncServerTests",
            dependencies: [
                "SyncServer", "SyncProtocol", "JSONDiff", "PostgresTestSupport", "TelepatProtocol", "ApptimistProtocol", "ApptimistCrypto",
                "ChildProcesses",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(name: "ChildProcessesTests", dependencies: ["ChildProcesses"]),
        .testTarget(name: "TelepatProtocolTests", dependencies: ["TelepatProtocol", "JSONDiff"]),
        .testTarget(name: "ApptimistCryptoTests", dependencies: ["ApptimistCrypto", "ApptimistProtocol", "ChildProcesses"]),
        .testTarget(name: "ApptimistProtocolTests", dependencies: ["ApptimistProtocol"]),
        .testTarget(
            name: "ApptimistClientTests",
            dependencies: ["ApptimistClient", "ApptimistCrypto", "ApptimistProtocol", "SyncStore", "SyncEngine", "JSONDiff"]
        ),
        .testTarget(
            name: "SyncStoreTests",
            dependencies: ["SyncStore", "SQLiteStatements", "JSONDiff", "ChildProcesses", .product(name: "GRDBSQLite", package: "GRDB.swift")]
        ),
        .testTarget(
            name: "SyncClientTests",
            dependencies: [
                "SyncClient", "SyncEngine", "SyncStore", "SyncServer", "SyncProtocol", "JSONDiff", "PostgresTestSupport",
                "ApptimistClient", "ApptimistCrypto", "ApptimistProtocol", "ChildProcesses",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "TelepatClientTests", dependencies: ["TelepatClient", "TelepatProtocol", "SyncStore", "JSONDiff"]),
        .testTarget(name: "BucketFSTests", dependencies: ["BucketFS", "SyncStore", "JSONDiff", "ChildProcesses"]),
        // Drives the real `bucketfs` binary; depending on it makes `swift build --build-tests` build it.
        .testTarget(name: "CLITests", dependencies: ["bucketfs", "SyncStore", "ChildProcesses"]),
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["bucketfs", "PostgresTestSupport", "ChildProcesses", .product(name: "PropertyBased", package: "swift-property-based")]),
    ],
    swiftLanguageModes: [.v6]
)
