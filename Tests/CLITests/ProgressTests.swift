import ChildProcesses
import Foundation
import Testing

/// First sync shows progress on a terminal and stays quiet otherwise (issue 6).
@Suite("first-sync progress", .serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct ProgressTests {
    /// Seeds the demo server (first mount adds the sample notes), so a new store has a first sync to do.
    private func seededDemo(_ cli: CLIHarness) throws {
        let seed = try cli.directory("seed")
        #expect(try cli.bucketfs(["mount", seed]).status == 0)
        try eventually { (try cli.bucketfs(["status", seed, "--json"]).stdout).contains("\"pendingSaves\" : 0") }
        #expect(try cli.bucketfs(["unmount", seed]).status == 0)
    }

    private func unmount(_ cli: CLIHarness, _ mountpoint: String, _ process: ChildProcess) throws {
        #expect(try cli.run(["/usr/bin/env", "fusermount3", "-u", mountpoint], timeout: 30).status == 0)
        try eventually { !process.isRunning }
    }

    @Test func aTerminalShowsAProgressLine() throws {
        let cli = try CLIHarness()
        try seededDemo(cli)
        let mountpoint = try cli.directory("tty")
        // script(1) gives the mount a pseudo-terminal, as a person's shell would.
        let command = "\(CLIHarness.binary) mount \(mountpoint) --foreground"
        let (process, output) = try cli.startProcess(["/usr/bin/script", "-qfec", command, "/dev/null"])
        try eventually { isMounted(mountpoint) }
        try eventually { text(of: output).contains("notes: 3 entities in sync") }
        let printed = text(of: output)
        #expect(printed.contains("\r\u{1B}[K"), "the progress line is redrawn in place")
        try unmount(cli, mountpoint, process)
    }

    @Test func noTerminalMeansNoProgressLine() throws {
        let cli = try CLIHarness()
        try seededDemo(cli)
        let mountpoint = try cli.directory("pipe")
        let (process, output) = try cli.start(["mount", mountpoint, "--foreground"])
        try eventually { isMounted(mountpoint) }
        try eventually { text(of: output).contains("notes: in sync (3 entities)") }
        let printed = text(of: output)
        #expect(!printed.contains("\u{1B}[K"))
        #expect(!printed.contains("entities in sync"))
        try unmount(cli, mountpoint, process)
    }
}
