import ArgumentParser
import Foundation

/// `bucketfs sync`: wait until the server has every change made so far (for scripts and backup
/// jobs that must run on data the server has).
struct Sync: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait until the server has acknowledged every change of a mount.",
        discussion: """
            Waits until no save of the mount is waiting for the server and the mount is in sync \
            with it (connected, caught up since it connected, every note the server turned out \
            to have lost sent again), or until the timeout. Exit status 0: everything is on the \
            server. 1: something is not, and it is listed with the reason (still pending and the \
            connection's state; not in sync yet; invalid JSON; refused by the server; a name that \
            keeps a file local). Nothing is lost either way: what is pending stays in the mount's \
            store and is sent when the server is reachable. A mount that is not running is \
            judged by its store alone.
            """
    )

    @Argument(help: "A mount point (default: every running mount bucketfs knows of).")
    var mountpoint: String?

    @Option(help: "Seconds to wait for acknowledgements.")
    var timeout: Double = 30

    func validate() throws {
        guard timeout >= 0 else { throw ValidationError("--timeout must be 0 or more seconds") }
    }

    func run() async throws {
        let records = try MountRecord.records(for: mountpoint).filter { mountpoint != nil || $0.isRunning }
        let deadline = Date(timeIntervalSinceNow: timeout)
        var reports = records.map(MountReport.init(record:))
        var inSync = reports.map(Self.inSync)
        // Only a running mount can still get an acknowledgement, or get in sync.
        while zip(reports, inSync).contains(where: { $0.running && ($0.pendingSaves > 0 || !$1) }), Date() < deadline {
            try await Task.sleep(for: .milliseconds(100))
            reports = records.map { MountReport(record: MountRecord.load(path: MountRecord.path(for: $0.mountpoint)) ?? $0) }
            inSync = reports.map(Self.inSync)
        }
        var problems: [String] = []
        for (report, inSync) in zip(reports, inSync) {
            if let error = report.storeError { problems.append("\(report.mountpoint): cannot read the store: \(error)") }
            if report.pendingSaves > 0 {
                let why = report.running ? "the server has not acknowledged it (connection: \(report.connection.state))" : "not mounted"
                for file in report.pendingFiles { problems.append("\(report.mountpoint)/\(file)  pending: \(why)") }
                if report.pendingFiles.isEmpty { problems.append("\(report.mountpoint): \(report.pendingSaves) changes pending: \(why)") }
            } else if report.running && !inSync {
                problems.append(
                    "\(report.mountpoint): not in sync with the server yet (connection: \(report.connection.state)): "
                        + "it has not caught up since it connected, or is sending again what the server lost")
            }
            for item in report.attention where item.state != "conflict" {
                problems.append("\(report.mountpoint)/\(item.file)  \(item.state): \(item.reason ?? item.advice)")
            }
        }
        guard problems.isEmpty else {
            print("bucketfs sync: not everything is on the server:")
            for line in problems { print("  " + line) }
            throw ExitCode(1)
        }
        print("bucketfs sync: everything is on the server" + (records.isEmpty ? " (no running mounts)" : ""))
    }

    /// Whether a running mount says it is in sync with the server (caught up since it
    /// connected, nothing owed). A mount without a control socket (a protocol that keeps no
    /// versions, or a version before it answered this) is judged by its store alone.
    static func inSync(_ report: MountReport) -> Bool {
        guard report.running, FileManager.default.fileExists(atPath: ControlSocket.path(for: report.mountpoint)) else { return true }
        do {
            return try ControlSocket.send(ControlRequest(operation: .inSync), mountpoint: report.mountpoint, timeout: 5).inSync ?? true
        } catch ControlSocketError.notRunning {
            return true
        } catch {
            return false
        }
    }
}
