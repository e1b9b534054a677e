import Foundation
import PropertyBased

// The steps of the whole-system model test (SyncModelTests), the seeded generator that makes a
// sequence of them, and the reference model that says what every mount must show.

/// A file of the model: `k<key>.json` in one of `SyncModel.buckets`.
struct ModelFile: Hashable, Sendable, CustomStringConvertible {
    let bucket: Int
    let key: Int

    var bucketName: String { SyncModel.buckets[bucket] }
    var name: String { "k\(key).json" }
    /// The local-only name a rename to a scratch name gives it (`mv k1.json k1.bak`).
    var scratchName: String { "k\(key).bak" }
    /// An editor's temporary file for it (written, fsynced, renamed over `name`).
    var temporaryName: String { ".k\(key).json.tmp" }
    var description: String { "\(bucketName)/\(name)" }
}

/// One step: an operation of one mount on its files, a pause, a fault, or a quiesce.
enum SyncStep: Hashable, Sendable, CustomStringConvertible {
    /// open(O_CREAT|O_TRUNC), write a JSON object, (fsync,) close.
    case save(mount: Int, ModelFile, value: Int, fsync: Bool)
    /// A save of bytes that are not JSON (a half-typed file): kept locally, not sent.
    case saveInvalid(mount: Int, ModelFile, value: Int)
    /// truncate(2) to 0 bytes: an empty file, not JSON.
    case truncate(mount: Int, ModelFile)
    /// An editor's save: a temporary file written and fsynced, renamed over the file.
    case editorsSave(mount: Int, ModelFile, value: Int)
    /// rename(2) of one entity's file onto another's name (over it if it exists).
    case rename(mount: Int, ModelFile, to: ModelFile)
    /// rename(2) of an entity's file to a local-only name.
    case renameToScratch(mount: Int, ModelFile)
    /// rename(2) of that local-only file back onto the entity's name.
    case renameScratchOver(mount: Int, ModelFile)
    case unlink(mount: Int, ModelFile)
    /// A save, then at once an unlink of the same file (a script's temporary output).
    case saveThenUnlink(mount: Int, ModelFile, value: Int)
    /// mkdir of a bucket at the mount's top: the mount starts syncing it.
    case makeBucket(mount: Int, bucket: Int)
    case pause(milliseconds: Int)
    /// kill -9 of the server; `restartServer` starts it again on its data and port.
    case killServer
    case restartServer
    /// SIGSTOP of the server; `continueServer` sends SIGCONT.
    case stopServer
    case continueServer
    /// A copy of the server's data directory, taken while it is paused (a file backup); the
    /// world keeps the last few.
    case backupServer
    /// kill -9 of the server, its data replaced by one of the backups (`backup`: which, counted
    /// back from the newest), and the server started on it: every mount finds a server that
    /// lost what came after the backup (issue 35).
    case restoreServer(backup: Int)
    /// kill -9 of a mount, which is then mounted again on its store.
    case killMount(Int)
    /// echo 2 > /proc/sys/vm/drop_caches: the kernel forgets the inodes it holds, and every
    /// listing nothing holds leaves the mounts' memory (they mount with every listing
    /// releasable), to be read from the store again at the next use (issue 40).
    case forgetInodes
    /// Every mount waits until the server has its changes and they agree; then all is checked.
    case quiesce

    var mount: Int? {
        switch self {
        case .save(let m, _, _, _), .saveInvalid(let m, _, _), .truncate(let m, _), .editorsSave(let m, _, _),
            .rename(let m, _, _), .renameToScratch(let m, _), .renameScratchOver(let m, _), .unlink(let m, _),
            .saveThenUnlink(let m, _, _), .makeBucket(let m, _), .killMount(let m):
            return m
        default: return nil
        }
    }

    /// The entities' files the step writes or removes.
    var files: [ModelFile] {
        switch self {
        case .save(_, let f, _, _), .saveInvalid(_, let f, _), .truncate(_, let f), .editorsSave(_, let f, _),
            .renameToScratch(_, let f), .renameScratchOver(_, let f), .unlink(_, let f), .saveThenUnlink(_, let f, _):
            return [f]
        case .rename(_, let from, let to): return [from, to]
        default: return []
        }
    }

    /// The operation's kind, for coverage lines and failure signatures.
    var kind: String {
        switch self {
        case .save(_, _, _, let fsync): return fsync ? "save+fsync" : "save"
        case .saveInvalid: return "save-invalid"
        case .truncate: return "truncate"
        case .editorsSave: return "editors-save"
        case .rename: return "rename"
        case .renameToScratch: return "rename-to-scratch"
        case .renameScratchOver: return "rename-scratch-over"
        case .unlink: return "unlink"
        case .saveThenUnlink: return "save-then-unlink"
        case .makeBucket: return "mkdir"
        case .pause: return "pause"
        case .killServer: return "kill-server"
        case .restartServer: return "restart-server"
        case .stopServer: return "stop-server"
        case .continueServer: return "continue-server"
        case .backupServer: return "backup-server"
        case .restoreServer: return "restore-server"
        case .killMount: return "kill-mount"
        case .forgetInodes: return "drop-caches"
        case .quiesce: return "quiesce"
        }
    }

    var description: String {
        switch self {
        case .save(let m, let f, let v, let fsync): return "m\(m) save\(fsync ? "+fsync" : "") \(f) n=\(v)"
        case .saveInvalid(let m, let f, let v): return "m\(m) save-invalid \(f) n=\(v)"
        case .truncate(let m, let f): return "m\(m) truncate \(f)"
        case .editorsSave(let m, let f, let v): return "m\(m) editors-save \(f) n=\(v)"
        case .rename(let m, let f, let t): return "m\(m) rename \(f) -> \(t.name)"
        case .renameToScratch(let m, let f): return "m\(m) rename \(f) -> \(f.scratchName)"
        case .renameScratchOver(let m, let f): return "m\(m) rename \(f.bucketName)/\(f.scratchName) -> \(f.name)"
        case .unlink(let m, let f): return "m\(m) unlink \(f)"
        case .saveThenUnlink(let m, let f, let v): return "m\(m) save-then-unlink \(f) n=\(v)"
        case .makeBucket(let m, let b): return "m\(m) mkdir \(SyncModel.buckets[b])"
        case .pause(let ms): return "pause \(ms) ms"
        case .killMount(let m): return "kill -9 m\(m), mount again"
        case .restoreServer(let backup): return "restore the server from backup -\(backup + 1)"
        default: return kind
        }
    }
}

enum SyncModel {
    /// `notes` every mount has from the start; `extra` a mount has once it made it (mkdir).
    static let buckets = ["notes", "extra"]
    static let keysPerBucket = 6
    static let mountCount = 3

    /// A JSON object's bytes as a script writes them (compact, one line): the mount keeps them
    /// exactly, and other mounts render the value as pretty JSON.
    static func bytes(value: Int, mount: Int) -> [UInt8] {
        Array("{\"by\": \"m\(mount)\", \"n\": \(value), \"text\": \"note \(value) from m\(mount)\"}\n".utf8)
    }

    /// A half-typed save: not JSON.
    static func invalidBytes(value: Int, mount: Int) -> [UInt8] {
        Array("{\"by\": \"m\(mount)\", \"n\": \(value),".utf8)
    }

    /// The file's JSON object, or nil when it is not one.
    static func object(_ bytes: [UInt8]) -> NSDictionary? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? NSDictionary
    }

    /// The `n` of a value written by a step.
    static func number(_ bytes: [UInt8]) -> Int? {
        (object(bytes)?["n"] as? NSNumber)?.intValue
    }

    /// The sequence of a seed: rounds of 10–40 steps, each ended by a quiesce. In a round most
    /// keys are planned for one mount (the others only see its changes), a few for any mount
    /// (concurrent edits, removals and renames of one key); the ownership the checks use is
    /// worked out from the steps themselves (`SyncRounds`), so any subsequence of a sequence is
    /// a sequence too (shrinking).
    /// `restores`: backups of the server and restores from them are faults too (issue 35).
    static func generate(seed: UInt64, steps count: Int, restores withRestores: Bool = false) -> [SyncStep] {
        var random = Xoshiro(seed: (seed, seed ^ 0x9E37_79B9_7F4A_7C15, ~seed, seed &* 0xBF58_476D_1CE4_E5B9))
        // Backups and restores draw from a stream of their own: a seed's other steps stay what
        // they were before restores were faults too.
        var restores = Xoshiro(seed: (~seed, seed &+ 0x5851_F42D_4C95_7F2D, seed ^ 0x1405_7B7E_F767_814F, seed &* 3))
        // As do the kernel's forgets: a few per round, between any two steps.
        var forgets = Xoshiro(seed: (seed &* 5, ~seed ^ 0x2545_F491_4F6C_DD1D, seed &+ 0x6A09_E667_F3BC_C909, seed ^ 0xBB67_AE85))
        var backups = 0
        var steps: [SyncStep] = []
        var hasExtra = [Bool](repeating: false, count: mountCount)
        var serverDown = false
        var serverStopped = false
        var value = 0
        while steps.count < count {
            // A round's plan: each key's mount, or nil for any mount.
            var plan: [ModelFile: Int?] = [:]
            for bucket in buckets.indices {
                for key in 0..<keysPerBucket {
                    plan[ModelFile(bucket: bucket, key: key)] = Int.random(in: 0..<100, using: &random) < 20
                        ? .some(nil) : .some(Int.random(in: 0..<mountCount, using: &random))
                }
            }
            if let lacking = hasExtra.indices.filter({ !hasExtra[$0] }).randomElement(using: &random),
                Int.random(in: 0..<100, using: &random) < 30
            {
                steps.append(.makeBucket(mount: lacking, bucket: 1))
                hasExtra[lacking] = true
            }
            let length = Int.random(in: 10...40, using: &random)
            // Where in the round a backup is taken or the server restored from one, if at all.
            let restoreRoll = Int.random(in: 0..<100, using: &restores)
            let restoreAt = Int.random(in: 0..<length, using: &restores)
            let whichBackup = Int.random(in: 0..<3, using: &restores)
            for position in 0..<length {
                if Int.random(in: 0..<100, using: &forgets) < 8 { steps.append(.forgetInodes) }
                if withRestores, position == restoreAt, !serverDown {
                    if backups == 0 || restoreRoll < 25 {
                        steps.append(.backupServer)
                        backups += 1
                    } else if restoreRoll < 45 {
                        steps.append(.restoreServer(backup: min(whichBackup, backups - 1)))
                        serverStopped = false
                    }
                }
                let roll = Int.random(in: 0..<100, using: &random)
                if roll < 5 {
                    switch Int.random(in: 0..<4, using: &random) {
                    case 0:
                        steps.append(serverDown ? .restartServer : .killServer)
                        serverDown.toggle()
                        serverStopped = false
                    case 1 where !serverDown:
                        steps.append(serverStopped ? .continueServer : .stopServer)
                        serverStopped.toggle()
                    default:
                        steps.append(.killMount(Int.random(in: 0..<mountCount, using: &random)))
                    }
                    continue
                }
                if roll < 20 {
                    // Gaps of 0–100 ms, mostly short.
                    let gap = Int.random(in: 0..<100, using: &random) < 70
                        ? Int.random(in: 1...10, using: &random) : Int.random(in: 11...100, using: &random)
                    steps.append(.pause(milliseconds: gap))
                    continue
                }
                let mount = Int.random(in: 0..<mountCount, using: &random)
                let bucket = hasExtra[mount] && Bool.random(using: &random) ? 1 : 0
                let mine = plan.keys.filter { $0.bucket == bucket && (plan[$0]! == nil || plan[$0]! == mount) }
                    .sorted { $0.key < $1.key }
                guard let file = mine.randomElement(using: &random) else { continue }
                value += 1
                let kind = Int.random(in: 0..<100, using: &random)
                switch kind {
                case 0..<24: steps.append(.save(mount: mount, file, value: value, fsync: Int.random(in: 0..<3, using: &random) == 0))
                case 24..<38: steps.append(.saveThenUnlink(mount: mount, file, value: value))
                case 38..<48: steps.append(.unlink(mount: mount, file))
                case 48..<58:
                    let target = mine.filter { $0 != file }.randomElement(using: &random) ?? file
                    steps.append(.rename(mount: mount, file, to: target))
                case 58..<70: steps.append(.editorsSave(mount: mount, file, value: value))
                case 70..<77: steps.append(.renameToScratch(mount: mount, file))
                case 77..<84: steps.append(.renameScratchOver(mount: mount, file))
                case 84..<93: steps.append(.saveInvalid(mount: mount, file, value: value))
                default: steps.append(.truncate(mount: mount, file))
                }
            }
            steps.append(.quiesce)
            serverDown = false
            serverStopped = false
        }
        return steps
    }
}

/// Which mounts touch each file in each round (the steps between two quiesces): a file one
/// mount alone touches is that mount's for the round, and every mount must show exactly what
/// the model says of it; a file several touch is contested, and its outcome must be one the
/// concurrency model allows.
struct SyncRounds {
    /// For each step, its round's touches: file -> mounts.
    private var touchesAt: [[ModelFile: Set<Int>]] = []

    init(_ steps: [SyncStep]) {
        var start = 0
        while start < steps.count {
            let end = steps[start...].firstIndex(of: .quiesce).map { $0 + 1 } ?? steps.count
            var touches: [ModelFile: Set<Int>] = [:]
            for step in steps[start..<end] {
                guard let mount = step.mount else { continue }
                for file in step.files { touches[file, default: []].insert(mount) }
            }
            touchesAt += Array(repeating: touches, count: end - start)
            start = end
        }
    }

    /// The mounts that touch `file` in the round of step `index`.
    func touches(_ file: ModelFile, at index: Int) -> Set<Int> {
        touchesAt.indices.contains(index) ? touchesAt[index][file] ?? [] : []
    }

    func touched(at index: Int) -> [ModelFile: Set<Int>] {
        touchesAt.indices.contains(index) ? touchesAt[index] : [:]
    }
}

/// What one mount shows of one bucket, as far as the model knows it.
struct BucketView: Equatable {
    /// name -> bytes; a name not here (and not in `unknown`) is absent.
    var files: [String: [UInt8]] = [:]
    /// Names whose content the model cannot know until the next quiesce: files another mount
    /// changes in this round.
    var unknown: Set<String> = []
}

/// What a mount's operation did to a contested file in this round, for the outcome check.
enum ContestedEffect: Hashable {
    /// Wrote a value (`n`; nil when it came from a file the model did not know).
    case wrote(Int?)
    case removed
}
