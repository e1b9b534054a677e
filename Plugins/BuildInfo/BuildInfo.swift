import Foundation
import PackagePlugin

/// Bakes the version (the file VERSION, the one place it is written) and the git commit into
/// the `bucketfs` target: scripts/build-info writes `BuildInfo.swift` before every build, and
/// rewrites it only when its text changes, so an unchanged commit recompiles nothing. Outside a
/// git checkout (a tarball, git missing) the commit is `unknown` and the build still succeeds.
@main
struct BuildInfo: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let output = context.pluginWorkDirectoryURL.appending(path: "BuildInfo")
        let package = context.package.directoryURL
        return [
            .prebuildCommand(
                displayName: "Writing bucketfs's version and commit",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [package.appending(path: "scripts/build-info").path, package.path, output.path],
                outputFilesDirectory: output
            )
        ]
    }
}
