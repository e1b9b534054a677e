import CFuse
import Foundation
import Synchronization

/// Which CPUs a mount's threads run on. An editor's save is a program and the thread answering
/// its requests waking each other eight times; when the mount's sync work (the store taking the
/// saves, the sync engine, a demo server) runs on every CPU, the kernel spreads the two across
/// the CPUs around it, and each wake-up crosses to another CPU, which in a VM is a costly one.
/// Kept off one CPU, that work leaves the two a CPU to share (measured on 2 cores: twice the
/// files created per second and more editor's saves, README; lower priorities for the sync
/// work, nice 19 or SCHED_IDLE, made no difference).
public enum CPUPlacement {
    /// The CPUs the process started with, before any were taken from its threads.
    private static let startingCPUs: cfuse_cpu_set? = {
        var cpus = cfuse_cpu_set()
        return cfuse_get_cpus(0, &cpus) == 0 ? cpus : nil
    }()

    /// The CPU left to requests once `keepSyncWorkOffOneCPU` has placed the threads.
    private static let placedRequestCPU = Atomic<Int>(-1)

    /// Keeps every thread of the process but those answering file-system requests off the first
    /// of the CPUs it started with; returns that CPU, or nil when it has only one (or the kernel
    /// refuses). Threads started later inherit their creator's CPUs: see `placeAgainIfStrayed`.
    @discardableResult
    public static func keepSyncWorkOffOneCPU() -> Int? {
        guard let everyCPU = startingCPUs, let requestCPU = CPUSet.first(in: everyCPU) else { return nil }
        var syncCPUs = everyCPU
        CPUSet.remove(requestCPU, from: &syncCPUs)
        guard CPUSet.first(in: syncCPUs) != nil else { return nil }
        placedRequestCPU.store(requestCPU, ordering: .relaxed)
        for (thread, name) in threads() {
            let answersRequests = BucketFileSystem.ThreadName.answeringRequests.contains { name.hasPrefix($0) }
            // A thread may end meanwhile: nothing to place then.
            var cpus = answersRequests ? everyCPU : syncCPUs
            _ = cfuse_set_cpus(thread, &cpus)
        }
        return requestCPU
    }

    /// On a thread of the sync work, once the threads are placed: when it may run on the CPU left
    /// to requests, places them all again. Dispatch ends a worker idle for a few seconds and
    /// starts a new one from the thread that next queues work, often one answering a request,
    /// whose CPUs it inherits: the thread that takes the saves to the store, at the start of the
    /// next burst of them. One system call when nothing strayed.
    public static func placeAgainIfStrayed() {
        let requestCPU = placedRequestCPU.load(ordering: .relaxed)
        guard requestCPU >= 0 else { return }
        var mine = cfuse_cpu_set()
        guard cfuse_get_cpus(0, &mine) == 0, CPUSet.contains(requestCPU, in: mine) else { return }
        keepSyncWorkOffOneCPU()
    }

    /// The process's threads and their kernel names.
    static func threads() -> [(id: Int32, name: String)] {
        let ids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return ids.compactMap { id in
            guard let thread = Int32(id),
                let name = try? String(contentsOfFile: "/proc/self/task/\(id)/comm", encoding: .utf8)
            else { return nil }
            return (thread, name.trimmingCharacters(in: .newlines))
        }
    }
}

/// Bits of a `cfuse_cpu_set`, one per CPU.
private enum CPUSet {
    static func first(in set: cfuse_cpu_set) -> Int? {
        withUnsafeBytes(of: set.bits) { raw in
            for (index, word) in raw.bindMemory(to: UInt64.self).enumerated() where word != 0 {
                return index * 64 + word.trailingZeroBitCount
            }
            return nil
        }
    }

    static func contains(_ cpu: Int, in set: cfuse_cpu_set) -> Bool {
        withUnsafeBytes(of: set.bits) { raw in raw.bindMemory(to: UInt64.self)[cpu / 64] & (UInt64(1) << UInt64(cpu % 64)) != 0 }
    }

    static func remove(_ cpu: Int, from set: inout cfuse_cpu_set) {
        withUnsafeMutableBytes(of: &set.bits) { raw in
            raw.bindMemory(to: UInt64.self)[cpu / 64] &= ~(UInt64(1) << UInt64(cpu % 64))
        }
    }
}
