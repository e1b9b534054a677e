import Foundation
import Testing

/// Where a mount's threads run once in sync: its sync work off one CPU, which the threads that
/// answer file-system requests keep (`CPUPlacement`), unless `--sync-on-every-cpu`.
@Suite(.serialized, .timeLimit(.minutes(Patience.testMinutes)))
struct CPUPlacementTests {
    /// The kernel's names of the threads that answer requests (libfuse's workers carry the name
    /// of the thread that starts them; the work queues' workers add a number).
    static let requestThreads = ["bucketfs-sessio", "bucketfs-read", "bucketfs-write", "bucketfs-stream"]

    @Test func syncWorkKeepsOffOneCPUOnceInSync() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let (server, mount, everyCPU, requestCPU) = try Self.mounted(in: sandbox)
        if everyCPU.count < 2 {
            // Nothing to keep apart: every thread keeps the one CPU, and the log says nothing.
            #expect(eventually { mount.process.log.contains("in sync") })
            #expect(try Self.placement(of: mount.process.pid).allSatisfy { $0.cpus == everyCPU })
            #expect(!mount.process.log.contains("keeps off CPU"))
            return
        }
        #expect(eventually { mount.process.log.contains("sync work keeps off CPU \(requestCPU)") }, "\(mount.process.logTail)")
        let threads = try Self.placement(of: mount.process.pid)
        let answering = threads.filter { thread in Self.requestThreads.contains { thread.name.hasPrefix($0) } }
        // The FUSE loop's threads and the three work queues' (4 + 1 + 2) at least.
        #expect(answering.count >= 8, "\(threads)")
        for thread in threads {
            let expected = answering.contains { $0.id == thread.id } ? everyCPU : everyCPU.subtracting([requestCPU])
            #expect(thread.cpus == expected, "\(thread.name) (\(thread.id)) may run on \(thread.cpus.sorted())")
        }
        // The mount goes on answering and syncing from where its threads now run.
        let text = TwoMountTests.pretty(["v": "2"])
        try Files.write(mount.path("notes/after.json"), text)
        let other = try MountProcess(sandbox, at: "o", server: server)
        #expect(try Files.waitFor(other.path("notes/after.json"), toHold: text) == text, "\(mount.process.logTail)\n\(other.process.logTail)")
    }

    /// Dispatch ends a worker idle for a few seconds and starts the next one from the thread that
    /// queues work: after a pause, the thread answering the next save starts the one that takes
    /// it to the store, which then places every thread again.
    @Test func aSyncThreadStartedByARequestIsPlacedAgain() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let (_, mount, everyCPU, requestCPU) = try Self.mounted(in: sandbox)
        try #require(everyCPU.count >= 2, "one CPU: nothing is placed (syncWorkKeepsOffOneCPUOnceInSync covers it)")
        #expect(eventually { mount.process.log.contains("sync work keeps off CPU \(requestCPU)") })
        for round in 0..<2 {
            try Files.write(mount.path("notes/before\(round).json"), TwoMountTests.pretty(["v": "\(round)"]))
            // Longer than dispatch keeps an idle worker (5 s).
            Thread.sleep(forTimeInterval: 7)
            // A burst of saves: the worker started for it lives as long as the burst (a stray one
            // would run on every CPU throughout); look while it goes on.
            let start = Date()
            var strays: [(id: String, name: String, cpus: Set<Int>)]?
            var index = 0
            while Date().timeIntervalSince(start) < 3 {
                try Files.write(mount.path("notes/burst\(round)-\(index).json"), TwoMountTests.pretty(["v": "\(index)"]))
                index += 1
                if strays == nil, Date().timeIntervalSince(start) > 2 {
                    strays = try Self.placement(of: mount.process.pid).filter { thread in
                        !Self.requestThreads.contains { thread.name.hasPrefix($0) } && thread.cpus.contains(requestCPU)
                    }
                }
            }
            #expect(strays?.isEmpty == true, "round \(round): \(strays ?? [])")
        }
    }

    @Test func syncOnEveryCPULeavesEveryThreadWhereItStarted() throws {
        let sandbox = try Sandbox()
        defer { sandbox.close() }
        let (_, mount, everyCPU, _) = try Self.mounted(in: sandbox, extra: ["--sync-on-every-cpu"])
        #expect(eventually { mount.process.log.contains("in sync") })
        try Files.write(mount.path("notes/x.json"), TwoMountTests.pretty(["v": "1"]))
        let threads = try Self.placement(of: mount.process.pid)
        #expect(threads.count > 8)
        #expect(threads.allSatisfy { $0.cpus == everyCPU }, "\(threads.filter { $0.cpus != everyCPU })")
        #expect(!mount.process.log.contains("keeps off CPU"))
    }

    /// A server and a mount of it (`extra`: more mount arguments), with the CPUs the test, and so
    /// the mount, may use and the first of them.
    static func mounted(in sandbox: Sandbox, extra: [String] = []) throws
        -> (server: ServerProcess, mount: MountProcess, everyCPU: Set<Int>, requestCPU: Int)
    {
        let server = try ServerProcess.start(in: sandbox)
        let mount = try MountProcess(sandbox, at: "m", server: server, extra: extra)
        let everyCPU = try allowedCPUs(of: "self")
        return (server, mount, everyCPU, try #require(everyCPU.min()))
    }

    /// Each thread of process `pid` with its kernel name and the CPUs it may run on.
    static func placement(of pid: Int32) throws -> [(id: String, name: String, cpus: Set<Int>)] {
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        return try tasks.compactMap { id in
            // A thread that ended between the listing and the reads has no place to check.
            guard let name = try? String(contentsOfFile: "/proc/\(pid)/task/\(id)/comm", encoding: .utf8) else { return nil }
            return (id, name.trimmingCharacters(in: .newlines), try allowedCPUs(of: "\(pid)/task/\(id)"))
        }
    }

    /// `Cpus_allowed_list` of /proc/`path`/status ("0-3,6"), as CPU numbers.
    static func allowedCPUs(of path: String) throws -> Set<Int> {
        let status = try String(contentsOfFile: "/proc/\(path)/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") })
        var cpus: Set<Int> = []
        for range in line.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces).split(separator: ",") {
            let bounds = range.split(separator: "-").compactMap { Int($0) }
            let (low, high) = try (#require(bounds.first), #require(bounds.last))
            cpus.formUnion(low...high)
        }
        return cpus
    }
}
