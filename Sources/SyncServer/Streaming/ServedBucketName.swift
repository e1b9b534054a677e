import SyncProtocol

/// Bucket names this server serves: the protocol's (`BucketName`), less the ones a client
/// cannot hold, since clients keep each bucket as a directory named after it (issue 20):
/// - `.` and `..` name a directory's self and parent on every system;
/// - Windows device names (`CON`, `PRN`, `AUX`, `NUL`, `COM1`-`COM9`, `LPT1`-`LPT9`), in any
///   case and with any extension (`con.txt` is the console too), cannot be created on Windows;
///   a bucket a client on Windows could never sync is refused for everyone.
enum ServedBucketName {
    static let windowsDeviceNames: Set<String> = Set(
        ["CON", "PRN", "AUX", "NUL"] + (1...9).flatMap { ["COM\($0)", "LPT\($0)"] }
    )

    static func isServed(_ name: String) -> Bool {
        guard BucketName.isValid(name), name != ".", name != ".." else { return false }
        let stem = name.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        return !windowsDeviceNames.contains(stem.uppercased())
    }
}
