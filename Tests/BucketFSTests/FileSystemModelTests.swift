import BucketFS
import Foundation
import Glibc
import Testing

/// The randomized file-system model test (issue 13, "Must show"): one random sequence of
/// open/read/write/pread/pwrite/lseek/truncate/ftruncate/rename/unlink/fsync/close/reopen/mmap
/// calls over a few names (entity names and scratch names) and several descriptors runs on a
/// real mount's bucket directory and on a plain local directory side by side. After every step
/// both must have answered the same (return value or errno, bytes read) and must look the same:
/// the listing, and for every name and every open descriptor the file type, st_nlink, st_size and
/// every byte. Permission bits, times, st_blocks and inode values differ by design and are not
/// compared; inode *identity* is: while a local file lives, the mount's file in its place keeps
/// one inode number, and two live files never share one (DESIGN.md, "Stable inode numbers";
/// "An open descriptor keeps referring to the file it opened").
///
/// Seeds: `fixedSeeds` and one random seed per run, each printed. Environment:
/// - `BUCKETFS_MODEL_SEED=n[,m...]`: run exactly these seeds (to reproduce a failure);
/// - `BUCKETFS_MODEL_STEPS=n`: steps per seed (default `defaultSteps`);
/// - `BUCKETFS_MODEL_SEEDS=n`: also run n random seeds (a long run);
/// - `BUCKETFS_MODEL_SECONDS=s`: keep running random seeds until s seconds have passed;
/// - `BUCKETFS_MODEL_SHRINK=1`: on a failure, also find the shortest sequence that fails the same
///   way (delta debugging, one fresh mount per try) and print it;
/// `scripts/fs-model` runs a long run.
@Suite(.serialized)
struct FileSystemModelTests {
    /// Seven seeds on seven mounts, one after another: a limit of three mount tests' (each mount
    /// has its own watchdog besides).
    @Test(.timeLimit(.minutes(Patience.testMinutes * 3)), .disabled(if: ModelConfiguration.current.isLongRun))
    func randomSequencesMatchALocalDirectory() throws {
        let configuration = ModelConfiguration.current
        for seed in configuration.seeds {
            try Self.run(seed: seed, steps: configuration.steps)
        }
    }

    /// BUCKETFS_MODEL_SEEDS / BUCKETFS_MODEL_SECONDS: the fixed seeds, then random ones.
    @Test(.timeLimit(.minutes(24 * 60)), .enabled(if: ModelConfiguration.current.isLongRun))
    func longRun() throws {
        let configuration = ModelConfiguration.current
        let start = Date()
        var seeds = configuration.seeds
        var extra = configuration.randomSeeds
        var failures = 0
        var runs = 0
        while true {
            let seed: UInt64
            if !seeds.isEmpty {
                seed = seeds.removeFirst()
            } else if extra > 0 || (configuration.seconds.map { Date().timeIntervalSince(start) < $0 } ?? false) {
                extra -= 1
                seed = UInt64.random(in: 1...UInt64(UInt32.max))
            } else {
                break
            }
            runs += 1
            if try !Self.run(seed: seed, steps: configuration.steps) { failures += 1 }
            if failures >= 10 { break }
        }
        print("FileSystemModelTests: \(runs) seeds of \(configuration.steps) steps in \(Int(Date().timeIntervalSince(start))) s, \(failures) failed")
    }

    /// One seed on a fresh mount and a fresh local directory. Records an issue and returns false
    /// at the first difference (with BUCKETFS_MODEL_SHRINK set, also the shortest sequence found
    /// that still fails the same way).
    @discardableResult
    static func run(seed: UInt64, steps: Int) throws -> Bool {
        print("FileSystemModelTests: seed \(seed), \(steps) steps (rerun: BUCKETFS_MODEL_SEED=\(seed) BUCKETFS_MODEL_STEPS=\(steps))")
        var model = ModelRun(seed: seed, steps: steps)
        guard let failure = try withWorlds({ model.run(mount: $0, local: $1) }) else {
            print("FileSystemModelTests: seed \(seed) matched; \(model.coverage)")
            return true
        }
        var message = failure.message
        if ModelConfiguration.current.shrinks {
            let shortest = try shrink(failure)
            message += "\nshortest sequence failing the same way (\(shortest.steps.count) steps): "
                + shortest.sequence + "\n" + shortest.what
        }
        Issue.record(Comment(rawValue: message))
        return false
    }

    /// Runs `body` on a fresh mount's bucket directory and a fresh local directory; closes every
    /// descriptor, then unmounts.
    static func withWorlds<T>(_ body: (ModelWorld, ModelWorld) throws -> T) throws -> T {
        // Every listing may leave memory (the default keeps those under 4096 files): each
        // drop_caches then makes the mount read the bucket from its store again.
        var options = MountOptions()
        options.releasedListingSize = 1
        let mount = try MountFixture(options: options)
        defer { mount.close() }
        var template = Array((FileManager.default.temporaryDirectory.path + "/bucketfs-model-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        let localDirectory = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: localDirectory) }
        let mountWorld = ModelWorld(directory: mount.path("notes"), slotCount: ModelRun.slotCount, dropsCaches: true)
        let localWorld = ModelWorld(directory: localDirectory, slotCount: ModelRun.slotCount, dropsCaches: false)
        // Descriptors first, then the unmount (open files keep a mount busy).
        defer {
            mountWorld.closeAll()
            localWorld.closeAll()
        }
        return try body(mountWorld, localWorld)
    }

    /// Delta debugging (ddmin) over the failing sequence: drops chunks of steps while a replay
    /// still fails with the same signature. Each replay is a fresh mount.
    static func shrink(_ failure: ModelFailure) throws -> ModelFailure {
        var best = failure
        var chunks = 2
        while best.steps.count > 1 {
            let size = max(1, best.steps.count / chunks)
            var reduced = false
            var start = 0
            while start < best.steps.count {
                var candidate = best.steps
                candidate.removeSubrange(start..<min(start + size, candidate.count))
                if !candidate.isEmpty,
                    let again = try withWorlds({ ModelRun.replay(candidate, seed: failure.seed, mount: $0, local: $1) }),
                    again.signature == failure.signature
                {
                    best = again
                    reduced = true
                } else {
                    start += size
                }
            }
            if reduced { chunks = max(chunks - 1, 2) } else if size == 1 { break } else { chunks = min(chunks * 2, best.steps.count) }
        }
        return best
    }
}

/// Seeds and lengths, from the environment (see FileSystemModelTests).
struct ModelConfiguration: Sendable {
    /// Seeds every run tries; add a seed here when it found a bug worth keeping an eye on.
    static let fixedSeeds: [UInt64] = [1, 2, 3, 7, 42, 1337]
    static let defaultSteps = 300

    var seeds: [UInt64]
    var steps: Int
    var randomSeeds: Int
    var seconds: Double?
    /// BUCKETFS_MODEL_SHRINK: on a failure, also search for its shortest sequence.
    var shrinks: Bool
    var isLongRun: Bool { randomSeeds > 0 || seconds != nil }

    static let current = ModelConfiguration(environment: ProcessInfo.processInfo.environment)

    init(environment: [String: String]) {
        steps = environment["BUCKETFS_MODEL_STEPS"].flatMap { Int($0) } ?? Self.defaultSteps
        randomSeeds = environment["BUCKETFS_MODEL_SEEDS"].flatMap { Int($0) } ?? 0
        seconds = environment["BUCKETFS_MODEL_SECONDS"].flatMap { Double($0) }
        shrinks = environment["BUCKETFS_MODEL_SHRINK"].map { !$0.isEmpty && $0 != "0" } ?? false
        if let given = environment["BUCKETFS_MODEL_SEED"], !given.isEmpty {
            seeds = given.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        } else {
            seeds = Self.fixedSeeds + [UInt64.random(in: 1...UInt64(UInt32.max))]
        }
    }
}

/// One seed's sequence: generates each operation from the seed and the local directory's state
/// (deterministic), runs it on both worlds, compares.
struct ModelRun {
    static let names = ["a.json", "b.json", "t.tmp", ".b.json.swp"]
    static let slotCount = 4
    let seed: UInt64
    let steps: Int
    private var random: SeededGenerator
    /// Per operation kind: how many ran, and how many of those failed (an errno) on both sides.
    private var counts: [String: (ran: Int, failed: Int)] = [:]
    /// Local inode number -> the mount's inode number of the same file, for files alive at the
    /// last step.
    private var identities: [UInt64: UInt64] = [:]

    init(seed: UInt64, steps: Int) {
        self.seed = seed
        self.steps = steps
        random = SeededGenerator(seed: seed)
    }

    /// Nil when every step matched, else the first difference.
    mutating func run(mount: ModelWorld, local: ModelWorld) -> ModelFailure? {
        var done: [ModelStep] = []
        for _ in 1...max(1, steps) {
            let op = nextOp(local)
            done.append(ModelStep(op: op, readNames: random.next() % 3 != 0))
            if let failure = check(done, mount: mount, local: local) { return failure }
        }
        return nil
    }

    /// What ran: `open 40/7` is 40 opens, 7 of them answered with an errno (on both sides).
    var coverage: String {
        counts.keys.sorted().map { "\($0) \(counts[$0]!.ran)/\(counts[$0]!.failed)" }.joined(separator: ", ")
    }

    /// Runs a given sequence (a shrinking candidate): nil if it matches to the end.
    static func replay(_ steps: [ModelStep], seed: UInt64, mount: ModelWorld, local: ModelWorld) -> ModelFailure? {
        var model = ModelRun(seed: seed, steps: steps.count)
        for count in steps.indices {
            if let failure = model.check(Array(steps[...count]), mount: mount, local: local) { return failure }
        }
        return nil
    }

    /// Carries out the last of `steps` on both sides and compares.
    private mutating func check(_ steps: [ModelStep], mount: ModelWorld, local: ModelWorld) -> ModelFailure? {
        let step = steps.last!
        func failure(_ signature: String, _ what: String) -> ModelFailure {
            ModelFailure(seed: seed, steps: steps, what: what, signature: "\(step.op.kind) \(signature)")
        }
        if case .reopen(let slot) = step.op, let ino = local.inode(slot: slot) {
            // close may free the file and the open create one that gets its local number back in
            // the same step: that number no longer names the file it named at the last step.
            identities.removeValue(forKey: ino)
        }
        let mountOutcome = mount.perform(step.op)
        let localOutcome = local.perform(step.op)
        let failed = localOutcome.code.hasPrefix("E") || localOutcome.code.contains(" E") || localOutcome.code == "no descriptor"
        counts[step.op.kind, default: (0, 0)].ran += 1
        if failed { counts[step.op.kind, default: (0, 0)].failed += 1 }
        if mountOutcome != localOutcome {
            return failure("result", "results differ: mount \(mountOutcome), local \(localOutcome)")
        }
        let mountSnapshot = mount.snapshot(names: Self.names, readNames: step.readNames)
        let localSnapshot = local.snapshot(names: Self.names, readNames: step.readNames)
        if mountSnapshot != localSnapshot {
            let (kind, text) = ModelSnapshot.difference(mountSnapshot, localSnapshot)
            return failure(kind, "result \(localOutcome); then the files differ: " + text)
        }
        if let problem = checkIdentities(mount: mountSnapshot, local: localSnapshot) {
            return failure("inode", "result \(localOutcome); then inode identity: " + problem)
        }
        return nil
    }

    /// Each live file is one inode on each side, the same one as at the last step.
    private mutating func checkIdentities(mount: ModelSnapshot, local: ModelSnapshot) -> String? {
        var pairs: [(what: String, local: UInt64, mount: UInt64)] = []
        for name in Self.names {
            if let l = local.nameInodes[name], let m = mount.nameInodes[name] { pairs.append((name, l, m)) }
        }
        for slot in local.slotInodes.indices {
            if let l = local.slotInodes[slot], let m = mount.slotInodes[slot] { pairs.append(("descriptor #\(slot)", l, m)) }
        }
        var forward: [UInt64: (String, UInt64)] = [:]
        var backward: [UInt64: (String, UInt64)] = [:]
        for pair in pairs {
            if let seen = forward[pair.local], seen.1 != pair.mount {
                return "\(seen.0) and \(pair.what) are one file, but the mount gives them inodes \(seen.1) and \(pair.mount)"
            }
            if let seen = backward[pair.mount], seen.1 != pair.local {
                return "\(seen.0) and \(pair.what) are two files, but the mount gives both inode \(pair.mount)"
            }
            if let before = identities[pair.local], before != pair.mount {
                return "\(pair.what) is the file that was mount inode \(before) at the last step, now \(pair.mount)"
            }
            forward[pair.local] = (pair.what, pair.mount)
            backward[pair.mount] = (pair.what, pair.local)
        }
        identities = forward.mapValues(\.1)
        return nil
    }

    // MARK: generating operations

    private mutating func int(_ range: Range<Int>) -> Int { Int.random(in: range, using: &random) }
    private mutating func chance(_ percent: Int) -> Bool { int(0..<100) < percent }
    private mutating func pick<T>(_ items: [T]) -> T { items[int(0..<items.count)] }

    private mutating func offset() -> Int {
        switch int(0..<100) {
        case ..<60: int(0..<64)
        case ..<85: int(0..<4200)
        default: int(0..<65536)
        }
    }

    private mutating func bytes() -> [UInt8] {
        func letters(_ count: Int, _ random: inout SeededGenerator) -> [UInt8] {
            (0..<count).map { _ in UInt8.random(in: 0x61...0x7a, using: &random) }
        }
        switch int(0..<100) {
        case ..<25: return Array("{\"v\": \(int(0..<100_000))}\n".utf8)
        case ..<60: return letters(int(1..<17), &random)
        case ..<75: return (0..<int(1..<9)).map { _ in UInt8.random(in: 0...255, using: &random) }
        case ..<90: return [UInt8](repeating: UInt8(int(0x30..<0x7a)), count: int(1..<300))
        default: return letters(int(1000..<5000), &random)
        }
    }

    private mutating func openFlags() -> Int32 {
        var flags = pick([O_RDONLY, O_WRONLY, O_RDWR, O_RDWR])
        if chance(70) {
            flags |= O_CREAT
            if chance(8) { flags |= O_EXCL }
        }
        if chance(20) { flags |= O_TRUNC }
        if chance(20) { flags |= O_APPEND }
        return flags
    }

    /// Mostly a name that exists (else renames and unlinks mostly say ENOENT).
    private mutating func existingName(_ world: ModelWorld) -> String {
        let existing = Self.names.filter { access(world.path($0), F_OK) == 0 }
        return !existing.isEmpty && chance(85) ? pick(existing) : pick(Self.names)
    }

    private mutating func nextOp(_ world: ModelWorld) -> ModelOp {
        let used = world.slots.indices.filter { world.slots[$0] != nil }
        let free = world.slots.indices.filter { world.slots[$0] == nil }
        while true {
            let roll = int(0..<100)
            if roll < 16 {
                guard !free.isEmpty else { continue }
                return .open(slot: pick(free), name: pick(Self.names), flags: openFlags())
            }
            if roll >= 84 {
                switch roll {
                case ..<91:
                    let (from, to) = (existingName(world), pick(Self.names))
                    return .rename(from: from, to: to)
                case ..<96: return .unlink(name: existingName(world))
                case ..<99: return .truncate(name: existingName(world), length: offset())
                default: return .dropCaches
                }
            }
            guard !used.isEmpty else { continue }
            // Mostly a descriptor that can do the operation (the others get EBADF/EINVAL/EACCES).
            let readable = used.filter { world.slots[$0]!.flags & O_ACCMODE != O_WRONLY }
            let writable = used.filter { world.slots[$0]!.flags & O_ACCMODE != O_RDONLY }
            let reads = roll >= 25 && roll < 39 || roll >= 73
            let preferred = reads ? readable : roll >= 39 && roll < 69 ? writable : used
            let slot = !preferred.isEmpty && chance(85) ? pick(preferred) : pick(used)
            switch roll {
            case ..<22: return .close(slot: slot)
            case ..<25: return .reopen(slot: slot)
            case ..<31: return .read(slot: slot, count: chance(80) ? int(1..<100) : int(100..<5000))
            case ..<39: return .pread(slot: slot, count: chance(80) ? int(1..<100) : int(100..<5000), offset: offset())
            case ..<47: return .write(slot: slot, bytes: bytes())
            case ..<60: return .pwrite(slot: slot, bytes: bytes(), offset: offset())
            case ..<63: return .lseek(slot: slot, offset: offset(), whence: pick([SEEK_SET, SEEK_CUR, SEEK_END]))
            case ..<69: return .ftruncate(slot: slot, length: offset())
            case ..<73: return .fsync(slot: slot)
            default:
                let write = world.slots[slot]!.flags & O_ACCMODE == O_RDWR ? chance(60) : chance(10)
                return .mmap(
                    slot: slot, page: int(0..<20), length: int(1..<9000), bytes: write ? bytes() : nil, at: int(0..<9000))
            }
        }
    }
}

/// One step of a sequence: the operation, and whether the check after it reads every name.
struct ModelStep: Sendable {
    var op: ModelOp
    var readNames: Bool
}

/// The first difference of a sequence.
struct ModelFailure {
    var seed: UInt64
    var steps: [ModelStep]
    var what: String
    /// The failing operation's kind and what differed (for shrinking: a shorter sequence counts
    /// only if it fails the same way).
    var signature: String

    var sequence: String {
        steps.enumerated().map { "\($0.offset + 1) \($0.element.op)\($0.element.readNames ? "" : " (names unread)")" }
            .joined(separator: "; ")
    }

    var message: String {
        """
        bucketfs differs from a local directory: seed \(seed), step \(steps.count): \(steps.last!.op)
        \(what)
        rerun: BUCKETFS_MODEL_SEED=\(seed) BUCKETFS_MODEL_STEPS=\(steps.count) swift test --skip-build --filter FileSystemModelTests
        sequence: \(sequence)
        """
    }
}
