import CStatx
import Foundation

/// Which history of its database a server serves (issue 35).
///
/// A database restored from a backup counts on from the backup's cv, and holds the backup's
/// changes: a cv handed out before the backup was taken names the same change there, so the
/// tags of `ChangeSequence` alone would take it, and catch its holder up with changes it has
/// seen and perhaps undone since (a note it removed, created again by the catch-up). So each
/// database records where it lives (its `origin`, which a restore or a copy changes) and a
/// random number for its history. A server that finds itself on a database whose origin is not
/// the recorded one draws a new number, and every cv on the wire carries it: each client's cv is
/// answered `cv:?` once, and the client re-indexes and sends again what the backup lacks.
///
/// Origins: a SQLite file's inode and birth time (a copy is a new file, even where a freed
/// inode number is given again); a PostgreSQL database's OID and its `server_state` table's
/// (`pg_restore` makes both anew, into a new database or with `--clean`). A physical copy of a
/// PostgreSQL cluster (`pg_basebackup`) keeps them, and so is not seen as a restore.
struct ServerHistory: Sendable, Equatable {
    /// What a server found when it opened its database.
    enum Start: Sendable, Equatable {
        /// The database is where its history was last served: cvs handed out before stand.
        case continued
        /// A new database: nothing was handed out yet.
        case new
        /// The database is not where it was last served (restored from a backup, or copied), or
        /// it was served by a version without histories: a new history begins.
        case moved
    }

    /// The number every cv's tag carries (48 bits, as the tag; never zero).
    var number: UInt64
    var start: Start

    /// The history a database continues or begins, given what it recorded (`recordedNumber`,
    /// `recordedOrigin`: nil when it never did), where it is now and whether it took changes.
    /// `draw` makes a new history's number.
    static func establish(
        recordedNumber: Int64?, recordedOrigin: String?, origin: String, hasChanges: Bool,
        draw: () -> UInt64 = { UInt64.random(in: 1...ChangeSequence.tagMask) }
    ) -> ServerHistory {
        if let recordedNumber, recordedOrigin == origin {
            return ServerHistory(number: UInt64(bitPattern: recordedNumber), start: .continued)
        }
        return ServerHistory(number: draw(), start: recordedOrigin != nil || hasChanges ? .moved : .new)
    }

    /// The stored form of `number` (a signed 64-bit integer column).
    var storedNumber: Int64 { Int64(bitPattern: number) }

    /// The origin of the SQLite file at `path`: its inode and birth time (the inode alone when
    /// the file system keeps no birth time). Foundation's creation date is the change time on
    /// Linux, which every write moves: statx's birth time is the file's own.
    static func fileOrigin(path: String) throws -> String {
        var inode: UInt64 = 0
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        switch cstatx_identity(path, &inode, &seconds, &nanoseconds) {
        case 0: return "sqlite:\(inode):\(seconds).\(nanoseconds)"
        case 1: return "sqlite:\(inode)"
        default: throw SyncServerError.dataDirectory(path: path, reason: "statx: \(String(cString: strerror(errno)))")
        }
    }

    /// The SQL that reads a PostgreSQL database's origin.
    static let postgresOriginQuery = """
        SELECT 'postgres:' || d.oid::text || ':' || 'server_state'::regclass::oid::text
        FROM pg_database d WHERE d.datname = current_database()
        """

    /// What a server logs when it begins a new history on a database that had one.
    static let movedMessage =
        "this database is not where it was last served (restored from a backup, copied, or served by a version before 2026-11-30): "
        + "it begins a new history; "
        + "every client loads its index once (cv:?), and bucketfs mounts send again what the backup lacks"
}
