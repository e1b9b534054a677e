// swift-tools-version:6.2
import PackageDescription

// Module plan: ../shared/DESIGN.md ("Layout"). Dependencies point one way:
// DiffMatchPatch <- JSONDiff <- SyncProtocol <- SyncStore/SyncServer <- SyncClient <- BucketFS <- bucketfs.
let package = Package(
    name: "bucketfs",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "bucketfs", targets: ["bucketfs"]),
        .library(name: "DiffMatchPatch", targets: ["DiffMatchPatch"]),
        .library(name: "JSONDiff", targets: ["JSONDiff"]),
        .library(name: "SyncProtocol", targets: ["SyncProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
    ],
    targets: [
        .target(name: "DiffMatchPatch"),
        .target(name: "JSONDiff", dependencies: ["DiffMatchPatch"]),
        .target(name: "SyncProtocol", dependencies: ["JSONDiff"]),
        .executableTarget(
            name: "bucketfs",
            dependencies: [
                "JSONDiff",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["ServeCommand.swift", "UserCommand.swift"]
        ),
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
    ],
    swiftLanguageModes: [.v6]
)
