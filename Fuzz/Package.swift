// swift-tools-version:6.2
import Foundation
import PackageDescription

// Coverage-guided fuzz targets (libFuzzer) for the pure modules (issue 13, "Must show"). A package
// of its own so that the main build never compiles them; `scripts/fuzz` builds it with
// `-sanitize=fuzzer,address` for every module (so JSONDiff and SyncProtocol are instrumented
// too). Each target's main hands its test function to libFuzzer (FuzzDriver).

// A path dependency is named by its directory; the checkout's directory name varies.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent

func fuzzTarget(_ name: String, _ products: [String]) -> Target {
    .executableTarget(name: name, dependencies: ["FuzzDriver"] + products.map { .product(name: $0, package: root) })
}

let package = Package(
    name: "bucketfs-fuzz",
    platforms: [.macOS(.v14)],
    dependencies: [.package(path: "..")],
    targets: [
        .target(name: "FuzzDriver"),
        fuzzTarget("FuzzJSONParser", ["JSONDiff"]),
        fuzzTarget("FuzzJSONDiffApply", ["JSONDiff"]),
        fuzzTarget("FuzzFrame", ["SyncProtocol", "JSONDiff"]),
        fuzzTarget("FuzzChange", ["SyncProtocol", "JSONDiff"]),
        fuzzTarget("FuzzTelepat", ["TelepatProtocol", "JSONDiff"]),
        fuzzTarget("FuzzApptimist", ["ApptimistProtocol"]),
    ],
    swiftLanguageModes: [.v6]
)
