import ArgumentParser

/// `bucketfs version` (and `bucketfs --version`): the version and the commit this binary was
/// built from. Both come from `BuildInfo`, which scripts/build-info writes before each build
/// from the file VERSION and `git rev-parse` (the BuildInfo plugin, Plugins/BuildInfo).
struct Version: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the version and the git commit bucketfs was built from.",
        discussion: "The same line as `bucketfs --version`; `status --json`, the mount's log and `serve`'s startup line say it too."
    )

    /// `bucketfs 0.9.0 (commit 839ed00)`.
    static var text: String { "bucketfs \(BuildInfo.version) (commit \(BuildInfo.commit))" }

    func run() {
        print(Self.text)
    }
}
