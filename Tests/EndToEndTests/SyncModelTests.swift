import Foundation
import Glibc
import Testing

/// The whole-system model test (issue 34): three real mounts of the same user on one real
/// `bucketfs serve`, driven by a seeded sequence of what programs do to files (saves, fsyncs,
/// renames between entities and to and from local names, an unlink right after a save, editors'
/// temp+fsync+rename, invalid JSON and its fix, truncation, mkdir of a bucket), with gaps of
/// 0–100 ms and faults (the server killed -9 and restarted, stopped and continued; a mount
/// killed -9 and mounted again). After every operation the mount that made it must show exactly
/// what the model says of every file no other mount touches in the round: a file removed stays
/// removed, a save keeps its bytes. At each quiesce every mount's changes must reach the server
/// (`bucketfs sync`), the mounts must converge, every file must be what the model says
/// (exactly, where one mount touched it in the round), and a file several mounts touched must
/// end in an outcome the concurrency model allows:
/// - gone only if one of them removed it (an unlink or a rename away was its last operation);
/// - there only if one of them wrote it last, holding the `n` of a value written to it in the
///   round (or the one it had before): concurrent text edits merge, and `n` is one side's.
/// At the end a fresh mount (a store of its own) must show what the others converged on: the
/// server holds exactly that.
///
/// Environment:
/// - `BUCKETFS_SYNC_MODEL_SEED=n[,m...]`: run exactly these seeds (to reproduce a failure);
/// - `BUCKETFS_SYNC_MODEL_ONLY=i,j,...`: with one seed, only these steps of its sequence (what a
///   shrink printed);
/// - `BUCKETFS_SYNC_MODEL_STEPS=n`: steps per seed (default `defaultSteps`);
/// - `BUCKETFS_SYNC_MODEL_SECONDS=s`: a long run: random seeds until s seconds have passed;
/// - `BUCKETFS_SYNC_MODEL_SHRINK_SECONDS=s`: how long a failure's shrinking may take (default
///   240; 0: no shrinking);
/// - `BUCKETFS_SYNC_MODEL_PRINT_STEPS=1`: every step of a seed printed before it runs (a failure
///   prints only the 40 before it; a restore's trouble may begin long before);
/// - `BUCKETFS_SYNC_MODEL_RESTORES=0`: no backups of the server and restores from them among the
///   faults (they are by default; a replay of a run needs the same setting).
/// The default run (`scripts/test`) takes the fixed seeds (about a minute on a quiet machine);
/// `scripts/sync-model [SECONDS]` runs random seeds for as long as it is given.
@Suite(.serialized)
struct SyncModelTests {
    @Test(.timeLimit(.minutes(12)), .disabled(if: SyncModelConfiguration.current.isLongRun))
    func mountsAndServerAgreeWithTheModelUnderFaults() throws {
        let configuration = SyncModelConfiguration.current
        for seed in configuration.seeds {
            try Self.run(seed: seed, configuration: configuration)
        }
    }

    @Test(.timeLimit(.minutes(24 * 60)), .enabled(if: SyncModelConfiguration.current.isLongRun))
    func longRun() throws {
        let configuration = SyncModelConfiguration.current
        let start = Date()
        var seeds = configuration.seeds
        var runs = 0
        var failures = 0
        while failures < 5 {
            let seed: UInt64
            if !seeds.isEmpty {
                seed = seeds.removeFirst()
            } else if let seconds = configuration.seconds, Date().timeIntervalSince(start) < seconds {
                seed = UInt64.random(in: 1...UInt64(UInt32.max))
            } else {
                break
            }
            runs += 1
            if try !Self.run(seed: seed, configuration: configuration) { failures += 1 }
        }
        print("SyncModelTests: \(runs) seeds of \(configuration.steps) steps in \(Int(Date().timeIntervalSince(start))) s, \(failures) failed")
    }

    /// One seed on a fresh server and fresh mounts; records an issue (with the shortest failing
    /// sequence found) and returns false on a failure.
    @discardableResult
    static func run(seed: UInt64, configuration: SyncModelConfiguration) throws -> Bool {
        let sequence = SyncModel.generate(seed: seed, steps: configuration.steps, restores: configuration.restores)
        let numbers = configuration.only.map { $0.filter(sequence.indices.contains) } ?? Array(sequence.indices)
        let steps = numbers.map { sequence[$0] }
        let restores = configuration.restores ? "" : "BUCKETFS_SYNC_MODEL_RESTORES=0 "
        let replay = "\(restores)BUCKETFS_SYNC_MODEL_SEED=\(seed) BUCKETFS_SYNC_MODEL_STEPS=\(configuration.steps)"
            + (configuration.only.map { " BUCKETFS_SYNC_MODEL_ONLY=" + $0.map(String.init).joined(separator: ",") } ?? "")
        print("SyncModelTests: seed \(seed), \(steps.count) steps (rerun: \(replay) scripts/sync-model)")
        if configuration.printsSteps {
            for (number, step) in zip(numbers, steps) { print("  \(number): \(step)") }
        }
        let started = Date()
        var run = SyncModelRun(steps: steps, numbers: numbers)
        guard let failure = try run.carryOut() else {
            print("SyncModelTests: seed \(seed) agreed with the model in \(Int(Date().timeIntervalSince(started))) s; \(run.coverage)")
            return true
        }
        var message = "seed \(seed) (rerun: \(replay) scripts/sync-model): \(failure.message)"
        // Printed now, not only recorded at the end: a shrink runs minutes of further tries, and
        // what ends the process meanwhile (a crash, a time limit) must not take the failure with it.
        print("SyncModelTests: seed \(seed) FAILED: \(message)")
        if configuration.shrinkSeconds > 0 {
            let shortest = try shrink(failure, steps: steps, indices: numbers, seconds: configuration.shrinkSeconds)
            message += "\n\nshortest sequence found failing the same way (\(shortest.indices.count) steps; rerun: "
                + "\(restores)BUCKETFS_SYNC_MODEL_SEED=\(seed) BUCKETFS_SYNC_MODEL_STEPS=\(configuration.steps) "
                + "BUCKETFS_SYNC_MODEL_ONLY=\(shortest.indices.map(String.init).joined(separator: ",")) scripts/sync-model):\n"
                + shortest.failure.message
        }
        Issue.record(Comment(rawValue: message))
        return false
    }

    /// Delta debugging over the failing sequence, each try on a fresh server and mounts, for at
    /// most `seconds`: drops chunks of steps while the rest still fails the same way. A run is
    /// not deterministic (real processes, real timing), so a try that passes by chance keeps a
    /// chunk that was not needed: the result is short, not always the shortest.
    static func shrink(
        _ failure: SyncModelFailure, steps: [SyncStep], indices: [Int], seconds: Double
    ) throws -> (indices: [Int], failure: SyncModelFailure) {
        let deadline = Date(timeIntervalSinceNow: seconds)
        // Steps after the failing one play no part.
        var best = (indices: Array(indices.prefix(failure.step + 1)), failure: failure)
        var bestSteps = Array(steps.prefix(failure.step + 1))
        var chunks = 2
        while bestSteps.count > 1 && Date() < deadline {
            let size = max(1, bestSteps.count / chunks)
            var reduced = false
            var start = 0
            while start < bestSteps.count && Date() < deadline {
                var candidate = bestSteps
                var candidateIndices = best.indices
                candidate.removeSubrange(start..<min(start + size, candidate.count))
                candidateIndices.removeSubrange(start..<min(start + size, candidateIndices.count))
                var run = SyncModelRun(steps: candidate, numbers: candidateIndices)
                if !candidate.isEmpty, let again = try run.carryOut(), again.signature == failure.signature {
                    best = (Array(candidateIndices.prefix(again.step + 1)), again)
                    bestSteps = Array(candidate.prefix(again.step + 1))
                    reduced = true
                    print("SyncModelTests: shrinking, \(bestSteps.count) steps still fail (\(failure.signature))")
                } else {
                    start += size
                }
            }
            if reduced { chunks = max(chunks - 1, 2) } else if size == 1 { break } else { chunks = min(chunks * 2, bestSteps.count) }
        }
        return best
    }
}

/// Seeds and lengths, from the environment (see SyncModelTests).
struct SyncModelConfiguration: Sendable {
    /// Seeds every run tries; add one here when it found a bug worth keeping an eye on.
    /// The default run's (`scripts/test`'s): each a sequence every commit must pass, whose timing
    /// still varies from run to run. 2 and 3 found the deletion that came back (issue 34), 19 a
    /// file rendered again without a change from elsewhere, 22 a connection that never opened.
    /// Random seeds are the long run's (`scripts/sync-model`): a rare failure it finds is fixed,
    /// and its seed added here, rather than left to turn CI red at random.
    static let fixedSeeds: [UInt64] = [1, 2, 3, 4, 5, 6, 19, 22]
    static let defaultSteps = 150
    static let current = SyncModelConfiguration(environment: ProcessInfo.processInfo.environment)

    var seeds: [UInt64]
    var steps: Int
    var only: [Int]?
    var seconds: Double?
    var shrinkSeconds: Double
    /// Backups and restores of the server among the faults (issue 35; `BUCKETFS_SYNC_MODEL_RESTORES=0`:
    /// none).
    var restores: Bool
    var printsSteps: Bool
    var isLongRun: Bool { seconds != nil }

    init(environment: [String: String]) {
        steps = environment["BUCKETFS_SYNC_MODEL_STEPS"].flatMap { Int($0) } ?? Self.defaultSteps
        seconds = environment["BUCKETFS_SYNC_MODEL_SECONDS"].flatMap { Double($0) }
        shrinkSeconds = environment["BUCKETFS_SYNC_MODEL_SHRINK_SECONDS"].flatMap { Double($0) } ?? 240
        restores = environment["BUCKETFS_SYNC_MODEL_RESTORES"] != "0"
        printsSteps = environment["BUCKETFS_SYNC_MODEL_PRINT_STEPS"] == "1"
        only = environment["BUCKETFS_SYNC_MODEL_ONLY"].flatMap { text in
            text.isEmpty ? nil : text.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        }
        if let given = environment["BUCKETFS_SYNC_MODEL_SEED"], !given.isEmpty {
            seeds = given.split(separator: ",").compactMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        } else if seconds != nil {
            seeds = []
        } else {
            seeds = Self.fixedSeeds
        }
    }
}

struct SyncModelFailure: Error {
    /// The kind of difference (`resurrected`, `lost`, `bytes`, `outcome`, `diverged`, ...): a
    /// shrunk sequence must fail with the same.
    let signature: String
    let step: Int
    let message: String
}

/// One sequence carried out on a fresh world and checked against the model.
struct SyncModelRun {
    let steps: [SyncStep]
    /// Each step's number in the seed's whole sequence (a shrunk sequence keeps some of them).
    let numbers: [Int]
    let rounds: SyncRounds
    /// [mount][bucket]: what the mount shows, as the model knows it.
    private var views: [[BucketView]]
    /// [bucket]: the entities every mount agreed on at the last quiesce (name -> bytes as one
    /// mount shows them).
    private var agreed: [Listing]
    /// This round's effects on contested files: file -> mount -> last effect.
    private var effects: [ModelFile: [Int: ContestedEffect]] = [:]
    /// The `n` of each file at the round's start (nil: absent, or no `n`).
    private var numbersAtRoundStart: [ModelFile: Int] = [:]
    private var counts: [String: Int] = [:]
    private var fixes = 1_000_000
    /// Per mount, the files whose last write there was bytes that are not JSON (kept locally,
    /// not sent): the quiesce fixes them. Any other file that is not JSON is a difference.
    private var invalidHere: [Int: Set<ModelFile>] = [:]
    /// After a restore in this round: per entity file, the outcomes it could have had before
    /// the restore. The mount that made a value the server lost sends it again; the others show
    /// the server's older one meanwhile, and that resend may come after another mount's change
    /// since (a change in flight again, contested as any other). So, until the quiesce, every
    /// entity file is unknown to every mount, and at the quiesce each must hold one of these
    /// or what a mount did to it in the round.
    private var restoredOutcomes: [ModelFile: Set<ContestedEffect>]?

    init(steps: [SyncStep], numbers: [Int]? = nil) {
        self.steps = steps
        self.numbers = numbers ?? Array(steps.indices)
        rounds = SyncRounds(steps)
        views = Array(repeating: Array(repeating: BucketView(), count: SyncModel.buckets.count), count: SyncModel.mountCount)
        agreed = Array(repeating: [:], count: SyncModel.buckets.count)
    }

    var coverage: String { counts.keys.sorted().map { "\($0) \(counts[$0]!)" }.joined(separator: ", ") }

    /// Nil when the whole sequence agreed with the model, else the first difference.
    mutating func carryOut() throws -> SyncModelFailure? {
        let world = try SyncWorld(timeLimit: 600)
        defer { world.close() }
        beginRound(at: 0)
        for index in steps.indices {
            if let failure = try perform(index, world) { return failure }
            if steps[index] == .quiesce { beginRound(at: index + 1) }
        }
        if steps.last != .quiesce, let failure = try quiesce(at: steps.count - 1, world) { return failure }
        return try checkFreshMount(world)
    }

    /// Files other mounts touch in this round are unknown to each mount until it ends.
    private mutating func beginRound(at index: Int) {
        let touched = rounds.touched(at: index)
        for mount in views.indices {
            for bucket in SyncModel.buckets.indices {
                views[mount][bucket].unknown = Set(
                    touched.filter { $0.key.bucket == bucket && !$0.value.subtracting([mount]).isEmpty }.map(\.key.name))
            }
        }
        effects = [:]
        numbersAtRoundStart = [:]
        restoredOutcomes = nil
        for (file, mounts) in touched where mounts.count > 1 {
            numbersAtRoundStart[file] = agreed[file.bucket][file.name].flatMap(SyncModel.number)
        }
    }

    private func failure(_ signature: String, at index: Int, _ detail: String, _ world: SyncWorld) -> SyncModelFailure {
        let start = max(0, index - 40)
        let recent = (start...index).map { "  \(numbers[$0]): \(steps[$0])" }.joined(separator: "\n")
        return SyncModelFailure(
            signature: signature, step: index,
            message: "step \(numbers[index]) (\(steps[index])): \(signature): \(detail)\n"
                + "the steps before it, by their number in the seed's sequence:\n\(recent)\n\(world.logTails())")
    }

    // MARK: - Steps

    private mutating func perform(_ index: Int, _ world: SyncWorld) throws -> SyncModelFailure? {
        let step = steps[index]
        switch step {
        case .pause(let milliseconds):
            Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
            return nil
        case .killServer:
            world.killServer()
        case .restartServer:
            try world.restartServer()
        case .stopServer:
            world.stopServer()
        case .continueServer:
            world.continueServer()
        case .backupServer:
            try world.backupServer()
            counts[step.kind, default: 0] += 1
        case .restoreServer(let back):
            try world.restoreServer(back: back)
            counts[step.kind, default: 0] += 1
            restored()
            return nil
        case .forgetInodes:
            try world.forgetInodes()
            counts[step.kind, default: 0] += 1
            return nil
        case .killMount(let mount):
            try world.killMount(mount)
            counts[step.kind, default: 0] += 1
            for bucket in world.bucketsOf[mount] {
                if let problem = compare(mount, bucket, world) { return failure(problem.0, at: index, "after the mount again: " + problem.1, world) }
            }
            return nil
        case .makeBucket(let mount, let bucket):
            return try makeBucket(mount, bucket, at: index, world)
        case .quiesce:
            return try quiesce(at: index, world)
        default:
            guard let mount = step.mount, let bucket = step.files.first?.bucket, world.bucketsOf[mount].contains(bucket) else {
                return nil
            }
            counts[step.kind, default: 0] += 1
            if let problem = operate(step, mount, bucket, at: index, world) { return failure(problem.0, at: index, problem.1, world) }
            if let problem = compare(mount, bucket, world) { return failure(problem.0, at: index, problem.1, world) }
            return nil
        }
        counts[step.kind, default: 0] += 1
        return nil
    }

    /// What the model knows of a name on a mount: nil unknown, .some(nil) absent.
    private func known(_ mount: Int, _ bucket: Int, _ name: String) -> [UInt8]?? {
        let view = views[mount][bucket]
        return view.unknown.contains(name) ? nil : .some(view.files[name])
    }

    /// Records what the mount now holds under a name (nil: nothing), where the model knows it.
    private mutating func set(_ mount: Int, _ bucket: Int, _ name: String, _ bytes: [UInt8]?) {
        guard !views[mount][bucket].unknown.contains(name) else { return }
        views[mount][bucket].files[name] = bytes
    }

    /// Notes whether the mount's file now holds bytes that are not JSON (nil: it is gone).
    private mutating func note(_ file: ModelFile, _ mount: Int, holds bytes: [UInt8]?) {
        if let bytes, SyncModel.object(bytes) == nil {
            invalidHere[mount, default: []].insert(file)
        } else {
            invalidHere[mount]?.remove(file)
        }
    }

    private mutating func record(_ file: ModelFile, _ mount: Int, _ effect: ContestedEffect, at index: Int) {
        if restoredOutcomes != nil || rounds.touches(file, at: index).count > 1 { effects[file, default: [:]][mount] = effect }
    }

    /// The server was restored from a backup (see `restoredOutcomes`).
    private mutating func restored() {
        var outcomes = restoredOutcomes ?? [:]
        for bucket in SyncModel.buckets.indices {
            for key in 0..<SyncModel.keysPerBucket {
                let file = ModelFile(bucket: bucket, key: key)
                outcomes[file, default: []].formUnion(outcomesSoFar(file))
                for mount in views.indices { views[mount][bucket].unknown.insert(file.name) }
            }
        }
        restoredOutcomes = outcomes
    }

    /// What a file may hold once the round's changes so far are everywhere: what a mount did
    /// to it last where it is contested, what the mounts that know it show (bytes that are not
    /// JSON stay local: the value under them is the one at the round's start), and its value at
    /// the round's start where a mount does not know it.
    private func outcomesSoFar(_ file: ModelFile) -> Set<ContestedEffect> {
        let atStart: ContestedEffect = agreed[file.bucket][file.name].map { .wrote(SyncModel.number($0)) } ?? .removed
        var outcomes: Set<ContestedEffect> = Set((effects[file] ?? [:]).values)
        let knowing = views.indices.filter { !views[$0][file.bucket].unknown.contains(file.name) }
        for mount in knowing {
            guard let bytes = views[mount][file.bucket].files[file.name] else {
                outcomes.insert(.removed)
                continue
            }
            outcomes.insert(SyncModel.object(bytes) == nil ? atStart : .wrote(SyncModel.number(bytes)))
        }
        // A mount the round's changes to it had not reached holds it as at the round's start,
        // and sends that again if it made it (the restore lost what came since).
        if outcomes.isEmpty || knowing.count < views.count { outcomes.insert(atStart) }
        return outcomes
    }

    /// The result a call on `name` must have: 0 where the model knows it is there, ENOENT where
    /// it knows it is not; where it does not know, either.
    /// A call that finds a file the model says is gone shows it came back (`resurrected`); one
    /// that misses a file the model says is there, that it was `lost`.
    private func expect(_ code: Int32, forSource name: String, _ mount: Int, _ bucket: Int, _ call: String) -> (String, String)? {
        let place = "m\(mount) \(SyncModel.buckets[bucket])/\(name)"
        switch known(mount, bucket, name) {
        case .none:
            return code == 0 || code == ENOENT ? nil : ("errno", "\(call) of \(place): \(Posix.describe(code))")
        case .some(.none):
            if code == ENOENT { return nil }
            return (code == 0 ? "resurrected" : "errno", "\(call) of \(place), which is not there, answered \(Posix.describe(code))")
        case .some(.some):
            if code == 0 { return nil }
            return (code == ENOENT ? "lost" : "errno", "\(call) of \(place), which is there, answered \(Posix.describe(code))")
        }
    }

    struct Problem: Error {
        let kind: String
        let description: String
    }

    /// What a rename moved to `path`: the source's bytes where the model knows them, else what
    /// `path` holds, read through the mount right after the rename returned. Nil (gone) only by
    /// ENOENT, and only where something from elsewhere may have taken it (`mayBeGone`).
    private func movedBytes(known: [UInt8]??, at path: String, _ place: String, mayBeGone: Bool) -> Result<[UInt8]?, Problem> {
        if let known { return .success(known) }
        switch Posix.read(path) {
        case .success(let bytes): return .success(bytes)
        case .failure(let failure) where failure.code == ENOENT && mayBeGone: return .success(nil)
        case .failure(let failure):
            return .failure(
                Problem(kind: failure.code == ENOENT ? "lost" : "errno", description: "read of \(place) right after the rename to it: \(failure)"))
        }
    }

    /// Carries out an operation of a mount and updates the model; a problem when a call answered
    /// what it could not have.
    private mutating func operate(_ step: SyncStep, _ mount: Int, _ bucket: Int, at index: Int, _ world: SyncWorld) -> (String, String)? {
        let path = { (name: String) in world.path(mount, bucket, name) }
        switch step {
        case .save(_, let file, let value, let fsync):
            let bytes = SyncModel.bytes(value: value, mount: mount)
            if let failure = Posix.write(path(file.name), bytes, fsync: fsync) { return ("errno", "save of \(file): \(failure)") }
            set(mount, bucket, file.name, bytes)
            note(file, mount, holds: bytes)
            record(file, mount, .wrote(value), at: index)
        case .saveInvalid(_, let file, let value):
            // Kept locally and not sent: no effect on what the others see.
            let bytes = SyncModel.invalidBytes(value: value, mount: mount)
            if let failure = Posix.write(path(file.name), bytes, fsync: false) { return ("errno", "save of \(file): \(failure)") }
            set(mount, bucket, file.name, bytes)
            note(file, mount, holds: bytes)
        case .truncate(_, let file):
            let code = Posix.truncate(path(file.name))
            if let problem = expect(code, forSource: file.name, mount, bucket, "truncate") { return problem }
            set(mount, bucket, file.name, code == 0 ? [] : nil)
            note(file, mount, holds: code == 0 ? [] : nil)
        case .editorsSave(_, let file, let value):
            let bytes = SyncModel.bytes(value: value, mount: mount)
            var failure = Posix.write(path(file.temporaryName), bytes, fsync: true)
            if failure == nil, case let code = Posix.rename(path(file.temporaryName), path(file.name)), code != 0 {
                failure = Posix.Failure(call: "rename", code: code)
            }
            if let failure { return ("errno", "editor's save of \(file): \(failure)") }
            set(mount, bucket, file.name, bytes)
            note(file, mount, holds: bytes)
            record(file, mount, .wrote(value), at: index)
        case .rename(_, let file, let target):
            let code = Posix.rename(path(file.name), path(target.name))
            if let problem = expect(code, forSource: file.name, mount, bucket, "rename") { return problem }
            guard code == 0, file != target else {
                if code != 0 { set(mount, bucket, file.name, nil) }
                return nil
            }
            // A removal of the target's key from elsewhere may take it meanwhile (ENOENT).
            let moved: [UInt8]?
            switch movedBytes(known: known(mount, bucket, file.name), at: path(target.name), "m\(mount) \(target)", mayBeGone: true) {
            case .success(let bytes): moved = bytes
            case .failure(let problem): return (problem.kind, problem.description)
            }
            set(mount, bucket, file.name, nil)
            set(mount, bucket, target.name, moved)
            note(file, mount, holds: nil)
            note(target, mount, holds: moved)
            record(file, mount, .removed, at: index)
            if let moved, SyncModel.object(moved) != nil { record(target, mount, .wrote(SyncModel.number(moved)), at: index) }
        case .renameToScratch(_, let file):
            let code = Posix.rename(path(file.name), path(file.scratchName))
            if let problem = expect(code, forSource: file.name, mount, bucket, "rename") { return problem }
            guard code == 0 else {
                set(mount, bucket, file.name, nil)
                return nil
            }
            // A local-only name: nothing from elsewhere can take it, so it must read back.
            let moved: [UInt8]?
            let place = "m\(mount) \(file.bucketName)/\(file.scratchName)"
            switch movedBytes(known: known(mount, bucket, file.name), at: path(file.scratchName), place, mayBeGone: false) {
            case .success(let bytes): moved = bytes
            case .failure(let problem): return (problem.kind, problem.description)
            }
            set(mount, bucket, file.name, nil)
            set(mount, bucket, file.scratchName, moved)
            note(file, mount, holds: nil)
            record(file, mount, .removed, at: index)
        case .renameScratchOver(_, let file):
            let code = Posix.rename(path(file.scratchName), path(file.name))
            if let problem = expect(code, forSource: file.scratchName, mount, bucket, "rename") { return problem }
            guard code == 0, let moved = known(mount, bucket, file.scratchName) ?? nil else { return nil }
            set(mount, bucket, file.scratchName, nil)
            set(mount, bucket, file.name, moved)
            note(file, mount, holds: moved)
            if SyncModel.object(moved) != nil { record(file, mount, .wrote(SyncModel.number(moved)), at: index) }
        case .unlink(_, let file):
            let code = Posix.unlink(path(file.name))
            if let problem = expect(code, forSource: file.name, mount, bucket, "unlink") { return problem }
            set(mount, bucket, file.name, nil)
            note(file, mount, holds: nil)
            if code == 0 { record(file, mount, .removed, at: index) }
        case .saveThenUnlink(_, let file, let value):
            var failure = Posix.write(path(file.name), SyncModel.bytes(value: value, mount: mount), fsync: false)
            if failure == nil, case let code = Posix.unlink(path(file.name)), code != 0 {
                // A file another mount removes in this round may go between the save and the
                // unlink (its removal reached the server after the save: the last one wins), as
                // another program's unlink would on a local disk; gone is what this step wants.
                let removedElsewhere = code == ENOENT && views[mount][bucket].unknown.contains(file.name)
                if !removedElsewhere { failure = Posix.Failure(call: "unlink", code: code) }
            }
            if let failure { return ("errno", "save then unlink of \(file): \(failure)") }
            set(mount, bucket, file.name, nil)
            note(file, mount, holds: nil)
            record(file, mount, .removed, at: index)
        default:
            break
        }
        return nil
    }

    /// Whether a mount's bucket shows what the model knows of it, exactly: a problem (its kind
    /// and what differs) when not.
    private func compare(_ mount: Int, _ bucket: Int, _ world: SyncWorld) -> (String, String)? {
        let directory = world.mounts[mount].path(SyncModel.buckets[bucket])
        guard let listing = Posix.list(directory) else { return ("unreadable", "m\(mount) cannot list \(directory)") }
        let view = views[mount][bucket]
        for name in Set(listing.keys).union(view.files.keys).sorted() where !view.unknown.contains(name) {
            let seen = listing[name]
            let expected = view.files[name]
            guard seen != expected else { continue }
            let place = "m\(mount) \(SyncModel.buckets[bucket])/\(name)"
            switch (expected, seen) {
            case (nil, let seen?):
                return ("resurrected", "\(place) is there (\(Self.show(seen))), but it was removed or never written there")
            case (let expected?, nil):
                return ("lost", "\(place) is gone, but it holds \(Self.show(expected))")
            default:
                return ("bytes", "\(place) holds \(Self.show(seen ?? [])), but it should hold \(Self.show(expected ?? []))")
            }
        }
        return nil
    }

    static func show(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: "\n", with: "\\n")
        return "'" + (text.count > 160 ? String(text.prefix(160)) + "..." : text) + "'"
    }

    private mutating func makeBucket(_ mount: Int, _ bucket: Int, at index: Int, _ world: SyncWorld) throws -> SyncModelFailure? {
        let had = world.bucketsOf[mount].contains(bucket)
        let code = world.makeBucket(mount, bucket)
        counts[steps[index].kind, default: 0] += 1
        guard code == (had ? EEXIST : 0) else {
            return failure("errno", at: index, "mkdir answered \(Posix.describe(code))", world)
        }
        guard !had else { return nil }
        // The bucket's first sync brings what the mounts agreed on (files other mounts change in
        // this round aside, which the model does not know yet).
        let unknown = views[mount][bucket].unknown
        let expected = agreed[bucket].filter { !unknown.contains($0.key) }.mapValues(SyncModel.object)
        var listing: Listing = [:]
        let loaded = eventually(120) {
            listing = Posix.list(world.mounts[mount].path(SyncModel.buckets[bucket])) ?? [:]
            return listing.filter { !unknown.contains($0.key) }.mapValues(SyncModel.object) == expected
        }
        guard loaded else {
            return failure("diverged", at: index, "the new bucket shows \(listing.keys.sorted()), not \(expected.keys.sorted())", world)
        }
        views[mount][bucket].files = listing
        return nil
    }

    // MARK: - Quiesce

    private mutating func quiesce(at index: Int, _ world: SyncWorld) throws -> SyncModelFailure? {
        try world.serverBack()
        counts["quiesce", default: 0] += 1
        // The files a mount left holding what is not JSON are fixed (the model's "invalid JSON,
        // then a fix"): `sync` waits only for what can be sent.
        for (mount, files) in invalidHere.sorted(by: { $0.key < $1.key }) {
            for file in files.sorted(by: { ($0.bucket, $0.key) < ($1.bucket, $1.key) }) {
                let path = world.path(mount, file.bucket, file.name)
                guard let bytes = FileManager.default.contents(atPath: path), SyncModel.object([UInt8](bytes)) == nil else { continue }
                fixes += 1
                let fixed = SyncModel.bytes(value: fixes, mount: mount)
                if let failed = Posix.write(path, fixed, fsync: false) {
                    return failure("errno", at: index, "fixing m\(mount) \(file): \(failed)", world)
                }
                set(mount, file.bucket, file.name, fixed)
                record(file, mount, .wrote(fixes), at: index)
            }
        }
        invalidHere = [:]
        for mount in views.indices {
            if let problem = world.sync(mount) { return failure("sync", at: index, problem, world) }
        }
        // Everything is on the server; the mounts converge once its broadcasts arrived.
        var listings: [[Listing?]] = []
        let converged = eventually(150) {
            listings = views.indices.map { mount in
                SyncModel.buckets.indices.map { bucket in
                    world.bucketsOf[mount].contains(bucket) ? Posix.list(world.mounts[mount].path(SyncModel.buckets[bucket])) : nil
                }
            }
            return Self.disagreement(listings, world) == nil
        }
        if !converged, let problem = Self.disagreement(listings, world) {
            return failure("diverged", at: index, problem, world)
        }
        for mount in views.indices {
            for bucket in world.bucketsOf[mount] {
                if let problem = compare(mount, bucket, world) { return failure(problem.0, at: index, problem.1, world) }
            }
        }
        for (file, mounts) in rounds.touched(at: index) where mounts.count > 1 && restoredOutcomes?[file] == nil {
            guard let holder = views.indices.first(where: { world.bucketsOf[$0].contains(file.bucket) }),
                let listing = listings[holder][file.bucket]
            else { continue }
            if let problem = outcomeProblem(file, listing[file.name]) { return failure("outcome", at: index, problem, world) }
        }
        for (file, before) in (restoredOutcomes ?? [:]).sorted(by: { ($0.key.bucket, $0.key.key) < ($1.key.bucket, $1.key.key) }) {
            guard let holder = views.indices.first(where: { world.bucketsOf[$0].contains(file.bucket) }),
                let listing = listings[holder][file.bucket]
            else { continue }
            if let problem = restoredOutcomeProblem(file, listing[file.name], before: before) {
                return failure("outcome", at: index, problem, world)
            }
        }
        // The model is now what was seen.
        for mount in views.indices {
            for bucket in world.bucketsOf[mount] {
                views[mount][bucket] = BucketView(files: listings[mount][bucket] ?? [:], unknown: [])
            }
        }
        for bucket in SyncModel.buckets.indices {
            if let holder = views.indices.first(where: { world.bucketsOf[$0].contains(bucket) }) {
                agreed[bucket] = (listings[holder][bucket] ?? [:]).filter { $0.key.hasSuffix(".json") }
            }
        }
        return nil
    }

    /// Where the mounts' entities differ (name and JSON value), if anywhere.
    static func disagreement(_ listings: [[Listing?]], _ world: SyncWorld) -> String? {
        for bucket in SyncModel.buckets.indices {
            var first: (mount: Int, values: [String: NSDictionary?])?
            for mount in listings.indices where world.bucketsOf[mount].contains(bucket) {
                guard let listing = listings[mount][bucket] else { return "m\(mount) cannot list \(SyncModel.buckets[bucket])" }
                let values = listing.filter { $0.key.hasSuffix(".json") }.mapValues(SyncModel.object)
                if let (name, bytes) = listing.first(where: { $0.key.hasSuffix(".json") && SyncModel.object($0.value) == nil }) {
                    return "m\(mount) \(SyncModel.buckets[bucket])/\(name) holds what is not JSON: \(show(bytes))"
                }
                guard let reference = first else {
                    first = (mount, values)
                    continue
                }
                if values != reference.values {
                    let names = Set(values.keys).union(reference.values.keys).filter { values[$0] != reference.values[$0] }.sorted()
                    let show = { (value: NSDictionary??) -> String in
                        switch value {
                        case .none: return "missing"
                        case .some(.none): return "not JSON"
                        case .some(.some(let object)): return "\(object)"
                        }
                    }
                    let detail = names.map { name in
                        "\(name): m\(reference.mount) \(show(reference.values[name])), m\(mount) \(show(values[name]))"
                    }
                    return "\(SyncModel.buckets[bucket]) differs between mounts: " + detail.joined(separator: "; ")
                        .replacingOccurrences(of: "\n", with: " ")
                }
            }
        }
        return nil
    }

    /// A contested file's outcome, checked against what the mounts that touched it did last.
    private func outcomeProblem(_ file: ModelFile, _ bytes: [UInt8]?) -> String? {
        let last = effects[file] ?? [:]
        let story = last.keys.sorted().map { "m\($0) \(last[$0]!)" }.joined(separator: ", ")
        guard !last.isEmpty else {
            let now = bytes.flatMap(SyncModel.number)
            return now == numbersAtRoundStart[file] ? nil
                : "\(file) changed (n \(now.map(String.init) ?? "none")) though no operation on it took effect"
        }
        guard let bytes else {
            return last.values.contains(.removed) ? nil : "\(file) is gone, but no mount removed it last (\(story))"
        }
        var written: Set<Int?> = Set(last.values.compactMap { if case .wrote(let n) = $0 { return n }; return nil })
        guard !written.isEmpty else { return "\(file) is there, but every mount that touched it removed it last (\(story))" }
        if written.contains(nil) { return nil }
        written.insert(numbersAtRoundStart[file])
        return written.contains(SyncModel.number(bytes)) ? nil : "\(file) holds \(Self.show(bytes)): no mount wrote that n (\(story))"
    }

    /// A file in a round with a restore: it holds what a mount did to it in the round after all,
    /// or an outcome it could have had before the restore (`restoredOutcomes`).
    private func restoredOutcomeProblem(_ file: ModelFile, _ bytes: [UInt8]?, before: Set<ContestedEffect>) -> String? {
        let possible = before.union((effects[file] ?? [:]).values)
        let story = "before the restore: \(before.map { "\($0)" }.sorted().joined(separator: " or ")); since: "
            + (effects[file] ?? [:]).keys.sorted().map { "m\($0) \(effects[file]![$0]!)" }.joined(separator: ", ")
        guard let bytes else {
            return possible.contains(.removed) ? nil : "\(file) is gone, but no mount removed it (\(story))"
        }
        if possible.contains(.wrote(nil)) || possible.contains(.wrote(SyncModel.number(bytes))) { return nil }
        return "\(file) holds \(Self.show(bytes)): no mount wrote that n (\(story))"
    }

    /// A fresh mount shows what the mounts agreed on: the server holds exactly that.
    private func checkFreshMount(_ world: SyncWorld) throws -> SyncModelFailure? {
        let fresh = try world.freshMount()
        var seen: [Int: [String: NSDictionary?]] = [:]
        let expected = agreed.map { $0.mapValues(SyncModel.object) }
        let buckets = world.bucketsOf.reduce(Set<Int>()) { $0.union($1) }
        let matches = eventually(150) {
            for bucket in buckets {
                seen[bucket] = (Posix.list(fresh.path(SyncModel.buckets[bucket])) ?? [:]).mapValues(SyncModel.object)
            }
            return buckets.allSatisfy { seen[$0] == expected[$0] }
        }
        guard matches else {
            let detail = buckets.sorted().map { bucket in
                "\(SyncModel.buckets[bucket]): fresh mount \(seen[bucket]?.keys.sorted() ?? []), mounts \(expected[bucket].keys.sorted())"
            }
            return failure("server", at: steps.count - 1, "a fresh mount differs: " + detail.joined(separator: "; "), world)
        }
        return nil
    }
}
